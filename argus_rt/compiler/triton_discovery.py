"""Discovery (a Control task): find the asynchronous operation sites inside a region of a Triton kernel.

Input: TTGIR of one program version (compiled for ``cuda:90`` here or on a GPU machine) and a region
name. Output: every supported async site in the region's subtree, each with

* a stable **op ID**: a 32-bit hash of (kernel, region, kind, source position relative to the
  kernel's ``def`` line). Pipelining clones a load (prologue copies + the in-loop copy); all clones
  share the source position, so they are instances of one logical op with one ID. Recompiling the
  same program version gives the same IDs.
* its **completion condition**: for a TMA load the mbarrier it signals, the ``barrier_expect``
  group it belongs to (bytes), and, per logical iteration, the barrier slot and phase parity the
  consumer waits on; for WGMMA the ``warp_group_dot_wait`` that retires it; for cp.async its
  commit group and the ``async_wait`` that consumes the group's token.
* its **logical iterations**: software pipelining with ``num_stages=S`` peels the first S-1
  iterations' loads into the prologue, and the in-loop load of trip t fetches iteration t+S-1.
  Discovery does not assume this: it *interprets* the scalar integer ops of the loop body (slot
  index and phase iter_args) trip by trip and checks that the slot each producer instance signals
  is the slot the consumer waits on for the iteration it is mapped to. A mismatch is an error.

Region membership is decided by source position (see :mod:`argus_rt.triton_regions`).

Reading TTGIR (ops, SSA definitions, ``scf.for`` loops, source locations): Triton prints TTGIR in MLIR's custom assembly form, one op per line, with nested regions opened by
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

import hashlib
import re
from dataclasses import asdict, dataclass, field

from ..regions import RegionError, RegionTree, region_id
from ..triton_regions import MARKER_ASM_PATTERN


# ---- reading TTGIR text ----------------------------------------------------------------------
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


# ---- discovery ------------------------------------------------------------------------------

TMA_LOAD = "ttng.async_tma_copy_global_to_local"
WGMMA = "ttng.warp_group_dot"
WGMMA_WAIT = "ttng.warp_group_dot_wait"
CP_ASYNC = "ttg.async_copy_global_to_local"
CP_ASYNC_COMMIT = "ttg.async_commit_group"
CP_ASYNC_WAIT = "ttg.async_wait"

SITE_KINDS = {TMA_LOAD: "tma_load", WGMMA: "wgmma", CP_ASYNC: "cp_async"}
# Async ops Argus recognises but cannot yet give a completion condition for.
UNSUPPORTED_ASYNC = {
    "ttng.async_tma_copy_local_to_global": "TMA store (completion is a bulk-group wait, not yet modelled)",
    "ttng.async_tma_gather": "TMA gather",
    "ttng.async_tma_scatter": "TMA scatter",
    "ttng.async_tma_reduce": "TMA reduce",
    "ttng.tc_gen5_mma": "Blackwell tcgen05 MMA",
    "ttng.async_tma_prefetch": "TMA prefetch",
}


class DiscoveryError(ValueError):
    """Discovery could not analyse the region; the message names the op and TTGIR line."""


class UnsupportedOpError(DiscoveryError):
    """An async op Argus does not support was found where a supported one was required."""


@dataclass(frozen=True)
class RegionSpan:
    name: str
    id: int
    begin: SourceLoc
    end: SourceLoc

    def contains(self, loc: SourceLoc | None) -> bool:
        if loc is None or loc.file != self.begin.file:
            return False
        return (self.begin.line, self.begin.col) < (loc.line, loc.col) < (self.end.line, self.end.col)


@dataclass
class Instance:
    """One physical copy of a logical op in the TTGIR, mapped to the logical iteration it serves."""

    ttgir_line: int
    placement: str  # "prologue" (before the loop), "loop" (inside it), "straight" (no loop involved)
    iterations: list[int]  # logical iterations served (a loop instance serves several, one per trip)
    trip_offset: int = 0  # logical iteration = trip + trip_offset for loop instances


@dataclass
class Completion:
    """How the completion of one op instance is observed."""

    kind: str  # "mbarrier", "wgmma_wait", "cp_async_group"
    # mbarrier: the shared barrier array, the expect group and per-iteration slot/phase
    barrier_alloc: str | None = None
    barrier_slots: int | None = None
    expect_bytes: int | None = None
    op_bytes: int | None = None
    group_ops: int | None = None  # how many copies signal the same barrier per stage
    slot_by_iteration: dict[int, int] = field(default_factory=dict)
    phase_by_iteration: dict[int, int] = field(default_factory=dict)
    consumer_wait_line: int | None = None
    # wgmma / cp.async: the waiting op and its count argument
    wait_line: int | None = None
    wait_count: int | None = None
    commit_line: int | None = None

    def describe(self, iteration: int | None = None) -> str:
        if self.kind == "mbarrier":
            base = f"mbarrier {self.barrier_alloc}[{self.barrier_slots} slots], expect {self.expect_bytes} B " \
                   f"({self.group_ops} loads, this one {self.op_bytes} B)"
            if iteration is not None and iteration in self.slot_by_iteration:
                base += f"; iteration {iteration}: slot {self.slot_by_iteration[iteration]}, " \
                        f"phase {self.phase_by_iteration[iteration]}"
            return base
        if self.kind == "wgmma_wait":
            return f"warp_group_dot_wait pendings={self.wait_count} (TTGIR line {self.wait_line})"
        return f"commit group (line {self.commit_line}) retired by async_wait num={self.wait_count} " \
               f"(line {self.wait_line})"


@dataclass
class Site:
    """One logical async operation in the region, with a stable op ID."""

    op_id: int
    kind: str  # "tma_load", "wgmma", "cp_async"
    op_name: str  # TTGIR op name
    region: str  # innermost region containing it
    source: SourceLoc
    label: str  # the value name Triton kept ("a", "b", "acc")
    instances: list[Instance]
    completion: Completion

    @property
    def iterations(self) -> list[int]:
        return sorted({i for inst in self.instances for i in inst.iterations})

    def to_json(self) -> dict:
        d = asdict(self)
        d["source"] = str(self.source)
        d["op_id"] = f"0x{self.op_id:08x}"
        return d


@dataclass
class Discovery:
    """What discovery returns: the region, its subtree and the sites found in it."""

    kernel: str
    region: str
    region_tree: RegionTree
    sites: list[Site]
    iterations: int
    unsupported: list[str]

    def site(self, key: int | str) -> Site:
        """A site by op ID (int or ``0x...`` string) or label; raises naming the valid choices."""
        for s in self.sites:
            if key == s.op_id or (isinstance(key, str) and (key.lower() == f"0x{s.op_id:08x}" or key == s.label)):
                return s
        valid = ", ".join(f"0x{s.op_id:08x} ({s.kind} {s.label})" for s in self.sites) or "none"
        raise DiscoveryError(f"no site {key!r} in region {self.region!r}; valid: {valid}")

    def candidates(self, kind: str = "tma_load") -> list[tuple[Site, int]]:
        """All (site, logical iteration) pairs of one kind: the probe candidates."""
        return [(s, i) for s in self.sites if s.kind == kind for i in s.iterations]


# ---- regions ---------------------------------------------------------------------------------
def region_spans(module: Module) -> tuple[RegionTree, list[RegionSpan]]:
    """Read Argus markers from TTGIR; check IDs and nesting; return the tree and source spans."""
    tree = RegionTree(module.func_name or "kernel")
    opened: dict[str, tuple[SourceLoc, Op]] = {}
    spans: list[RegionSpan] = []
    for op in module.ops:
        if op.name != "tt.elementwise_inline_asm" or "argus:" not in op.text:
            continue
        m = MARKER_ASM_PATTERN.search(op.text)
        if not m:
            raise TtgirError(f"{op}: inline asm mentions argus but is not a well-formed Argus marker")
        kind, name = m.group("kind"), m.group("name")
        rid = (int(m.group("w2"), 16) << 16) | int(m.group("w1"), 16)
        if rid != region_id(name):
            raise TtgirError(f"{op}: marker for {name!r} carries ID 0x{rid:08x}, but the name hashes to "
                             f"0x{region_id(name):08x}")
        if op.loc is None:
            raise TtgirError(f"{op}: marker for {name!r} has no source location")
        if kind == "begin":
            if name in opened:
                raise TtgirError(f"{op}: region {name!r} begins twice")
            opened[name] = (op.loc, op)
            tree.add(name)
        else:
            if name not in opened:
                raise TtgirError(f"{op}: end of region {name!r} without a begin")
            begin_loc, _ = opened.pop(name)
            spans.append(RegionSpan(name, rid, begin_loc, op.loc))
    if opened:
        raise TtgirError(f"regions begun but never ended in {module.func_name}: {sorted(opened)}")
    return tree, spans


def _innermost(spans: list[RegionSpan], loc: SourceLoc | None) -> RegionSpan | None:
    inside = [s for s in spans if s.contains(loc)]
    return max(inside, key=lambda s: s.name.count("/")) if inside else None


# ---- scalar interpretation of loop-carried slot/phase values ------------------------------------
_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "slt": lambda a, b: a < b,
        "sle": lambda a, b: a <= b, "sgt": lambda a, b: a > b, "sge": lambda a, b: a >= b,
        "ult": lambda a, b: a < b, "ule": lambda a, b: a <= b, "ugt": lambda a, b: a > b,
        "uge": lambda a, b: a >= b}


def _eval_scalar(module: Module, op: Op, env: dict[str, int]) -> int | None:
    """Value of a scalar integer arith op given known SSA values, or None if not computable."""
    def val(s: str) -> int | None:
        s = s.split("#")[0]
        return env[s] if s in env else module.constant_int(s)

    args = [val(o) for o in op.operands]
    if any(a is None for a in args):
        return None
    if ": tensor<" in op.text:
        return None
    n = op.name
    if n == "arith.addi":
        return args[0] + args[1]
    if n == "arith.subi":
        return args[0] - args[1]
    if n == "arith.muli":
        return args[0] * args[1]
    if n == "arith.xori":
        return args[0] ^ args[1]
    if n == "arith.andi":
        return args[0] & args[1]
    if n == "arith.ori":
        return args[0] | args[1]
    if n in ("arith.remsi", "arith.remui") and args[1]:
        return args[0] % args[1]
    if n in ("arith.divsi", "arith.divui") and args[1]:
        return args[0] // args[1]
    if n == "arith.select":
        return args[1] if args[0] else args[2]
    if n == "arith.cmpi":
        pred = re.search(r"arith\.cmpi\s+(\w+)", op.text).group(1)
        return int(_CMP[pred](args[0], args[1]))
    return None


def simulate_loop(module: Module, loop: ForLoop, trips: int) -> list[dict[str, int]]:
    """Run the loop body's scalar integer ops for ``trips`` trips; return each trip's known values.

    Values that depend on run-time kernel arguments (e.g. ``K``) stay unknown; slot indices and
    phases of a pipelined loop depend only on constants and iter_args, which is what we need.
    """
    lb, step = module.constant_int(loop.lower), module.constant_int(loop.step)
    if lb is None or step is None:
        raise DiscoveryError(f"{loop.op}: lower bound {loop.lower} and step {loop.step} must be constants")
    carried: list[int | None] = [module.constant_int(i) for i in loop.inits]
    out = []
    body = [module.ops[i] for i in loop.body if module.ops[i].loop == loop.op.index]
    for t in range(trips):
        env: dict[str, int] = {loop.iv: lb + t * step}
        for name, value in zip(loop.iter_args, carried):
            if value is not None:
                env[name] = value
        for op in body:
            if op.results and op.name.startswith("arith."):
                v = _eval_scalar(module, op, env)
                if v is not None:
                    env[op.results[0]] = v
        out.append(env)
        if loop.yield_op is None:
            raise DiscoveryError(f"{loop.op}: loop has no scf.yield")
        carried = [env.get(y.split("#")[0], module.constant_int(y)) for y in loop.yield_op.operands]
    return out


# ---- site analysis ------------------------------------------------------------------------------
def _barrier_index(module: Module, op: Op, barrier: str) -> tuple[str, str, int]:
    """(alloc SSA, index SSA, slots) of a barrier operand ``ttg.memdesc_index %alloc[%idx]``."""
    d = module.def_of(barrier, op)
    if d.name != "ttg.memdesc_index":
        raise UnsupportedOpError(f"{op}: its mbarrier {barrier} comes from {d.name} (line {d.line_no}); Argus "
                                 "follows barriers only through ttg.memdesc_index of a ttg.local_alloc")
    alloc, idx = d.operands[0], d.operands[1]
    a = module.def_of(alloc, d)
    if a.name != "ttg.local_alloc":
        raise UnsupportedOpError(f"{op}: barrier array {alloc} is made by {a.name}, expected ttg.local_alloc")
    dims, _ = memdesc_shape(a.text.split("->")[-1])
    return alloc, idx, dims[0]


def _tma_parts(module: Module, op: Op) -> tuple[str, str, int]:
    """(barrier SSA, predicate SSA, bytes) of a TMA load: operands after the coordinates."""
    m = re.search(r"\]\s+(%[\w.$-]+)\s*,\s*(%[\w.$-]+)\s*,\s*(%[\w.$-]+)\s*:", op.text)
    if not m:
        raise TtgirError(f"{op}: cannot read '<buffer>, <barrier>, <pred>' after the coordinates")
    _buf, bar, pred = m.groups()
    dims, elem = memdesc_shape(op.text.rsplit("->", 1)[-1])
    size = element_bytes(elem)
    for d in dims:
        size *= d
    return bar, pred, size


def _expect_for(module: Module, op: Op, barrier: str) -> tuple[Op, list[Op]]:
    """The barrier_expect that opens ``op``'s group and all TMA loads of that group (same barrier)."""
    expect = None
    for prev in reversed(module.ops[: op.index]):
        if prev.loop != op.loop or prev.block_depth != op.block_depth:
            continue
        if prev.name == "ttng.barrier_expect" and prev.operands and prev.operands[0] == barrier:
            expect = prev
            break
    if expect is None:
        raise UnsupportedOpError(f"{op}: no ttng.barrier_expect on its barrier {barrier} before it in the same block")
    group = [o for o in module.ops[expect.index + 1:]
             if o.name == TMA_LOAD and o.loop == op.loop and o.block_depth == op.block_depth
             and _tma_parts(module, o)[0] == barrier]
    # the group ends at the next expect on the same barrier
    end = next((o.index for o in module.ops[expect.index + 1:] if o.name == "ttng.barrier_expect"
                and o.operands and o.operands[0] == barrier), len(module.ops))
    return expect, [o for o in group if o.index < end]


