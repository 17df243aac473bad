"""Argus regions inside ``@triton.jit`` kernels: begin/end markers that survive to TTGIR and SASS.

Usage, in a kernel::

    from argus_rt import triton_regions as argus

    @triton.jit
    def kernel(...):
        argus.begin("matmul/kloop")
        for k in range(...):
            ...
        argus.end("matmul/kloop")

Names are qualified region names (``parent/child``); the region ID is
:func:`argus_rt.regions.region_id` of the name, computed when Triton builds the kernel.

Why inline-assembly markers and not Proton scopes: with Triton 3.6, ``proton.language`` scopes
are dropped from TTGIR unless Proton's instrumentation mode is on (checked: a kernel with
``enter_scope``/``exit_scope`` compiled for ``cuda:90`` has no trace of them in its TTGIR). A
marker made with ``tl.inline_asm_elementwise(is_pure=False)`` stays in TTGIR as a
``tt.elementwise_inline_asm`` op carrying the region name and ID in its assembly string, survives
software pipelining, and reaches SASS as the same three ``PMTRIG`` words as the CUDA library's
marker-only build (:mod:`argus_rt.markers`), so the PC-to-region map works for Triton kernels too.

Pipelining moves ops away from their markers (a load written inside a region can be peeled into
the loop prologue), so TTGIR consumers decide region membership by *source location*: an op
belongs to the innermost region whose begin/end markers enclose its source line and column
(see :mod:`argus_rt.kinds.triton.discovery`).
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap

import triton.language as tl

from ...markers import marker_immediates
from ...regions import RegionError, RegionTree, region_id

# The comment makes the marker self-describing in TTGIR/PTX; names cannot contain '*'.
_ASM_TEMPLATE = "/* argus:{kind} {name} */ pmevent.mask 0x{w0:04x}; pmevent.mask 0x{w1:04x}; pmevent.mask 0x{w2:04x}; mov.u32 $0, 0;"
MARKER_ASM_PATTERN = re.compile(
    r"/\* argus:(?P<kind>begin|end) (?P<name>[^ *]+) \*/ pmevent\.mask 0x(?P<w0>[0-9a-f]{4}); "
    r"pmevent\.mask 0x(?P<w1>[0-9a-f]{4}); pmevent\.mask 0x(?P<w2>[0-9a-f]{4});"
)
_MARKER_FUNCS = {"begin", "end"}


def marker_asm(kind: str, name: str) -> str:
    """The inline PTX of one marker: a comment naming the region, then three ``pmevent.mask`` words."""
    rid = region_id(name)
    w0, w1, w2 = marker_immediates(kind, rid)
    return _ASM_TEMPLATE.format(kind=kind, name=name, w0=w0, w1=w1, w2=w2)


def _emit(kind: str, name, _semantic):
    name = tl.core._unwrap_if_constexpr(name)
    if not isinstance(name, str):
        raise RegionError(f"argus.{kind}() takes a region name as a string literal, got {name!r}")
    # is_pure=False: the op has a side effect, so neither MLIR nor LLVM may delete it.
    return tl.inline_asm_elementwise(marker_asm(kind, name), "=r", [], dtype=tl.int32, is_pure=False, pack=1,
                                     _semantic=_semantic)


@tl.core.builtin
def begin(name, _semantic=None):
    """Mark the beginning of region ``name`` (a qualified name string) in a Triton kernel."""
    return _emit("begin", name, _semantic)


@tl.core.builtin
def end(name, _semantic=None):
    """Mark the end of region ``name``; must match the innermost open :func:`begin`."""
    return _emit("end", name, _semantic)


def kernel_regions(kernel, program: str | None = None) -> RegionTree:
    """Region tree of a ``@triton.jit`` kernel read from its source, without compiling it.

    Checks that begin/end calls nest properly and that each region's qualified name extends its
    enclosing region's name; raises :class:`RegionError` naming the offending call otherwise.
    """
    fn = getattr(kernel, "fn", kernel)
    source = textwrap.dedent(inspect.getsource(fn))
    tree = RegionTree(program or fn.__name__)
    open_stack: list[str] = []
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MARKER_FUNCS:
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                calls.append((node.lineno, node.col_offset, node.func.attr, node.args[0].value))
    for line, _col, kind, name in sorted(calls):
        if kind == "begin":
            parent = open_stack[-1] if open_stack else None
            if parent is not None and not name.startswith(parent + "/"):
                raise RegionError(
                    f"{fn.__name__} line {line}: region {name!r} opens inside {parent!r}; "
                    f"name it {parent + '/' + name.rsplit('/', 1)[-1]!r}"
                )
            tree.add(name)
            open_stack.append(name)
        else:
            if not open_stack or open_stack[-1] != name:
                expected = open_stack[-1] if open_stack else "no open region"
                raise RegionError(f"{fn.__name__} line {line}: end({name!r}) does not match the open region ({expected})")
            open_stack.pop()
    if open_stack:
        raise RegionError(f"{fn.__name__}: region(s) {open_stack} begun but never ended")
    return tree
