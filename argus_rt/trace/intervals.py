"""Pair BEGIN/END events of each warp into nested intervals (one per region occurrence)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import layout
from .decode import LANES_WHOLE_WARP, Trace
from .errors import MismatchedMarkersError

INTERVAL_DTYPE = np.dtype(
    [
        ("ring", "<u4"),
        ("sm", "<u4"),
        ("cta", "<u4"),
        ("warp", "<u4"),
        ("region_id", "<u4"),
        ("coord", "<u4"),
        ("depth", "<u4"),  # 0 = outermost region of the warp
        ("parent", "<i8"),  # row of the enclosing interval in the same array, -1 for none
        ("start", "<u8"),
        ("end", "<u8"),
        ("duration", "<u8"),  # end - start, in Trace.unit
        ("lanes", "<u4"),  # lane group that ran the occurrence's BEGIN (decode.LANES_WHOLE_WARP: the whole warp)
    ]
)



def coordinate_columns(coord, fields) -> dict[str, np.ndarray]:
    """{name: that bit field of each packed coordinate} (the ``coord`` column) for ``fields`` =
    ((name, lowest bit, width), ...), e.g. a megakernel's (step, layer) packed into one 32-bit coord."""
    coord = np.asarray(coord, dtype=np.int64)
    return {name: (coord >> low) & ((1 << width) - 1) for name, low, width in fields}

@dataclass
class Intervals:
    """Region occurrences of a trace.

    rows:       INTERVAL_DTYPE array, ordered by (ring, start).
    unit:       "ns" or "cycles".
    incomplete: True when occurrences were lost (wrapped rings, missing warps) or, with
                strict=False, left unmatched; `problems` says which.
    """

    rows: np.ndarray
    unit: str
    problems: list[str] = field(default_factory=list)

    @property
    def incomplete(self) -> bool:
        return bool(self.problems)

    def __len__(self) -> int:
        return len(self.rows)

    def region(self, region_id: int) -> np.ndarray:
        return self.rows[self.rows["region_id"] == region_id]


def _where(ev) -> str:
    return f"ring {int(ev['ring'])} (CTA {int(ev['cta'])} warp {int(ev['warp'])}, SM {int(ev['sm'])}) record {int(ev['index'])}"


def _coord(c: int) -> str:
    return "none" if c == layout.COORD_NONE else str(c)


def _pair_fast(events: np.ndarray) -> np.ndarray | None:
    """Vectorised pairing for the common case: every ring properly nested and closed, nothing lost.

    Returns the same rows as the event-by-event loop, or None when anything is irregular (the loop
    then finds and reports the exact problem). A BEGIN at nesting level L pairs with the next END
    at level L in its ring; sorting by (ring, level, position) puts each pair next to each other.
    """
    n = len(events)
    if n == 0:
        return np.zeros(0, dtype=INTERVAL_DTYPE)
    if (events["lanes"] != LANES_WHOLE_WARP).any():
        return None  # lane groups: the loop pairs each group's markers
    ring = events["ring"].astype(np.int64)
    is_begin = events["kind"] == layout.KIND_BEGIN
    step = np.where(is_begin, 1, -1).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, ring[1:] != ring[:-1]])
    lengths = np.diff(np.r_[starts, n])
    csum = np.cumsum(step)
    depth_after = csum - np.repeat(csum[starts] - step[starts], lengths)
    level = np.where(is_begin, depth_after - 1, depth_after)
    if (level < 0).any() or (depth_after[starts + lengths - 1] != 0).any():
        return None
    pos = np.arange(n)
    order = np.lexsort((pos, level, ring))
    ob = is_begin[order]
    if not (ob[0::2].all() and not ob[1::2].any()):
        return None
    b, e = order[0::2], order[1::2]
    if (events["region_id"][b] != events["region_id"][e]).any() or (events["coord"][b] != events["coord"][e]).any():
        return None
    b_sorted = np.sort(b)  # rows in (ring, begin position) order, like the loop
    row_of_begin = np.empty(n, dtype=np.int64)
    row_of_begin[b_sorted] = np.arange(len(b_sorted))
    end_of_begin = np.empty(n, dtype=np.int64)
    end_of_begin[b] = e
    e_sorted = end_of_begin[b_sorted]
    lv = level[b_sorted]
    parent = np.full(len(b_sorted), -1, dtype=np.int64)
    for d in range(1, int(lv.max()) + 1 if len(lv) else 0):
        here = np.flatnonzero(lv == d)
        above = b_sorted[lv == d - 1]  # begin positions one level up, increasing
        idx = np.searchsorted(above, b_sorted[here]) - 1
        ok = idx >= 0
        cand = above[np.clip(idx, 0, None)]
        ok &= ring[cand] == ring[b_sorted[here]]
        if not ok.all():
            return None
        parent[here] = row_of_begin[cand]
    rows = np.zeros(len(b_sorted), dtype=INTERVAL_DTYPE)
    for f in ("ring", "sm", "cta", "warp", "region_id", "coord"):
        rows[f] = events[f][b_sorted]
    rows["depth"] = lv
    rows["parent"] = parent
    rows["start"] = events["time"][b_sorted]
    rows["end"] = events["time"][e_sorted]
    if (rows["end"] < rows["start"]).any():
        return None  # the loop names the END stamped before its BEGIN
    rows["duration"] = rows["end"] - rows["start"]
    rows["lanes"] = LANES_WHOLE_WARP
    return rows