def _consumer_wait(module: Module, loop: ForLoop, alloc: str) -> tuple[Op, str, str]:
    """The wait_barrier in the loop on a slot of ``alloc``: (op, slot SSA, phase SSA)."""
    for i in loop.body:
        op = module.ops[i]
        if op.name == "ttng.wait_barrier" and op.loop == loop.op.index:
            bar = op.operands[0]
            d = module.defs.get(bar)
            if d is not None and d.name == "ttg.memdesc_index" and d.operands[0] == alloc:
                return op, d.operands[1], op.operands[1]
    raise UnsupportedOpError(f"{loop.op}: no ttng.wait_barrier on barrier array {alloc} inside the loop; "
                             "cannot recover the phase that signals completion")


def _analyse_tma(module: Module, ops: list[Op], iterations: int, loops: dict[int, ForLoop]) -> tuple[list[Instance], Completion]:
    first = ops[0]
    bar, _pred, nbytes = _tma_parts(module, first)
    alloc, _idx, slots = _barrier_index(module, first, bar)
    expect, group = _expect_for(module, first, bar)
    expect_bytes = int(re.search(r"barrier_expect\s+%[\w.$-]+\s*,\s*(\d+)", expect.text).group(1))
    group_bytes = sum(_tma_parts(module, o)[2] for o in group)
    if group_bytes != expect_bytes:
        raise DiscoveryError(f"{expect}: expects {expect_bytes} B but its loads carry {group_bytes} B; "
                             "the barrier group is not understood")
    completion = Completion("mbarrier", barrier_alloc=alloc, barrier_slots=slots, expect_bytes=expect_bytes,
                            op_bytes=nbytes, group_ops=len(group))
    in_loop = [o for o in ops if o.loop is not None]
    outside = [o for o in ops if o.loop is None]
    if not in_loop:
        insts = [Instance(o.line_no, "straight", [k]) for k, o in enumerate(outside)]
        for k, o in enumerate(outside):
            b, _, _ = _tma_parts(module, o)
            _, idx, _ = _barrier_index(module, o, b)
            completion.slot_by_iteration[k] = module.constant_int(idx) or 0
            completion.phase_by_iteration[k] = 0
        return insts, completion
    loop_ids = {o.loop for o in in_loop}
    if len(loop_ids) != 1 or len(in_loop) != 1:
        raise UnsupportedOpError(f"{first}: one in-loop copy per logical op is supported; found {len(in_loop)} "
                                 f"copies in {len(loop_ids)} loop(s)")
    loop = loops[in_loop[0].loop]
    prologue = [o for o in outside if o.index < loop.op.index]
    distance = len(prologue)
    wait_op, wait_slot, wait_phase = _consumer_wait(module, loop, alloc)
    completion.consumer_wait_line = wait_op.line_no
    trace = simulate_loop(module, loop, iterations)
    for t, env in enumerate(trace):
        for s in (wait_slot, wait_phase):
            if s.split("#")[0] not in env and module.constant_int(s) is None:
                raise DiscoveryError(f"{wait_op}: slot/phase {s} is not computable from constants and iter_args")
        completion.slot_by_iteration[t] = env.get(wait_slot, module.constant_int(wait_slot))
        completion.phase_by_iteration[t] = env.get(wait_phase, module.constant_int(wait_phase)) & 1
    instances = []
    for k, o in enumerate(prologue):
        b, _, _ = _tma_parts(module, o)
        _, idx, _ = _barrier_index(module, o, b)
        slot = module.constant_int(idx)
        if k < iterations and slot != completion.slot_by_iteration[k]:
            raise DiscoveryError(f"{o}: prologue copy {k} signals slot {slot} but the consumer waits on slot "
                                 f"{completion.slot_by_iteration[k]} for iteration {k}; pipeline mapping unknown")
        instances.append(Instance(o.line_no, "prologue", [k] if k < iterations else []))
    loop_bar, _, _ = _tma_parts(module, in_loop[0])
    _, loop_idx, _ = _barrier_index(module, in_loop[0], loop_bar)
    served = []
    for t, env in enumerate(trace):
        j = t + distance
        if j >= iterations:
            break  # the copy is predicated off in the last trips (it would fetch past K)
        slot = env.get(loop_idx.split("#")[0])
        if slot is None:
            raise DiscoveryError(f"{in_loop[0]}: its barrier slot {loop_idx} is not computable per trip")
        if slot != completion.slot_by_iteration[j]:
            raise DiscoveryError(f"{in_loop[0]}: trip {t} signals slot {slot} but iteration {j} is consumed from "
                                 f"slot {completion.slot_by_iteration[j]}; pipeline mapping unknown")
        served.append(j)
    instances.append(Instance(in_loop[0].line_no, "loop", served, trip_offset=distance))
    return instances, completion


