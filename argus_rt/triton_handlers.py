"""The Triton runtime handlers: the ``async_discovery`` Control and the ``forced_wait_probe``
Transform (both ``kind="triton"``).

Runtime handlers, so they sit above :mod:`argus_rt.runtime` (as :mod:`argus_rt.probe_expander` does);
the work they wrap is the Triton kind's (:mod:`argus_rt.kinds.triton`), which imports no runtime. This
module stays outside the kind's folder because it registers itself with the runtime at import: the
kind sits below the tool adapters, which sit below the runtime, and a layer contract cannot put one
module of a package above a layer its package is below. It can move into the kind once the runtime's
handler table holds references to handler functions (issue 18, item 3) instead of modules that
register themselves.
"""
from __future__ import annotations

import json

from .kinds.triton.async_sites import discover
from .kinds.triton.discovery import async_sites_document
from .kinds.triton.probes import ProbeError, compile_ttgir, make_forced_wait_probe
from .kinds.triton.program import program_ttgir
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
