"""The Triton kind's ``forced_wait_probe`` hook: the probe variant of one (async site, iteration) of a
program, written as TTGIR, compiled to a cubin, and described in ``probe_descriptor.json``.

The ``forced_wait_probe`` Transform handler (:mod:`argus_rt.runtime.async_handlers`) calls it through
the kind registry; the probe's transform itself is :mod:`argus_rt.kinds.triton.probes`.
"""
from __future__ import annotations

import json
from pathlib import Path

from .async_sites import discover
from .kernel_check import compile_ttgir
from .probes import make_forced_wait_probe
from .program import program_ttgir


def build_forced_wait_probe(program, probe, outdir: Path) -> dict[str, Path]:
    """Build ``probe`` (``program.variant_of("probe", op_id=..., iteration=...)``) under ``outdir``:
    its outputs ``ttgir``, ``cubin`` and ``probe`` (the descriptor the probe run reads)."""
    outdir = Path(outdir)
    op_id, iteration = probe.params["op_id"], probe.params["iteration"]
    ttgir, iterations = program_ttgir(program)
    d = discover(ttgir, None, iterations=iterations)
    made = make_forced_wait_probe(ttgir, d, op_id, iteration)
    compiled = compile_ttgir(made.ttgir, outdir, "probe", capability=int(program.launch.get("capability", 90)))
    cubin = outdir / "probe.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    desc = made.descriptor()
    desc.update(program=probe.id, base_program=program.id, shared_bytes=compiled.metadata.shared,
                global_scratch_bytes=compiled.metadata.global_scratch_size)
    descriptor = outdir / "probe_descriptor.json"
    descriptor.write_text(json.dumps(desc, sort_keys=True), encoding="utf-8")
    return {"ttgir": outdir / "probe.ttgir", "cubin": cubin, "probe": descriptor}
