"""A TTGIR module as discovery and the text transforms see it: the kernel's ops in program order, with
SSA names, TTGIR line numbers, source call stacks, loops and def-use.

Structure (which ops exist, their nesting in regions and blocks, operands and results by identity,
types) comes from MLIR itself through :mod:`argus_rt.kinds.triton.mlir_ir`, so any TTGIR Triton can
print parses: generic-form ops (``tt.reduce``, ``tt.scan``), ``scf.while``, ``scf.if`` with
results. The text adds what the bindings cannot give (:mod:`argus_rt.kinds.triton.ttgir_text`): SSA
names and line numbers (the transforms edit text), locations of ops without results, and integer
attributes on Triton 3.6. Where an op has results, the location the bindings give and the one the
text gives must agree (:class:`TtgirError` otherwise), which also checks the alias table reader.

Parsing costs a few ms; modules are cached by text.
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from ...errors import ArgusInputError
from . import mlir_ir, ttgir_text
from .ttgir_locations import UNKNOWN, Location, LocationError, SourceLoc, read_location

__all__ = [
    "ForLoop",
    "Location",
    "Module",
    "Op",
    "SourceLoc",
    "TtgirError",
    "element_bytes",
    "memdesc_shape",
    "parse_module",
    "text_name",
]


_SCOPE_MARK = "'"  # never part of an MLIR SSA name


def text_name(key: str) -> str:
    """The SSA name as the text spells it in its scope (a :class:`Module` key may carry a ``'<line>``
    suffix to tell apart names that sibling regions reuse)."""
    return key.split(_SCOPE_MARK, 1)[0]


class TtgirError(ArgusInputError):
    """TTGIR that cannot be read, or whose text and IR disagree (names the line and the op)."""


@dataclass
class Op:
    """One TTGIR operation of the kernel function."""

    index: int  # position in Module.ops (pre-order = text order)
    line_no: int  # 1-based line of the op's first line in the TTGIR text
    text: str  # that line, without trailing newline
    name: str  # e.g. "ttng.async_tma_copy_global_to_local"
    # Value keys: the SSA name ("%a", or "%x#0", "%x#1" for "%x:2"), with "'<line>" appended where
    # sibling regions reuse the name; text_name() gives the name to write into an edit.
    results: list[str]
    operands: list[str]  # keys of its operands, in the op's operand order
    location: Location  # source call stack, outermost frame first
    loop: int | None  # index of the innermost enclosing scf.for, None at function level
    block_depth: int  # number of enclosing regions inside the function body
    parent: int | None = None  # index of the enclosing op inside the function, None at function level
    result_types: list[str] = field(default_factory=list)
    operand_types: list[str] = field(default_factory=list)
    ir: mlir_ir.IrOp | None = field(default=None, repr=False)
    end_line_no: int = 0  # last line of the op (its closing "}" for an op with regions)

    @property
    def loc(self) -> SourceLoc | None:
        """The outermost source position: in the kernel's own body (a helper's call site)."""
        return self.location.outer

    def __str__(self) -> str:
        return f"{self.name} (TTGIR line {self.line_no})"


@dataclass
class ForLoop:
    """An ``scf.for`` with its induction variable, bounds and loop-carried values (SSA names)."""

    op: Op
    iv: str
    lower: str
    upper: str
    step: str
    iter_args: list[str]  # block arguments after the induction variable, in order
    inits: list[str]  # initial values, in order
    body: list[int] = field(default_factory=list)  # op indices directly or indirectly inside
    yield_op: Op | None = None
    iv_type: str = "i32"


class Module:
    """A parsed TTGIR module with one public function (the kernel)."""

    def __init__(self, text: str, *, source_name: str = "<ttgir>") -> None:
        self.text = text
        self.source_name = source_name
        self.lines = text.splitlines()
        self.ops: list[Op] = []
        self.defs: dict[str, Op] = {}  # SSA name -> defining op
        self.loops: dict[int, ForLoop] = {}  # op index of scf.for -> loop
        self.block_args: dict[str, ForLoop] = {}  # iv / iter_arg name -> its loop
        self.value_types: dict[str, str] = {}  # SSA name -> printed type
        self.func_line: int | None = None
        self.func_name: str | None = None
        self.func_args: list[str] = []
        self.func_location: Location = UNKNOWN  # the kernel's def line
        self._arg_types: dict[int, str] = {}  # block argument value id -> type
        self._aliases = ttgir_text.loc_aliases(self.lines)
        self._loc_cache: dict[str, Location] = {}
        try:
            self.ir = mlir_ir.parse(text, source_name)
        except mlir_ir.IrParseError as exc:
            where = f"{source_name}:{exc.line}" if exc.line else source_name
            line = f"; the line: {self.lines[exc.line - 1].strip()[:100]!r}" if exc.line and exc.line <= len(self.lines) \
                else ""
            raise TtgirError(f"{where}: MLIR cannot parse this TTGIR: {exc}{line}") from None
        try:
            self._attach_text()
        except (ttgir_text.TextMismatch, LocationError) as exc:
            raise TtgirError(str(exc)) from None

    # ---- building ------------------------------------------------------------------------------
    def _attach_text(self) -> None:
        all_ops = self.ir.ops()
        line_of = ttgir_text.map_op_lines(self.lines, [o.name for o in all_ops], self.source_name,
                                          [_line_policy(o) for o in all_ops])
        pos = {id(o): k for k, o in enumerate(all_ops)}
        funcs = [o for o in all_ops if o.name == "tt.func"]
        public = [f for f in funcs if "public" in self.lines[line_of[pos[id(f)]]].split("@")[0]]
        kernel = public[0] if len(public) == 1 else (funcs[0] if len(funcs) == 1 else None)
        if kernel is None:
            raise ttgir_text.TextMismatch(f"{self.source_name}: no tt.func found; is this TTGIR?" if not funcs else
                                          f"{self.source_name}: {len(public)} public tt.func ops; one kernel expected")
        names: dict[int, str] = {}  # value id -> SSA name
        def_line: dict[int, int] = {}  # value id -> 1-based line of the op that defines it
        end_of = self._end_lines(kernel, line_of, pos)
        for o in all_ops:
            k = pos[id(o)]
            if o.results:
                res = ttgir_text.result_names(self.lines[line_of[k]], len(o.results), self.source_name, line_of[k] + 1)
                names.update((v.id, n) for v, n in zip(o.results, res))
                def_line.update((v.id, line_of[k] + 1) for v in o.results)
            if o.regions and line_of[k] is not None and (o is kernel or _inside(o, kernel)):
                for vid in self._name_block_args(o, line_of, pos, end_of, names):
                    def_line[vid] = line_of[k] + 1
        # MLIR names are scoped by region: sibling regions (two inlined loops) reuse names. Keys must be
        # unique, so a name defined more than once gets its defining line appended (text_name strips it).
        counts = Counter(names.values())
        for vid, n in names.items():
            if counts[n] > 1:
                names[vid] = f"{n}{_SCOPE_MARK}{def_line[vid]}"
        self.value_types = {names[vid]: t for vid, t in self._arg_types.items()}
        self.func_line = line_of[pos[id(kernel)]] + 1
        self.func_name = kernel.str_attr("sym_name")
        entry = kernel.regions[0][0]
        self.func_args = [names[a.id] for a in entry.args]
        fl = ttgir_text.trailing_loc(self.lines[end_of[id(kernel)]])
        self.func_location = self._text_location(fl) if fl else UNKNOWN
        self._add_ops(kernel, None, 0, None, line_of, pos, end_of, names)

    def _end_lines(self, kernel, line_of, pos) -> dict[int, int]:
        """0-based last line of every op in the kernel (closing brace for ops with regions)."""
        end: dict[int, int] = {}

        def visit(o, last: int) -> int:
            if line_of[pos[id(o)]] is None:  # printed inline by its parent, or an elided terminator
                for region in o.regions:
                    for block in region:
                        for child in block.ops:
                            last = visit(child, last)
                end[id(o)] = last
                return last
            last = line_of[pos[id(o)]]
            if o.regions:
                for region in o.regions:
                    for block in region:
                        for child in block.ops:
                            last = visit(child, last)
                last = ttgir_text.closing_line(self.lines, last)
            end[id(o)] = last
            return last

        visit(kernel, line_of[pos[id(kernel)]])
        return end

    def _name_block_args(self, o, line_of, pos, end_of, names) -> list[int]:
        first = line_of[pos[id(o)]]
        own = [self.lines[first]]
        prev = first
        children: list = []  # the ops with lines of their own, looking through ops printed inline
        args: list = []  # the block arguments printed on o's own lines, in print order

        def collect(op) -> None:
            for region in op.regions:
                for block in region:
                    args.extend(block.args)
                    for c in block.ops:
                        if line_of[pos[id(c)]] is not None:
                            children.append(c)
                        elif c.regions:
                            collect(c)

        collect(o)
        for c in children:
            own += self.lines[prev + 1:line_of[pos[id(c)]]]
            prev = end_of[id(c)]
        found = ttgir_text.block_arg_names(own)
        if len(found) != len(args):
            raise ttgir_text.TextMismatch(f"{self.source_name}:{first + 1}: found {len(found)} block-argument name(s) "
                                          f"{found} for the {len(args)} block argument(s) of {o.name}")
        names.update((a.id, n) for a, n in zip(args, found))
        self._arg_types.update((a.id, a.type) for a in args)
        return [a.id for a in args]

    def _add_ops(self, parent_ir, parent: int | None, depth: int, loop: int | None, line_of, pos, end_of, names):
        for region in parent_ir.regions:
            for block in region:
                for o in block.ops:
                    k = pos[id(o)]
                    if line_of[k] is None:  # printed inline by its parent (its ops belong to the parent) or elided
                        if o.regions:
                            self._add_ops(o, parent, depth, loop, line_of, pos, end_of, names)
                        continue
                    line = self.lines[line_of[k]]
                    try:
                        operands = [names[v] for v in o.operands]
                    except KeyError:
                        raise ttgir_text.TextMismatch(f"{self.source_name}:{line_of[k] + 1}: an operand of {o.name} "
                                                      "has no SSA name in the text") from None
                    results = [names[v.id] for v in o.results]
                    op = Op(len(self.ops), line_of[k] + 1, line, o.name, results, operands,
                            self._op_location(o, line_of[k], end_of[id(o)]), loop, depth, parent,
                            [v.type for v in o.results], [], o, end_of[id(o)] + 1)
                    self.ops.append(op)
                    for n, v in zip(results, o.results):
                        self.defs[n] = op
                        self.value_types[n] = v.type
                    op.operand_types = [self.value_types.get(n, "") for n in operands]
                    for lp in self._enclosing_loops(loop):
                        lp.body.append(op.index)
                    if o.name == "scf.for":
                        self._add_loop(op, o, names)
                    if o.regions:
                        self._add_ops(o, op.index, depth + 1, op.index if o.name == "scf.for" else loop,
                                      line_of, pos, end_of, names)
                    if o.name == "scf.yield" and loop is not None and parent == loop:
                        self.loops[loop].yield_op = op

    def _enclosing_loops(self, loop: int | None):
        while loop is not None:
            lp = self.loops[loop]
            yield lp
            loop = lp.op.loop

    def _add_loop(self, op: Op, o, names) -> None:
        body = o.regions[0][0]
        iv, *iter_args = [names[a.id] for a in body.args]
        lb, ub, step, *inits = op.operands
        loop = ForLoop(op, iv, lb, ub, step, iter_args, inits, iv_type=body.args[0].type)
        self.loops[op.index] = loop
        for name in [iv, *iter_args]:
            self.block_args[name] = loop

    # ---- locations -----------------------------------------------------------------------------
    def _text_location(self, expr: str) -> Location:
        return read_location(expr, self._aliases, self._loc_cache)

    def _op_location(self, o, first: int, last: int) -> Location:
        expr = ttgir_text.trailing_loc(self.lines[last])
        text_loc = self._text_location(expr) if expr else None
        if o.loc is not None:
            ir_loc = read_location(o.loc)
            # Block arguments and ops the parser saw without a loc(...) get a position in the TTGIR
            # file itself; those are not source positions.
            if text_loc is not None and ir_loc.stack != text_loc.stack:
                raise ttgir_text.TextMismatch(
                    f"{self.source_name}:{first + 1}: {o.name}: the text's location {text_loc} differs from MLIR's "
                    f"{ir_loc}")
            return ir_loc
        return text_loc or UNKNOWN

    # ---- queries -------------------------------------------------------------------------------
    def def_of(self, ssa: str, user: Op) -> Op:
        """The op defining ``ssa``; raises naming ``user`` if it is a block argument or undefined."""
        op = self.defs.get(ssa)
        if op is None:
            what = "a loop-carried value or induction variable" if ssa in self.block_args else \
                "a kernel argument" if ssa in self.func_args else "a block argument"
            raise TtgirError(f"{user}: operand {ssa} has no defining op in this function (it is {what})")
        return op

    def int_attr(self, op: Op, attr: str) -> int | None:
        """Integer attribute of ``op`` from the bindings (Triton >= 3.7) or its printed line (3.6)."""
        if mlir_ir.has_int_attr() and op.ir is not None:
            value = op.ir.int_attr(attr)
            if value is not None and op.result_types[:1] == ["i1"] and attr == "value":
                value &= 1  # MLIR sign-extends an i1 "true" to -1
            return value
        return ttgir_text.text_int_attr(op.name, op.text, attr)

    attr_int = int_attr  # the name the transforms used

    def constant_int(self, ssa: str) -> int | None:
        """Value of a scalar integer ``arith.constant``, else None."""
        op = self.defs.get(ssa)
        if op is None or op.name != "arith.constant" or not re.fullmatch(r"i\d+|index", op.result_types[0]):
            return None
        return self.int_attr(op, "value")

    def loop_of(self, op: Op) -> ForLoop | None:
        return self.loops[op.loop] if op.loop is not None else None

    def op_at_line(self, line_no: int) -> Op:
        for op in self.ops:
            if op.line_no == line_no:
                return op
        raise TtgirError(f"{self.source_name}: no op starts at TTGIR line {line_no}")


def _line_policy(o) -> str:
    """Whether ``o`` must have a line: not for ops printed inline by their parent, optional for an
    operand-less terminator at the end of its block (custom printers leave it out)."""
    if o.name in ttgir_text.LINELESS_OPS:
        return ttgir_text.NEVER
    if o.operands or o.results or o.regions or o.parent is None:
        return ttgir_text.REQUIRED
    last = any(block.ops and block.ops[-1] is o for region in o.parent.regions for block in region)
    return ttgir_text.OPTIONAL if last else ttgir_text.REQUIRED


def _inside(o, ancestor) -> bool:
    p = o.parent
    while p is not None:
        if p is ancestor:
            return True
        p = p.parent
    return False


@lru_cache(maxsize=32)
def _cached(digest: str, text: str, source_name: str) -> Module:
    return Module(text, source_name=source_name)


def parse_module(text: str | Module, source_name: str = "<ttgir>") -> Module:
    """A :class:`Module` for ``text`` (a module passes through), cached by content: several
    transforms and discovery read the same TTGIR in one process."""
    if isinstance(text, Module):
        return text
    return _cached(hashlib.sha256(text.encode()).hexdigest(), text, source_name)


def memdesc_shape(type_text: str) -> tuple[list[int], str]:
    """Shape and element type of ``!ttg.memdesc<3x128x64xf16, ...>`` (or ``<128x64xf16, ...>``)."""
    m = re.search(r"memdesc<((?:\d+x)+)(\w+)\s*,", type_text) or re.search(r"<((?:\d+x)+)(\w+)\s*,", type_text)
    if not m:
        raise TtgirError(f"cannot read a memdesc shape from {type_text!r}")
    dims = [int(d) for d in m.group(1).rstrip("x").split("x")]
    return dims, m.group(2)


_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "f8E4M3FN": 1, "f8E5M2": 1,
                  "f64": 8}


def element_bytes(elem: str) -> int:
    if elem not in _ELEMENT_BYTES:
        raise TtgirError(f"unknown element type {elem!r}; known: {', '.join(sorted(_ELEMENT_BYTES))}")
    return _ELEMENT_BYTES[elem]
