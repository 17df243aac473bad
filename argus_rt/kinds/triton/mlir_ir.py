"""The one adapter over Triton's MLIR Python bindings (``triton._C.libtriton.ir``): parse TTGIR, walk it.

Nothing else in Argus imports the bindings. They are Triton's private API and differ between
releases, so this module turns a parsed module into plain Python objects (:class:`IrOp`,
:class:`IrBlock`, :class:`IrValue`) and says which pieces the installed release cannot give.

What the bindings give, in Triton 3.6 and 3.7 alike (checked on 3.6.0 and 3.7.1):

* ``parse_mlir_module(path, context)`` after ``load_dialects(context)``: the full MLIR parser, so the
  generic form (``"tt.reduce"(...) ({...})``), ``scf.while``, ``scf.if`` with results and every op
  Triton registers parse; a bad module raises and MLIR prints ``loc(...): error: ...`` on fd 2.
* ``module.walk`` (post-order), ``op.get_name``, operands, results, regions; ``op.get_block()`` ->
  ``block.get_parent()`` -> region, ``region.id()`` and ``value.id()`` (stable identities),
  block arguments with types, ``str(value.get_type())``, ``op.get_str_attr``/``get_bool_attr``.
* ``value.get_loc()``: the location of a *value*, printed inline (``loc(callsite(... at ...))``).

What they do not give:

* the location of an op **without results** (``tt.store``, ``ttng.async_tma_copy_global_to_local``,
  ``ttng.wait_barrier``): there is no ``op.get_loc``;
* SSA names and TTGIR line numbers (the printer's names come from name locations, and the parser
  drops them); text edits need both;
* integer attributes in 3.6: ``op.get_int_attr`` exists from 3.7 on (:func:`has_int_attr`).

:mod:`argus_rt.kinds.triton.ttgir_text` reads exactly those three from the text, and
:mod:`argus_rt.kinds.triton.ttgir_module` checks text and IR against each other.
"""
from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path


class IrParseError(ValueError):
    """MLIR rejected the text; ``line`` is the 1-based line of the first diagnostic (None if unknown)."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


@dataclass
class IrValue:
    id: int  # identity of the MLIR value (its address), unique while the module lives
    type: str  # printed type, e.g. "i32", "!ttg.memdesc<1xi64, #shared1, #smem, mutable>"


@dataclass
class IrBlock:
    args: list[IrValue]
    ops: list[IrOp] = field(default_factory=list)


@dataclass
class IrOp:
    name: str  # e.g. "tt.reduce", "scf.for"
    operands: list[int]  # value ids, in the op's operand order (ODS order, not print order)
    results: list[IrValue]
    regions: list[list[IrBlock]]
    parent: IrOp | None
    loc: str | None  # printed location of the first result, None for an op without results
    _handle: object = field(repr=False, default=None)

    def str_attr(self, name: str) -> str | None:
        return self._handle.get_str_attr(name)

    def int_attr(self, name: str) -> int | None:
        """Integer attribute ``name``; only where :func:`has_int_attr` (else the caller reads the text)."""
        if not has_int_attr():
            raise NotImplementedError("this Triton's bindings have no get_int_attr")
        return self._handle.get_int_attr(name)

    def walk(self):
        """This op and every op nested in it, in pre-order (the order the printer writes them)."""
        yield self
        for region in self.regions:
            for block in region:
                for op in block.ops:
                    yield from op.walk()


def _ir():
    from triton._C.libtriton import ir

    return ir


@lru_cache(maxsize=1)
def has_int_attr() -> bool:
    """Whether the installed bindings read integer attributes (``op.get_int_attr``: Triton >= 3.7).
    A function, not a constant, so importing Argus does not import Triton."""
    try:
        return hasattr(_ir().operation, "get_int_attr")
    except ImportError:
        return False


@dataclass
class IrModule:
    """A parsed module: the ``builtin.module`` op and the MLIR objects that must outlive the walk."""

    root: IrOp
    _keepalive: tuple = field(repr=False, default=())

    def ops(self) -> list[IrOp]:
        return list(self.root.walk())


def _first_error(diag: str, fallback: str) -> tuple[str, int | None]:
    """(message, line) of MLIR's first error diagnostic: ``loc("path":LINE:COL): error: MESSAGE``."""
    import re

    for ln in diag.splitlines():
        m = re.search(r'(?:loc\("[^"]*"|[^\s:]+):(\d+):(\d+)\)?:\s*error:\s*(.*)', ln)
        if m:
            return f"{m.group(3).strip()} (column {m.group(2)})", int(m.group(1))
        if "error" in ln:
            return ln.strip(), None
    return fallback, None


