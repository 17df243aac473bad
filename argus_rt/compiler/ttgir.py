"""A small reader for Triton's TTGIR text: ops, SSA definitions, `scf.for` loops, source locations.

Triton prints TTGIR in MLIR's custom assembly form, one op per line, with nested regions opened by
``{`` at the end of a line and closed by a line starting with ``}``. That is regular enough to
read without MLIR's Python bindings (which Triton does not ship), and text is what a probe
transform edits anyway. The reader checks what it relies on and raises :class:`TtgirError` with
the line number and op name when the text breaks those assumptions.

Source locations (``loc(#loc12)`` and the ``#loc12 = loc(...)`` table at the end of the module)
are resolved to ``(file, line, column)`` of the Python source; for code inlined from a helper
(``callsite(callee at caller)``) the outermost caller is used, because region markers live in the
kernel's own body.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field


class TtgirError(ValueError):
    """TTGIR text that this reader cannot interpret (names the line and the op)."""


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}:{self.col}"


@dataclass
class Op:
    """One TTGIR operation (one text line)."""

    index: int  # position in Module.ops
    line_no: int  # 1-based line number in the TTGIR text
    text: str  # the full line, without trailing newline
    name: str  # e.g. "ttng.async_tma_copy_global_to_local"
    results: list[str]  # SSA names defined ("%a_14"); "%x:4" defines "%x"
    operands: list[str]  # SSA names used, in order of appearance (may repeat)
    loc: SourceLoc | None
    loop: int | None  # index of the innermost enclosing scf.for op, None at function level
    block_depth: int  # number of enclosing regions inside the function body

    def __str__(self) -> str:
        return f"{self.name} (TTGIR line {self.line_no})"


@dataclass
class ForLoop:
    """An ``scf.for`` with its induction variable, bounds and loop-carried values."""

    op: Op
    iv: str
    lower: str
    upper: str
    step: str
    iter_args: list[str]  # block arguments, in order
    inits: list[str]  # initial values, in order
    body: list[int] = field(default_factory=list)  # op indices directly or indirectly inside
    yield_op: Op | None = None


_OP_RE = re.compile(
    r"^\s*(?:(?P<results>%[\w.$-]+(?::\d+)?(?:\s*,\s*%[\w.$-]+(?::\d+)?)*)\s*=\s*)?"
    r"(?P<name>[a-z_][\w]*\.[\w.]+)\b"
)
_SSA_RE = re.compile(r"%[\w.$-]+")
_LOC_TAIL_RE = re.compile(r"\s+loc\((?P<expr>.*)\)\s*(?:\{)?\s*$")
_LOC_DEF_RE = re.compile(r"^(?P<alias>#loc\d*)\s*=\s*loc\((?P<expr>.*)\)\s*$")
_FOR_RE = re.compile(
    r"scf\.for\s+(?P<iv>%[\w.$-]+)\s*=\s*(?P<lb>%[\w.$-]+)\s+to\s+(?P<ub>%[\w.$-]+)\s+step\s+(?P<step>%[\w.$-]+)"
    r"(?:\s+iter_args\((?P<iter>.*?)\)\s*->)?"
)
_TYPE_TAIL_RE = re.compile(r"\s:\s[^%]*$")


class Module:
    """A parsed TTGIR module with one public function (the kernel)."""

    def __init__(self, text: str, *, source_name: str = "<ttgir>") -> None:
        self.text = text
        self.source_name = source_name
        self.lines = text.splitlines()
        self._loc_exprs: dict[str, str] = {}
        self._loc_cache: dict[str, SourceLoc | None] = {}
        self.ops: list[Op] = []
        self.defs: dict[str, Op] = {}  # SSA name -> defining op
        self.loops: dict[int, ForLoop] = {}  # op index of scf.for -> loop
        self.block_args: dict[str, ForLoop] = {}  # iv / iter_arg name -> its loop
        self.func_line: int | None = None
        self.func_name: str | None = None
        self.func_args: list[str] = []
        self._parse()

    # ---- parsing ---------------------------------------------------------------------------
    def _parse(self) -> None:
        for raw in self.lines:
            m = _LOC_DEF_RE.match(raw.strip())
            if m:
                self._loc_exprs[m.group("alias")] = m.group("expr")
        loop_stack: list[int] = []  # indices of open scf.for ops
        block_stack: list[str] = []  # "for" / "other" per open region inside the function
        in_func = False
        for line_no, raw in enumerate(self.lines, start=1):
            stripped = raw.strip()
            if not stripped or stripped.startswith("#") or stripped.startswith("//"):
                continue
            if stripped.startswith("tt.func"):
                if in_func:
                    raise TtgirError(f"{self.source_name}:{line_no}: nested tt.func is not supported")
                m = re.search(r"@([\w$.-]+)\(", stripped)
                if not m:
                    raise TtgirError(f"{self.source_name}:{line_no}: tt.func without a name")
                self.func_name, self.func_line, in_func = m.group(1), line_no, True
                self.func_args = re.findall(r"(%[\w.$-]+):", stripped.split("attributes")[0])
                continue
            if not in_func:
                continue
            if stripped.startswith("}"):
                if not block_stack:
                    in_func = False  # end of tt.func
                    continue
                kind = block_stack.pop()
                if kind == "for":
                    loop_stack.pop()
                rest = stripped[1:].strip()
                if rest.startswith("else"):  # "} else {" closes one region and opens another
                    block_stack.append("other")
                continue
            m = _OP_RE.match(raw)
            if not m:
                raise TtgirError(f"{self.source_name}:{line_no}: cannot read this line as an op: {stripped[:120]!r}")
            name = m.group("name")
            results = []
            if m.group("results"):
                results = [r.strip().split(":")[0] for r in m.group("results").split(",")]
            body_text = raw[m.end():]
            loc_m = _LOC_TAIL_RE.search(body_text)
            loc = self.resolve_loc(loc_m.group("expr")) if loc_m else None
            code = body_text[: loc_m.start()] if loc_m else body_text
            # Drop string literals so SSA-looking text inside inline asm is not an operand.
            code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', code)
            operands = _SSA_RE.findall(code)
            op = Op(len(self.ops), line_no, raw, name, results, operands, loc,
                    loop_stack[-1] if loop_stack else None, len(block_stack))
            self.ops.append(op)
            for r in results:
                self.defs[r] = op
            for open_loop in loop_stack:
                self.loops[open_loop].body.append(op.index)
            if name == "scf.for":
                self._add_loop(op)
                loop_stack.append(op.index)
                block_stack.append("for")
            elif raw.rstrip().endswith("{"):
                block_stack.append("other")
            if name == "scf.yield" and loop_stack and op.block_depth == self.loops[loop_stack[-1]].op.block_depth + 1:
                self.loops[loop_stack[-1]].yield_op = op
        if self.func_name is None:
            raise TtgirError(f"{self.source_name}: no tt.func found; is this TTGIR?")

    def _add_loop(self, op: Op) -> None:
        m = _FOR_RE.search(op.text)
        if not m:
            raise TtgirError(f"{self.source_name}:{op.line_no}: cannot read scf.for header: {op.text.strip()[:120]!r}")
        iter_args, inits = [], []
        if m.group("iter"):
            for pair in m.group("iter").split(","):
                lhs, _, rhs = pair.partition("=")
                iter_args.append(lhs.strip())
                inits.append(rhs.strip())
        loop = ForLoop(op, m.group("iv"), m.group("lb"), m.group("ub"), m.group("step"), iter_args, inits)
        # the induction variable and iter_args are not operands of the for op itself
        op.operands = [m.group("lb"), m.group("ub"), m.group("step")] + inits
        self.loops[op.index] = loop
        for name in [loop.iv, *iter_args]:
            self.block_args[name] = loop

    # ---- locations -------------------------------------------------------------------------
    def resolve_loc(self, expr: str, _depth: int = 0) -> SourceLoc | None:
        """Resolve a location expression (the text inside ``loc(...)``) to a Python source position."""
        expr = expr.strip()
        if _depth > 64:
            raise TtgirError(f"{self.source_name}: location alias cycle at {expr!r}")
        if expr in self._loc_cache:
            return self._loc_cache[expr]
        result: SourceLoc | None
        if expr == "unknown":
            result = None
        elif expr.startswith("#loc"):
            if expr not in self._loc_exprs:
                raise TtgirError(f"{self.source_name}: location alias {expr} is used but never defined")
            result = self.resolve_loc(self._loc_exprs[expr], _depth + 1)
        elif (m := re.fullmatch(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)(?:\s+to\s+.*)?', expr)):
            result = SourceLoc(m.group(1), int(m.group(2)), int(m.group(3)))
        elif (m := re.fullmatch(r'"(?:[^"\\]|\\.)*"\((.*)\)', expr)):
            result = self.resolve_loc(m.group(1), _depth + 1)
        elif expr.startswith("callsite(") and expr.endswith(")"):
            inner = expr[len("callsite("):-1]
            callee, sep, caller = inner.rpartition(" at ")
            if not sep:
                raise TtgirError(f"{self.source_name}: cannot read callsite location {expr!r}")
            result = self.resolve_loc(caller, _depth + 1) or self.resolve_loc(callee, _depth + 1)
        elif expr.startswith("fused"):
            parts = re.findall(r"#loc\d*|\"[^\"]*\":\d+:\d+", expr)
            result = next((loc for loc in (self.resolve_loc(p, _depth + 1) for p in parts) if loc), None)
        else:
            raise TtgirError(f"{self.source_name}: unsupported location form {expr!r}")
        self._loc_cache[expr] = result
        return result

    # ---- queries -----------------------------------------------------------------------------
    def def_of(self, ssa: str, user: Op) -> Op:
        """The op defining ``ssa`` (``%x#1`` -> ``%x``); raises naming ``user`` if it is undefined."""
        base = ssa.split("#")[0]
        op = self.defs.get(base)
        if op is None:
            raise TtgirError(f"{user}: operand {ssa} has no defining op in this function")
        return op

    def constant_int(self, ssa: str) -> int | None:
        """Integer value of an ``arith.constant`` SSA value, else None."""
        op = self.defs.get(ssa.split("#")[0])
        if op is None or op.name != "arith.constant":
            return None
        m = re.search(r"arith\.constant\s+(true|false|-?\d+)\s*:\s*i\d+", op.text)
        if not m:
            return None
        return {"true": 1, "false": 0}.get(m.group(1), None) if m.group(1) in ("true", "false") else int(m.group(1))

    def loop_of(self, op: Op) -> ForLoop | None:
        return self.loops[op.loop] if op.loop is not None else None

    def attr_int(self, op: Op, attr: str) -> int | None:
        m = re.search(rf"\b{re.escape(attr)}\s*=\s*(-?\d+)", op.text)
        return int(m.group(1)) if m else None


def memdesc_shape(type_text: str) -> tuple[list[int], str]:
    """Shape and element type of ``!ttg.memdesc<3x128x64xf16, ...>`` (or ``<128x64xf16, ...>``)."""
    m = re.search(r"<((?:\d+x)+)(\w+)\s*,", type_text)
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
