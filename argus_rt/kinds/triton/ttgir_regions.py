"""Argus regions in TTGIR: read the markers, and decide which ops a region holds by source call stack.

Pipelining moves ops away from their markers, so membership is decided by source position, not by
TTGIR order. Positions are call stacks (:class:`~argus_rt.kinds.triton.ttgir_locations.Location`):
inlining a ``@triton.jit`` helper gives its ops (and its markers) the stack ``[call site in the
kernel, position in the helper]``.

A region's **span** is one begin/end marker pair. Both markers must sit in the same function
body: their stacks share every frame but the last (the *call prefix*; empty for the kernel's own
body). An op is inside the span when its stack starts with that prefix and its next frame lies
strictly between the begin and end markers' last frames. So

* a region marked in the kernel body holds everything its source lines hold, helpers' ops
  included (their outermost frame is the call site);
* a region marked inside a helper holds the helper's ops **per call site**: a helper called twice
  gives two spans of the one region (one per call site), each holding only its own call's ops.
  Discovery reports sites per span (``Site.call_site``) and the region tree has the region once.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...regions import RegionTree, region_id
from .regions import MARKER_ASM_PATTERN
from .ttgir_locations import Location, SourceLoc
from .ttgir_module import Module, Op, TtgirError

MARKER_OP = "tt.elementwise_inline_asm"
HELPER_REGIONS = "per_call_site"  # how regions marked inside helpers are reported (see the module docstring)


@dataclass(frozen=True)
class Marker:
    op: Op
    kind: str  # "begin" | "end"
    name: str
    region_id: int
    words: tuple[int, int, int]


@dataclass(frozen=True)
class RegionSpan:
    """One begin/end pair of a region: the call prefix it was marked under and its begin/end frames."""

    name: str
    id: int
    call_prefix: tuple[SourceLoc, ...]  # empty: marked in the kernel's own body
    begin: SourceLoc
    end: SourceLoc

    def contains(self, loc: Location | SourceLoc | None) -> bool:
        if loc is None:
            return False
        stack = loc.stack if isinstance(loc, Location) else (loc,)
        n = len(self.call_prefix)
        if len(stack) <= n or stack[:n] != self.call_prefix:
            return False
        f = stack[n]
        return f.file == self.begin.file and (self.begin.line, self.begin.col) < (f.line, f.col) \
            < (self.end.line, self.end.col)

    @property
    def call_site(self) -> str | None:
        """Where the helper holding this span was called (``None`` in the kernel's own body)."""
        return " > ".join(str(f) for f in self.call_prefix) or None

    def to_json(self) -> dict:
        return {"name": self.name, "id": self.id, "call_site": self.call_site, "begin": str(self.begin),
                "end": str(self.end)}


def markers(module: Module) -> list[Marker]:
    """Every Argus marker op, in TTGIR order, with its ID checked against its name."""
    out = []
    for op in module.ops:
        if op.name != MARKER_OP:
            continue
        asm = op.ir.str_attr("asm_string") if op.ir is not None else None
        if asm is None or "argus:" not in asm:
            continue
        m = MARKER_ASM_PATTERN.search(asm)
        if not m:
            raise TtgirError(f"{op}: inline asm mentions argus but is not a well-formed Argus marker")
        words = tuple(int(m.group(g), 16) for g in ("w0", "w1", "w2"))
        rid = (words[2] << 16) | words[1]
        if rid != region_id(m.group("name")):
            raise TtgirError(f"{op}: marker for {m.group('name')!r} carries ID 0x{rid:08x}, but the name hashes to "
                             f"0x{region_id(m.group('name')):08x}")
        out.append(Marker(op, m.group("kind"), m.group("name"), rid, words))
    return out


def region_spans(module: Module) -> tuple[RegionTree, list[RegionSpan]]:
    """Read Argus markers; check IDs and nesting; return the tree and one span per begin/end pair."""
    tree = RegionTree(module.func_name or "kernel")
    opened: dict[tuple, SourceLoc] = {}
    spans: list[RegionSpan] = []
    for mk in markers(module):
        stack = mk.op.location.stack
        if not stack:
            raise TtgirError(f"{mk.op}: marker for {mk.name!r} has no source location")
        key = (mk.name, stack[:-1])
        where = f" (called at {' > '.join(map(str, stack[:-1]))})" if len(stack) > 1 else ""
        if mk.kind == "begin":
            if key in opened:
                raise TtgirError(f"{mk.op}: region {mk.name!r} begins twice{where}")
            opened[key] = stack[-1]
            if mk.name not in tree:
                tree.add(mk.name)
        else:
            if key not in opened:
                raise TtgirError(f"{mk.op}: end of region {mk.name!r} without a begin in the same function{where}")
            spans.append(RegionSpan(mk.name, mk.region_id, stack[:-1], opened.pop(key), stack[-1]))
    if opened:
        raise TtgirError(f"regions begun but never ended in {module.func_name}: {sorted(k[0] for k in opened)}")
    return tree, spans


def innermost(spans: list[RegionSpan], loc: Location | None) -> RegionSpan | None:
    """The deepest span holding ``loc``: most nested region name, then the longest call prefix."""
    inside = [s for s in spans if s.contains(loc)]
    return max(inside, key=lambda s: (s.name.count("/"), len(s.call_prefix))) if inside else None


def region_ops(module: Module, spans: list[RegionSpan]) -> dict[str, list[Op]]:
    """Region name -> the ops whose innermost span is that region (markers left out); what a region
    holds directly, by source call stack."""
    marker_ops = {mk.op.index for mk in markers(module)}
    out: dict[str, list[Op]] = {s.name: [] for s in spans}
    for op in module.ops:
        span = innermost(spans, op.location) if op.index not in marker_ops else None
        if span is not None:
            out[span.name].append(op)
    return out