_FD2_LOCK = threading.Lock()  # fd 2 is process-wide: one parse at a time redirects it


def parse(text: str, source_name: str = "<ttgir>") -> IrModule:
    """Parse TTGIR ``text`` with MLIR; raise :class:`IrParseError` with MLIR's first error line."""
    ir = _ir()
    context = ir.context()
    ir.load_dialects(context)
    with tempfile.TemporaryDirectory(prefix="argus_ttgir_") as tmp:
        path = Path(tmp) / "module.ttgir"
        path.write_text(text, encoding="utf-8")  # the binding parses a file, not a string
        with _FD2_LOCK, tempfile.TemporaryFile() as err:
            saved = os.dup(2)
            os.dup2(err.fileno(), 2)  # MLIR writes diagnostics to fd 2, not into the exception
            try:
                module = ir.parse_mlir_module(str(path), context)
                failure = None
            except RuntimeError as exc:
                failure = exc
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            err.seek(0)
            diag = err.read().decode(errors="replace").strip()
    if failure is not None:
        message, line = _first_error(diag.replace(str(path), source_name), str(failure))
        raise IrParseError(message, line)
    return IrModule(_build_tree(module, str(path)), (context, module))


def _build_tree(module, parsed_path: str) -> IrOp:
    handles = []
    module.walk(handles.append)  # post-order: children before their parent
    region_owner: dict[int, tuple[int, int]] = {}  # region id -> (op index, region index)
    for k, h in enumerate(handles):
        for r in range(h.get_num_regions()):
            region_owner[h.get_region(r).id()] = (k, r)
    ops: list[IrOp] = []
    blocks: dict[int, IrBlock] = {}  # block id -> block
    block_region: dict[int, tuple[int, int]] = {}
    for h in handles:
        results = [h.get_result(i) for i in range(h.get_num_results())]
        loc = str(results[0].get_loc()) if results else None
        if loc is not None and parsed_path in loc:
            loc = None  # the text had no loc(...): MLIR made one up from the parsed file's line
        op = IrOp(h.get_name(), [h.get_operand(i).id() for i in range(h.get_num_operands())],
                  [IrValue(v.id(), str(v.get_type())) for v in results],
                  [[] for _ in range(h.get_num_regions())], None, loc, h)
        ops.append(op)
        block = h.get_block()
        if block is None:
            continue
        b = blocks.get(block.id())
        if b is None:
            args = [block.get_argument(i) for i in range(block.get_num_arguments())]
            b = blocks[block.id()] = IrBlock([IrValue(a.id(), str(a.get_type())) for a in args])
            block_region[block.id()] = region_owner[block.get_parent().id()]
        b.ops.append(op)
    # Attach blocks to their owners in first-seen order (post-order visits block 0's ops first).
    for bid, b in blocks.items():
        k, r = block_region[bid]
        ops[k].regions[r].append(b)
        for op in b.ops:
            op.parent = ops[k]
    roots = [op for op in ops if op.parent is None]
    if len(roots) != 1:
        raise IrParseError(f"expected one top-level module op, found {[op.name for op in roots]}", None)
    return roots[0]


def with_warp_groups_allocated(text: str, source_name: str = "<ttgir>") -> str:
    """TTGIR ``text`` printed after Triton's own warp-group allocation pass (``allocate_warp_groups``, which
    the NVIDIA backend's make_llir runs second on the final TTGIR, before any lowering): each
    ``ttg.warp_specialize`` op then carries ``warpGroupStartIds`` (the first warp of each partition) and
    the module ``ttg.total-num-warps``. The compiled TTGIR (``asm["ttgir"]``) has neither yet."""
    from triton._C.libtriton import passes

    parsed = parse(text, source_name)
    context, module = parsed._keepalive
    pm = _ir().pass_manager(context)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    pm.run(module, "allocate_warp_groups")  # the name only labels IR dumps
    return str(module)
