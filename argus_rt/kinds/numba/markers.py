"""Argus region markers inside ``numba.cuda.jit`` kernels.

Usage, in a kernel module::

    from numba import cuda
    from argus_rt.kinds.numba import markers as argus

    @cuda.jit
    def kernel(x, out, n):
        argus.begin("reduce/load")
        ...
        argus.end("reduce/load")
        for it in range(k):
            argus.begin_at("reduce/step", it)      # a coordinate (iteration) for the trace build
            ...
            argus.end_at("reduce/step", it)

Names are qualified region names (string literals); the region ID is
:func:`argus_rt.regions.region_id` of the name, computed while numba types the call. What a marker
compiles to depends on the build mode Argus compiles the kernel in (``ARGUS_NUMBA_MARKERS``, set by
:mod:`argus_rt.kinds.numba.compile` in its own process; unset, as in a user's own numba run, is 0):

* 0 (trace-free): nothing; the kernel's PTX is that of the same kernel without markers;
* 1 (marker-only): inline PTX, three ``pmevent.mask`` immediates (SASS ``PMTRIG``), the footprint of
  ``ARGUS_BEGIN``/``ARGUS_END`` in a CUDA marker-only build (:mod:`argus_rt.markers`);
* 2 (trace): a call of the linked device function ``argus_numba_emit(kind, id, coord)``, which is
  ``argus_detail::emit`` of ``csrc/argus/argus.cuh`` compiled with ``ARGUS_MODE=2``
  (:mod:`argus_rt.kinds.numba.build`): the CUDA kind's ring protocol, not a copy of it.

Every marker a compile types is recorded (:data:`SEEN`), so the compile can report the regions a
kernel marks.
"""
from __future__ import annotations

import os

from llvmlite import ir
from numba import types

try:
    from numba.cuda.extending import intrinsic
except ImportError:  # numba-cuda before numba.cuda.extending had intrinsic
    from numba.core.extending import intrinsic

from ...markers import marker_immediates
from ...regions import region_id
from ...trace.layout import COORD_NONE, KIND_BEGIN, KIND_END
from .launch import MODE_ENV

EMIT_SYMBOL = "argus_numba_emit"  # extern "C" __device__ void argus_numba_emit(unsigned, unsigned, unsigned)
SEEN: list[tuple[str, str]] = []  # (kind, region name) of each marker typed in this process


def mode() -> int:
    """The build mode markers compile to now: 0 trace-free, 1 marker-only, 2 trace."""
    value = os.environ.get(MODE_ENV, "0")
    if value not in ("0", "1", "2"):
        raise ValueError(f"{MODE_ENV}={value!r}; valid: 0 (trace-free), 1 (marker-only), 2 (trace)")
    return int(value)


def _pmtrig(builder, kind: str, rid: int) -> None:
    words = marker_immediates(kind, rid)
    text = "".join(f"pmevent.mask 0x{w:04x};\n\t" for w in words)
    # side_effect, no memory clobber: like ARGUS_PMTRIG_ in argus_markers.cuh, the marker neither
    # disappears nor changes how the code around it touches memory
    builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "", side_effect=True), [])


def _emit_call(builder, kind: str, rid: int, coord) -> None:
    """``argus_numba_emit(ARGUS_KIND_BEGIN|END, id, coord)``; ``coord`` an LLVM integer or None (no coordinate)."""
    i32 = ir.IntType(32)
    if coord is None:
        coord = ir.Constant(i32, COORD_NONE)
    elif coord.type.width != 32:
        coord = builder.trunc(coord, i32) if coord.type.width > 32 else builder.zext(coord, i32)
    fn = builder.module.globals.get(EMIT_SYMBOL)
    if fn is None:
        fn = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), [i32, i32, i32]), EMIT_SYMBOL)
    code = KIND_BEGIN if kind == "begin" else KIND_END
    builder.call(fn, [ir.Constant(i32, code), ir.Constant(i32, rid), coord])


def _marker(kind: str, with_coord: bool):
    def typer(typingctx, name, *coord):
        if not isinstance(name, types.StringLiteral):
            return None  # numba retries with literal argument types; a non-literal name stays untyped
        if with_coord and not (len(coord) == 1 and isinstance(coord[0], types.Integer)):
            return None
        rid = region_id(name.literal_value)
        SEEN.append((kind, name.literal_value))

        def codegen(context, builder, signature, args):
            m = mode()
            if m == 1:
                _pmtrig(builder, kind, rid)
            elif m == 2:
                _emit_call(builder, kind, rid, args[1] if with_coord else None)
            return context.get_dummy_value()

        return types.void(name, *coord), codegen

    if with_coord:
        def marker(typingctx, name, coord):
            return typer(typingctx, name, coord)
    else:
        def marker(typingctx, name):
            return typer(typingctx, name)
    marker.__name__ = f"{kind}_at" if with_coord else kind
    return intrinsic(marker)


begin = _marker("begin", False)
begin.__doc__ = "Mark the beginning of region ``name`` (a qualified name string literal)."
end = _marker("end", False)
end.__doc__ = "Mark the end of region ``name``; must match the innermost open :func:`begin`."
begin_at = _marker("begin", True)
begin_at.__doc__ = "Begin region ``name`` at integer coordinate ``coord`` (e.g. the iteration; kept in the trace)."
end_at = _marker("end", True)
end_at.__doc__ = "End region ``name`` at coordinate ``coord``; the same coordinate as its begin."
