"""Built-in Transform handler ``variant``: make a program variant (trace-free, marker-only, traced).

The variant descriptor (a :class:`ProgramVersion` JSON) is always published as ``"program"``.
When a builder is registered for the program kind (``register_transform("build", fn, kind="cuda")``)
it is called with the same context plus ``ctx.variant`` and may publish compiled artifacts too;
without one, backends build the variant themselves from the descriptor.

The CUDA kind's builder publishes nothing: on a host that runs the collections
(:func:`.workers.warm_workers_default`) it compiles the variant into the content-hash build cache on
this CPU worker, so the variants build in parallel while the device worker warms up, and the
collection finds its cubin built. A failed build is left to the collection, which builds again and
reports it, as without this builder.
"""
from __future__ import annotations

from .handlers import HandlerError, UnknownHandlerError, get_handler, register_transform
from .workers import warm_workers_default


@register_transform("variant")
def make_variant(ctx):
    variant = ctx.config["variant"]
    program = ctx.program.variant_of(variant, **ctx.config.get("params", {}))
    expected = ctx.config.get("expect_program")
    if expected and program.id != expected:
        raise HandlerError(f"variant {variant!r} of {ctx.program.id} hashes to {program.id}, plan expected {expected}")
    outputs = {"program": ctx.write_program(program)}
    try:
        build = get_handler("transform", "build", ctx.program.kind)
    except UnknownHandlerError:
        return outputs
    ctx.variant = program
    outputs.update(build(ctx) or {})
    return outputs


@register_transform("build", kind="cuda")
def prebuild_cuda_variant(ctx):
    if warm_workers_default():
        from ..kinds.cuda.run import prebuild

        prebuild(ctx.variant)
    return {}
