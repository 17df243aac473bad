"""Discovery for Triton programs: its JSON document, and the kind's ``discover_async_sites`` hook
(:func:`discover_async_sites`), which the ``async_discovery`` Control handler
(:mod:`argus_rt.runtime.async_handlers`) calls through the kind registry.

The work is split by job:

* :mod:`argus_rt.kinds.triton.mlir_ir` parses TTGIR with Triton's MLIR bindings (the only module that
  imports them); :mod:`argus_rt.kinds.triton.ttgir_text` reads what only the text holds;
  :mod:`argus_rt.kinds.triton.ttgir_module` joins both into the :class:`Module` everyone reads;
* :mod:`argus_rt.kinds.triton.ttgir_regions`: Argus markers and region membership by call stack;
* :mod:`argus_rt.kinds.triton.loop_trips`: per-trip interpretation of loop-carried scalars;
* :mod:`argus_rt.kinds.triton.async_sites`: the async sites and their completion conditions;
* :mod:`argus_rt.kinds.triton.program`: a program's TTGIR (kernel import, autotune unwrap).

This module keeps the names callers import from it (``discover``, ``program_ttgir``, ``DiscoveryError``,
``TtgirError``, ``UnsupportedOpError``, ``Module``, ``simulate_loop``); the rest live in the modules above.
"""
from __future__ import annotations

from pathlib import Path

# DiscoveryError, UnsupportedOpError, simulate_loop, Module, TtgirError: imported from here by callers
# (argus_rt.cli looks DiscoveryError and TtgirError up in this module)
from .async_sites import PROBE_KINDS, Discovery, DiscoveryError, UnsupportedOpError, discover  # noqa: F401
from .loop_trips import simulate_loop  # noqa: F401
from .program import program_ttgir  # noqa: F401
from .ttgir_module import Module, TtgirError  # noqa: F401

ASYNC_SITES_FORMAT = "argus.async_sites/1"


def async_sites_document(d: Discovery, program_id: str) -> dict:
    """The Control task's output: sites with op IDs; ``iterations`` lists the *probe* candidates
    (every family of :data:`PROBE_KINDS`: TMA loads, cp.async copies, WGMMA dots; the expander plans
    one probe run per site and iteration), ``logical_iterations`` every iteration a site serves.
    ``regions`` lists each region span (one per helper call site: ``helper_regions`` says so)."""
    sites = []
    for s in d.sites:
        doc = s.to_json()
        doc["logical_iterations"] = s.iterations
        doc["iterations"] = s.iterations if s.kind in PROBE_KINDS else []
        doc["completion_text"] = s.completion.describe()
        sites.append(doc)
    return {"format": ASYNC_SITES_FORMAT, "program": program_id, "kernel": d.kernel, "region": d.region,
            "iterations": d.iterations, "sites": sites, "unsupported": d.unsupported,
            "helper_regions": d.helper_regions, "regions": [s.to_json() for s in d.spans]}


def discover_async_sites(program, region: str | None, outdir: Path) -> tuple[dict, dict[str, Path]]:
    """The kind's ``discover_async_sites`` hook: the ``argus.async_sites/1`` document of ``region``
    (None: the whole kernel) and the TTGIR it was read from, written as ``outdir/reference.ttgir``."""
    ttgir, iterations = program_ttgir(program)
    d = discover(ttgir, region, iterations=iterations)
    ttgir_path = Path(outdir) / "reference.ttgir"
    ttgir_path.write_text(ttgir, encoding="utf-8")
    return async_sites_document(d, program.id), {"ttgir": ttgir_path}