def pair_intervals(trace: Trace, *, strict: bool = True) -> Intervals:
    """Nested intervals per warp.

    A ring that wrapped lost its oldest records, so ENDs whose BEGIN was overwritten are skipped
    and the result is marked incomplete. Any other mismatch (an END that does not close the
    innermost open region with the same ID and coordinate, an END with nothing open, a BEGIN
    never closed) raises MismatchedMarkersError when ``strict``; with ``strict=False`` the
    offending events are skipped and listed in ``problems``.
    """
    problems = list(trace.problems)
    out: list[tuple] = []
    events = trace.events
    wrapped = {int(r["ring"]) for r in trace.rings if int(r["dropped"]) > 0}
    if not wrapped:
        fast = _pair_fast(events)
        if fast is not None:
            return Intervals(rows=fast, unit=trace.unit, problems=problems)

    def fail(msg: str) -> None:
        if strict:
            raise MismatchedMarkersError(msg)
        problems.append(msg)

    if len(events):
        bounds = np.flatnonzero(np.diff(events["ring"].astype(np.int64))) + 1
        for chunk in np.split(events, bounds):
            ring = int(chunk["ring"][0])
            stack: list[tuple[int, int]] = []  # (event row in chunk, output row)
            lost_prefix = ring in wrapped
            for k in range(len(chunk)):
                ev = chunk[k]
                rid, coord, kind, lanes = int(ev["region_id"]), int(ev["coord"]), int(ev["kind"]), int(ev["lanes"])
                # The innermost open region of these lanes: lane groups of a divergent warp nest independently.
                at = next((j for j in range(len(stack) - 1, -1, -1) if out[stack[j][1]][11] & lanes), None)
                if kind == layout.KIND_BEGIN:
                    parent = stack[at][1] if at is not None else -1
                    depth = out[parent][6] + 1 if parent >= 0 else 0
                    out.append((ring, int(ev["sm"]), int(ev["cta"]), int(ev["warp"]), rid, coord, depth, parent,
                                int(ev["time"]), 0, 0, lanes))
                    stack.append((k, len(out) - 1))
                    continue
                if at is None:
                    if lost_prefix:
                        continue  # its BEGIN was overwritten; counted by the wrap problem already
                    fail(f"{_where(ev)}: END of region 0x{rid:08x} (coord {_coord(coord)}) with no open region")
                    continue
                bk, row = stack[at]
                b = out[row]
                if b[4] != rid or b[5] != coord or (b[11] & lanes) != lanes:
                    group = "" if lanes == b[11] == LANES_WHOLE_WARP else f" (lanes 0x{lanes:08x} / 0x{b[11]:08x})"
                    fail(
                        f"{_where(ev)}: END of region 0x{rid:08x} (coord {_coord(coord)}) but the innermost open "
                        f"region is 0x{b[4]:08x} (coord {_coord(b[5])}) begun at record {int(chunk[bk]['index'])}{group}"
                    )
                    continue
                start = b[8]
                end = int(ev["time"])
                if end < start:  # per-SM clock64 of an appended ring: no duration to give
                    fail(f"{_where(ev)}: END of region 0x{rid:08x} at {end} is before its BEGIN at {start} "
                         f"(record {int(chunk[bk]['index'])}): stamps of different SM clocks or damaged")
                    continue
                stack.pop(at)
                out[row] = b[:9] + (end, end - start) + b[11:]
            for bk, row in stack:
                fail(f"{_where(chunk[bk])}: BEGIN of region 0x{out[row][4]:08x} is never closed")
            if stack:
                # Unclosed occurrences carry no duration; drop them (and re-point their children).
                dead = {row for _, row in stack}
                keep = [r for r in range(len(out)) if r not in dead]
                remap = {old: new for new, old in enumerate(keep)}
                out = [o[:7] + (remap.get(o[7], -1),) + o[8:] for o in (out[r] for r in keep)]
    rows = np.array(out, dtype=INTERVAL_DTYPE) if out else np.zeros(0, dtype=INTERVAL_DTYPE)
    return Intervals(rows=rows, unit=trace.unit, problems=problems)