def _analyse_wgmma(module: Module, ops: list[Op], iterations: int) -> tuple[list[Instance], Completion]:
    op = ops[0]
    # the wait that takes the dot's result is the one that retires it
    wait = next((o for o in module.ops[op.index + 1:] if o.name == WGMMA_WAIT and op.results
                 and o.operands and o.operands[0].split("#")[0] == op.results[0]), None)
    if wait is None:
        raise UnsupportedOpError(f"{op}: no ttng.warp_group_dot_wait after it; its completion is unknown")
    pend = module.attr_int(wait, "pendings")
    placement = "loop" if op.loop is not None else "straight"
    its = list(range(iterations)) if op.loop is not None else [0]
    return [Instance(op.line_no, placement, its)], Completion("wgmma_wait", wait_line=wait.line_no, wait_count=pend)


def _analyse_cp_async(module: Module, ops: list[Op], iterations: int, loops: dict[int, ForLoop]) -> tuple[list[Instance], Completion]:
    first = ops[0]
    token = first.results[0] if first.results else None
    commit = next((o for o in module.ops[first.index + 1:] if o.name == CP_ASYNC_COMMIT and token in o.operands), None)
    if commit is None:
        raise UnsupportedOpError(f"{first}: its token {token} is never committed (no ttg.async_commit_group)")
    # follow the group's token through loop-carried values to the async_wait that consumes it
    aliases = {commit.results[0]} if commit.results else set()
    changed = True
    while changed:
        changed = False
        for loop in module.loops.values():
            pairs = list(zip(loop.iter_args, loop.inits))
            if loop.yield_op is not None:
                pairs += list(zip(loop.iter_args, [y.split("#")[0] for y in loop.yield_op.operands]))
            for arg, src in pairs:
                if src in aliases and arg not in aliases:
                    aliases.add(arg)
                    changed = True
    waits = [o for o in module.ops if o.name == CP_ASYNC_WAIT and aliases & set(o.operands)]
    wait = next((w for w in waits if w.loop is not None), waits[0] if waits else None)
    if wait is None:
        raise UnsupportedOpError(f"{first}: no ttg.async_wait consumes its commit group {sorted(aliases)}; "
                                 "its completion is unknown")
    in_loop = [o for o in ops if o.loop is not None]
    prologue = [o for o in ops if o.loop is None]
    instances = [Instance(o.line_no, "prologue", [k]) for k, o in enumerate(prologue) if k < iterations]
    if in_loop:
        instances.append(Instance(in_loop[0].line_no, "loop", list(range(len(prologue), iterations)),
                                  trip_offset=len(prologue)))
    return instances, Completion("cp_async_group", commit_line=commit.line_no, wait_line=wait.line_no,
                                 wait_count=module.attr_int(wait, "num"))


