"""Discovery (a Control task) for Triton programs: the ``async_discovery`` handler and its JSON document.

The work is split by job:

* :mod:`argus_rt.compiler.mlir_ir` parses TTGIR with Triton's MLIR bindings (the only module that
  imports them); :mod:`argus_rt.compiler.ttgir_text` reads what only the text holds;
  :mod:`argus_rt.compiler.ttgir_module` joins both into the :class:`Module` everyone reads;
* :mod:`argus_rt.compiler.ttgir_regions`: Argus markers and region membership by call stack;
* :mod:`argus_rt.compiler.loop_trips`: per-trip interpretation of loop-carried scalars;
* :mod:`argus_rt.compiler.async_sites`: the async sites and their completion conditions;
* :mod:`argus_rt.compiler.triton_program`: a program's TTGIR (kernel import, autotune unwrap).

This module keeps the names callers import from it (``discover``, ``Module``, ``TtgirError`` ...).
"""
from __future__ import annotations

from .async_sites import (  # noqa: F401
    CP_ASYNC,
    CP_ASYNC_COMMIT,
    CP_ASYNC_WAIT,
    SITE_KINDS,
    TMA_LOAD,
    UNSUPPORTED_ASYNC,
    WGMMA,
    WGMMA_WAIT,
    Completion,
    Discovery,
    DiscoveryError,
    Instance,
    Site,
    UnsupportedOpError,
    discover,
    stable_op_id,
    tma_parts,
)
from .loop_trips import LoopError, simulate_loop  # noqa: F401
from .triton_program import KernelConfigError, program_ttgir  # noqa: F401
from .ttgir_locations import Location, SourceLoc  # noqa: F401
from .ttgir_module import ForLoop, Module, Op, TtgirError, element_bytes, memdesc_shape, parse_module  # noqa: F401
from .ttgir_regions import HELPER_REGIONS, RegionSpan, region_spans  # noqa: F401

ASYNC_SITES_FORMAT = "argus.async_sites/1"


def async_sites_document(d: Discovery, program_id: str) -> dict:
    """The Control task's output: sites with op IDs; ``iterations`` lists the *probe* candidates
    (TMA loads only), ``logical_iterations`` every iteration a site serves. ``regions`` lists each
    region span (one per helper call site: ``helper_regions`` says so)."""
    sites = []
    for s in d.sites:
        doc = s.to_json()
        doc["logical_iterations"] = s.iterations
        doc["iterations"] = s.iterations if s.kind == "tma_load" else []
        doc["completion_text"] = s.completion.describe()
        sites.append(doc)
    return {"format": ASYNC_SITES_FORMAT, "program": program_id, "kernel": d.kernel, "region": d.region,
            "iterations": d.iterations, "sites": sites, "unsupported": d.unsupported,
            "helper_regions": d.helper_regions, "regions": [s.to_json() for s in d.spans]}


def async_discovery_task(ctx) -> dict:
    """Control handler ``async_discovery`` for Triton programs: TTGIR + async_sites JSON."""
    ttgir, iterations = program_ttgir(ctx.program)
    d = discover(ttgir, ctx.region, iterations=iterations)
    ttgir_path = ctx.outdir / "reference.ttgir"
    ttgir_path.write_text(ttgir, encoding="utf-8")
    return {"async_sites": ctx.write_json("async_sites", async_sites_document(d, ctx.program.id)),
            "ttgir": ttgir_path}


def _register_handlers() -> None:
    try:
        from ..runtime.handlers import register_control
    except ImportError:  # the runtime is optional for standalone discovery
        return
    register_control("async_discovery", async_discovery_task, kind="triton")


_register_handlers()
