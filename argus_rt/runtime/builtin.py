"""Built-in Transform handler ``variant``: make a program variant (trace-free, marker-only, traced).

The variant descriptor (a :class:`ProgramVersion` JSON) is always published as ``"program"``.

Where collections run on this host (:func:`.workers.warm_workers_default`), a kind with a
``prebuild`` hook (:mod:`argus_rt.kinds.registry`; the CUDA kind's compiles with nvcc) builds the
variant into its build cache on this CPU worker, so the variants build in parallel while the device
worker warms up, and the collection finds them built. The hook publishes nothing, and a failed build
is left to the collection, which builds again and reports it, as without the hook.
"""
from __future__ import annotations

from ..kinds.registry import find_kind
from .handlers import HandlerError, register_transform
from .workers import warm_workers_default


@register_transform("variant")
def make_variant(ctx):
    variant = ctx.config["variant"]
    program = ctx.program.variant_of(variant, **ctx.config.get("params", {}))
    expected = ctx.config.get("expect_program")
    if expected and program.id != expected:
        raise HandlerError(f"variant {variant!r} of {ctx.program.id} hashes to {program.id}, plan expected {expected}")
    outputs = {"program": ctx.write_program(program)}
    kind = find_kind(ctx.program.kind)
    if kind is not None and kind.prebuild and warm_workers_default():
        kind.call("prebuild", program)
    return outputs