def _label(op: Op, module: Module) -> str:
    m = re.search(r'loc\(#loc\d*\)', op.text)
    alias = m.group(0)[4:-1] if m else None
    expr = module._loc_exprs.get(alias, "") if alias else ""
    n = re.match(r'"([^"]*)"\(', expr)
    return n.group(1) if n else (op.results[0].lstrip("%") if op.results else op.name.split(".")[-1])


def stable_op_id(kernel: str, region: str, kind: str, rel_line: int, col: int) -> int:
    """32-bit op ID from what is invariant for one program version (not TTGIR line numbers)."""
    key = f"{kernel}|{region}|{kind}|{rel_line}:{col}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "little") or 1


def discover(ttgir: str | Module, region: str | None, *, iterations: int) -> Discovery:
    """Find the async sites in ``region``'s subtree of a TTGIR module (``None``: every region).

    ``iterations`` is the logical trip count of the pipelined loop (K / BLOCK_K); slot and phase are
    computed for each. Op IDs use source positions relative to the kernel's ``def`` line, so they do
    not change when code above the kernel moves.
    """
    if not isinstance(iterations, int) or iterations < 1:
        raise DiscoveryError(f"iterations must be an int >= 1, got {iterations!r}")
    module = ttgir if isinstance(ttgir, Module) else Module(ttgir)
    tree, spans = region_spans(module)
    if region is None:
        if not len(tree):
            raise DiscoveryError(f"kernel {module.func_name!r} has no Argus regions; mark one with argus.begin/end")
        names = set(tree.names)
        root_name = "*"
    else:
        try:
            root = tree[region]
        except RegionError as exc:
            raise DiscoveryError(str(exc)) from None
        names = {r.name for r in tree.subtree(root.name)}
        root_name = root.name
    selected = [s for s in spans if s.name in names]
    floc = module.resolve_loc("#loc") if "#loc" in module._loc_exprs else None  # the kernel's def line
    def_line = floc.line if floc else 0
    groups: dict[tuple, list[Op]] = {}
    unsupported = []
    for op in module.ops:
        if op.name not in SITE_KINDS and op.name not in UNSUPPORTED_ASYNC:
            continue
        span = _innermost(selected, op.loc)
        if span is None:
            continue
        if op.name in UNSUPPORTED_ASYNC:
            unsupported.append(f"{op} in region {span.name!r}: {UNSUPPORTED_ASYNC[op.name]}")
            continue
        groups.setdefault((op.name, op.loc, span.name), []).append(op)
    sites = []
    for (name, loc, span_name), ops in groups.items():
        kind = SITE_KINDS[name]
        if kind == "tma_load":
            instances, completion = _analyse_tma(module, ops, iterations, module.loops)
        elif kind == "wgmma":
            instances, completion = _analyse_wgmma(module, ops, iterations)
        else:
            instances, completion = _analyse_cp_async(module, ops, iterations, module.loops)
        op_id = stable_op_id(module.func_name, span_name, kind, loc.line - def_line, loc.col)
        sites.append(Site(op_id, kind, name, span_name, loc, _label(ops[0], module), instances, completion))
    sites.sort(key=lambda s: (s.source.line, s.source.col, s.kind))
    ids = [s.op_id for s in sites]
    if len(set(ids)) != len(ids):
        raise DiscoveryError(f"op ID collision among sites of {region!r}: {[hex(i) for i in ids]}")
    return Discovery(module.func_name, root_name, tree, sites, iterations, unsupported)


