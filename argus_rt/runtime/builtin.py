"""Built-in Transform handler ``variant``: make a program variant (trace-free, marker-only, traced).

The variant descriptor (a :class:`ProgramVersion` JSON) is always published as ``"program"``.
When a builder is registered for the program kind (``register_transform("build", fn, kind="cuda")``)
it is called with the same context plus ``ctx.variant`` and may publish compiled artifacts too;
without one, backends build the variant themselves from the descriptor.
"""
from __future__ import annotations

from .handlers import HandlerError, UnknownHandlerError, get_handler, register_transform


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
