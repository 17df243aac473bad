"""The Triton runtime handlers: the ``async_discovery`` Control and the ``forced_wait_probe``
Transform (both ``kind="triton"``).

Runtime handlers, so they sit above :mod:`argus_rt.runtime` (as :mod:`argus_rt.probe_expander` does);
the work they wrap stays in :mod:`argus_rt.compiler.triton_discovery` and
:mod:`argus_rt.compiler.probes`, which import no runtime.
"""
from __future__ import annotations

import json

from .compiler.async_sites import discover
from .compiler.probes import ProbeError, compile_ttgir, make_forced_wait_probe
from .compiler.triton_discovery import async_sites_document
from .compiler.triton_program import program_ttgir
from .runtime.handlers import register_control, register_transform


@register_control("async_discovery", kind="triton")
def async_discovery_task(ctx) -> dict:
    """Control handler ``async_discovery`` for Triton programs: TTGIR + async_sites JSON."""
    ttgir, iterations = program_ttgir(ctx.program)
    d = discover(ttgir, ctx.region, iterations=iterations)
    ttgir_path = ctx.outdir / "reference.ttgir"
    ttgir_path.write_text(ttgir, encoding="utf-8")
    return {"async_sites": ctx.write_json("async_sites", async_sites_document(d, ctx.program.id)),
            "ttgir": ttgir_path}


@register_transform("forced_wait_probe", kind="triton")
def forced_wait_probe_task(ctx) -> dict:
    """Transform handler ``forced_wait_probe`` (Triton): probe TTGIR + cubin for one (op, iteration)."""
    op_id, iteration = ctx.config["op_id"], ctx.config["iteration"]
    ttgir, iterations = program_ttgir(ctx.program)
    d = discover(ttgir, None, iterations=iterations)
    probe = make_forced_wait_probe(ttgir, d, op_id, iteration)
    pv = ctx.program.variant_of("probe", op_id=op_id, iteration=iteration)
    expected = ctx.config.get("expect_program")
    if expected and pv.id != expected:
        raise ProbeError(f"probe variant of {ctx.program.id} hashes to {pv.id}, the plan expected {expected}")
    compiled = compile_ttgir(probe.ttgir, ctx.outdir, "probe", capability=int(ctx.program.launch.get("capability", 90)))
    cubin = ctx.outdir / "probe.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    desc = probe.descriptor()
    desc.update(program=pv.id, base_program=ctx.program.id, shared_bytes=compiled.metadata.shared,
                global_scratch_bytes=compiled.metadata.global_scratch_size)
    (ctx.outdir / "probe_descriptor.json").write_text(json.dumps(desc, sort_keys=True), encoding="utf-8")
    return {"program": ctx.write_program(pv), "ttgir": ctx.outdir / "probe.ttgir", "cubin": cubin,
            "probe": ctx.outdir / "probe_descriptor.json"}