# ---- Triton programs and the Control task ---------------------------------------------------------
ASYNC_SITES_FORMAT = "argus.async_sites/1"
_TTGIR_CACHE: dict[str, tuple[str, int]] = {}
_LAUNCH_KEYS = ("module", "kernel", "signature", "constexprs", "num_stages", "num_warps", "iterations",
                "capability", "grid", "shapes")


def program_ttgir(program) -> tuple[str, int]:
    """(TTGIR text, logical loop iterations) of a ``kind="triton"`` :class:`ProgramVersion`.

    The program's ``launch`` names the kernel: ``{"module": "tma_matmul.py", "kernel":
    "tma_matmul_kernel", "signature": {...}, "constexprs": {...}, "num_stages": 3, "num_warps": 4,
    "iterations": 8, "capability": 90}``. Compiled once per program id and process.
    """
    cached = _TTGIR_CACHE.get(program.id)
    if cached:
        return cached
    import importlib.util
    from pathlib import Path

    import triton
    from triton.backends.compiler import GPUTarget

    if program.kind != "triton":
        raise DiscoveryError(f"program {program.label()} has kind {program.kind!r}; TTGIR discovery needs 'triton'")
    launch = program.launch
    missing = [k for k in ("module", "kernel", "signature", "iterations") if k not in launch]
    if missing or program.root is None:
        raise DiscoveryError(f"program {program.label()}: launch needs {missing or 'a source root'}; "
                             f"valid keys: {', '.join(_LAUNCH_KEYS)}")
    path = Path(program.root) / launch["module"]
    spec = importlib.util.spec_from_file_location(f"argus_triton_{program.id.replace('-', '_')}", path)
    if spec is None or spec.loader is None:
        raise DiscoveryError(f"cannot import the kernel module {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, launch["kernel"], None)
    if fn is None:
        raise DiscoveryError(f"{path} has no kernel {launch['kernel']!r}")
    src = triton.compiler.ASTSource(fn=fn, signature=launch["signature"], constexprs=launch.get("constexprs", {}))
    compiled = triton.compile(src, target=GPUTarget("cuda", int(launch.get("capability", 90)), 32),
                              options={"num_stages": launch.get("num_stages", 3),
                                       "num_warps": launch.get("num_warps", 4)})
    result = (compiled.asm["ttgir"], int(launch["iterations"]))
    _TTGIR_CACHE[program.id] = result
    return result


def async_sites_document(d: Discovery, program_id: str) -> dict:
    """The Control task's output: sites with op IDs; ``iterations`` lists the *probe* candidates
    (TMA loads only), ``logical_iterations`` every iteration a site serves."""
    sites = []
    for s in d.sites:
        doc = s.to_json()
        doc["logical_iterations"] = s.iterations
        doc["iterations"] = s.iterations if s.kind == "tma_load" else []
        doc["completion_text"] = s.completion.describe()
        sites.append(doc)
    return {"format": ASYNC_SITES_FORMAT, "program": program_id, "kernel": d.kernel, "region": d.region,
            "iterations": d.iterations, "sites": sites, "unsupported": d.unsupported}


def async_discovery_task(ctx) -> dict:
    """Control handler ``async_discovery`` for Triton programs: TTGIR + async_sites JSON."""
    ttgir, iterations = program_ttgir(ctx.program)
    d = discover(ttgir, ctx.region, iterations=iterations)
    ttgir_path = ctx.outdir / "reference.ttgir"
    ttgir_path.write_text(ttgir, encoding="utf-8")
    return {"async_sites": ctx.write_json("async_sites", async_sites_document(d, ctx.program.id)),
            "ttgir": ttgir_path}


def _register_handlers() -> None:
    try:
        from ..runtime.handlers import register_control
    except ImportError:  # the runtime is optional for standalone discovery
        return
    register_control("async_discovery", async_discovery_task, kind="triton")


_register_handlers()
