"""Decode a buffer region (bytes written by the device) into numpy structured arrays.

Every ring header is checked against the configuration it was armed with; anything the device
cannot have written raises :class:`CorruptTraceError` naming the ring and field. Lost records
(a wrapped ring, warps without a ring) never vanish silently: they are counted and make the
trace ``incomplete``. So do states that a damaged header or timestamp leaves behind but that are
not impossible on their own (each is listed in ``problems``):

* a ring headed with another arm's ``seq``: TraceSession.arm clears the rings, so under the arm
  being decoded it can only be a damaged header (or a launch of an earlier arm still running);
* records in slots past ``written``: the cleared ring held zeros there, so ``written`` is too low;
* a ring (or, for the shared %globaltimer clock, the whole trace) spanning more than
  MAX_PLAUSIBLE_SPAN: one damaged timestamp, not a region that ran for many minutes.

The anchored build's anchors are checked against the records they were read with (records come
after the first anchor; the latest anchor is at or after the record that refreshed it) and against
plausible SM clocks (:mod:`.anchors`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from . import layout
from .anchors import RingAnchors, cycles_to_ns, fit_rates
from .config import TraceConfig
from .errors import (
    ClockConversionError,
    CorruptTraceError,
    DivergentMarkersError,
    TruncatedTraceError,
    UnknownRegionIdError,
)

# Longest span of timestamps one trace may hold before it is flagged: 2**40 ns is 18.3 minutes
# (2**42 cycles: 37 minutes at 2 GHz). A region inside one kernel launch lasting that long is far
# likelier a damaged timestamp.
MAX_PLAUSIBLE_SPAN = {"ns": 2**40, "cycles": 2**42}

# Decoded records, in production order within each ring; rings in index order.
EVENT_DTYPE = np.dtype(
    [
        ("ring", "<u4"),
        ("sm", "<u4"),
        ("cta", "<u4"),
        ("warp", "<u4"),
        ("index", "<u4"),  # position in the ring's production order (0 = oldest kept)
        ("region_id", "<u4"),
        ("coord", "<u4"),
        ("kind", "u1"),  # layout.KIND_BEGIN or layout.KIND_END
        ("time", "<u8"),  # ns (globaltimer) or cycles (clock64): see Trace.unit
        ("lanes", "<u4"),  # active-lane mask of the lane group that ran the marker; LANES_WHOLE_WARP = all its lanes
    ]
)

# `lanes` of a record without a lane-group record after it: made by all the warp's lanes together. The register
# cursor writes no lane-group record (all its events get this); the shared-cursor markers write one after each
# marker of a divergent or partial lane group.
LANES_WHOLE_WARP = 0xFFFFFFFF

# One row per ring claimed under this arm.
RING_DTYPE = np.dtype(
    [
        ("ring", "<u4"),
        ("sm", "<u4"),
        ("cta", "<u4"),
        ("warp", "<u4"),
        ("written", "<u4"),
        ("kept", "<u4"),
        ("dropped", "<u4"),
        ("claims", "<u4"),
    ]
)


@dataclass
class Trace:
    """Decoded trace of one arm.

    events:  EVENT_DTYPE array, grouped by ring, production order within a ring.
    rings:   RING_DTYPE array of the rings claimed under this arm (others recorded nothing).
    unit:    "ns" or "cycles".
    dropped: records lost to wrapping rings (sum over rings).
    unbuffered: warps that passed the filters but had no ring (device counter; None = not read).
    incomplete: True when any record was lost; `problems` says which and why.
    """

    config: TraceConfig
    events: np.ndarray
    rings: np.ndarray
    unbuffered: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def unit(self) -> str:
        return self.config.unit

    @property
    def dropped(self) -> int:
        return int(self.rings["dropped"].sum()) if len(self.rings) else 0

    @property
    def incomplete(self) -> bool:
        return bool(self.problems)

    def ring_events(self, ring: int) -> np.ndarray:
        return self.events[self.events["ring"] == ring]


def _as_bytes_array(buffer) -> np.ndarray:
    if isinstance(buffer, np.ndarray):
        return np.ascontiguousarray(buffer).view(np.uint8).reshape(-1)
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        return np.frombuffer(buffer, dtype=np.uint8)
    raise TypeError(f"trace buffer must be bytes or a numpy array, got {type(buffer).__name__}")


def decode(
    buffer,
    config: TraceConfig,
    *,
    known_ids: Iterable[int] | None = None,
    unbuffered: int | None = None,
) -> Trace:
    """Decode the buffer region of one arm.

    buffer:     the region's bytes (``config.buffer_bytes`` long, or longer).
    config:     the configuration it was armed with (its ``seq`` identifies this arm's rings).
    known_ids:  region IDs of the program; a record with another ID raises UnknownRegionIdError.
    unbuffered: the device's count of warps without a ring (from argus_ctl), if read.
    """
    raw = _as_bytes_array(buffer)
    need = config.buffer_bytes
    if raw.size < need:
        raise TruncatedTraceError(
            f"trace buffer holds {raw.size} bytes but {config.num_rings} rings of {config.capacity} records "
            f"need {need} bytes ({config.num_rings} x {layout.ring_stride(config.capacity, config.clock_mode)})"
        )
    anchored = config.clock_mode == layout.CLOCK_ANCHORED
    stride = layout.ring_stride(config.capacity, config.clock_mode)
    head = layout.header_bytes(config.clock_mode)
    region = raw[:need].reshape(config.num_rings, stride)
    headers = region[:, : layout.RING_HEADER_DTYPE.itemsize].copy().view(layout.RING_HEADER_DTYPE).reshape(-1)
    if anchored:
        anchor_rows = region[:, layout.ANCHOR_FIRST_OFFSET : head].copy().view(layout.ANCHORS_DTYPE).reshape(-1)
    records = region[:, head:].copy().view(layout.RECORD_DTYPE)
    ring_anchors: list[RingAnchors] = []
    known = None if known_ids is None else {int(i) for i in known_ids}

    problems: list[str] = []
    ring_rows = []
    chunks = []
    cap = config.capacity
    for i in range(config.num_rings):
        h = headers[i]
        magic, seq = int(h["magic"]), int(h["seq"])
        if magic == 0:
            if any(int(h[f]) for f in layout.RING_HEADER_DTYPE.names):
                raise CorruptTraceError(f"ring {i}: header has no magic but non-zero fields {h.tolist()}")
            continue  # never claimed
        if magic != layout.RING_MAGIC:
            raise CorruptTraceError(
                f"ring {i}: header magic 0x{magic:08x} is not 0x{layout.RING_MAGIC:08x} (ARGR) or 0 (unclaimed)"
            )
        if seq != config.seq:
            problems.append(
                f"ring {i}: header seq {seq} is not this arm's seq {config.seq}: a damaged header, or a launch "
                "of another arm wrote it after TraceSession.arm cleared the rings; its records are not counted"
            )
            continue
        cta, warp, sm = int(h["cta"]), int(h["warp"]), int(h["sm"])
        if warp & layout.RING_WARP_DIVERGENT:
            raise DivergentMarkersError(_divergent_message(i, sm, cta, warp & ~layout.RING_WARP_DIVERGENT))
        lanes_ring = bool(warp & layout.RING_WARP_LANES)
        warp &= ~layout.RING_WARP_LANES
        if config.ring_of(cta, warp) != i or warp >= config.warps_per_cta or not config.cta_begin <= cta < config.cta_end:
            raise CorruptTraceError(
                f"ring {i}: header says CTA {cta} warp {warp}, which maps to ring {config.ring_of(cta, warp)} "
                f"(CTAs [{config.cta_begin}, {config.cta_end}), {config.warps_per_cta} warps per CTA)"
            )
        if sm >= layout.MAX_SMS:
            raise CorruptTraceError(f"ring {i}: SM id {sm} >= {layout.MAX_SMS}")
        written, dropped, claims = int(h["written"]), int(h["dropped"]), int(h["claims"])
        expected_dropped = max(0, written - cap)
        if dropped != expected_dropped:
            raise CorruptTraceError(
                f"ring {i} (CTA {cta} warp {warp}): dropped={dropped} but written={written} with capacity {cap} "
                f"means {expected_dropped} records were overwritten"
            )
        if claims < 1:
            raise CorruptTraceError(f"ring {i} (CTA {cta} warp {warp}): claims={claims}, must be >= 1 when claimed")
        if lanes_ring:
            ev, row = _decode_lanes_ring(i, sm, cta, warp, h, records[i], config, problems)
            _check_ids(ev, i, cta, warp, known)
            chunks.append(ev)
            ring_rows.append(row)
            continue
        kept = min(written, cap)
        recs = records[i]
        if written > cap:
            start = written % cap
            recs = np.concatenate([recs[start:], recs[:start]])
            # Register-cursor markers outside the coordinate window store too (into the next slot, which the
            # next recorded marker overwrites); in a wrapped ring that slot holds the oldest kept record.
            # Such a leftover is recognisable: its coordinate is outside the armed window.
            lo, hi = config.coord_window if config.coord_window is not None else (0, layout.COORD_NONE)
            c0 = int(recs["coord"][0])
            if c0 != layout.COORD_NONE and (c0 - lo) % (1 << 32) >= (hi - lo) % (1 << 32):
                recs = recs[1:]
                kept -= 1
                dropped += 1
            problems.append(
                f"ring {i} (CTA {cta} warp {warp}, SM {sm}) wrapped: {dropped} oldest of {written} records overwritten"
            )
        else:
            unused = _written_unused_slots(records[i], kept, config)
            if unused:
                problems.append(
                    f"ring {i} (CTA {cta} warp {warp}): {unused} record slot(s) after written={written} hold data: "
                    "the header's written count is damaged (records were lost), or the rings were not cleared "
                    "when armed"
                )
            recs = recs[:kept]
        kinds = (recs["stamp"] >> np.uint64(layout.KIND_SHIFT)).astype(np.uint8)
        bad = np.flatnonzero((kinds != layout.KIND_BEGIN) & (kinds != layout.KIND_END) & (kinds != layout.KIND_LANES))
        if bad.size:
            k = int(bad[0])
            raise CorruptTraceError(
                f"ring {i} (CTA {cta} warp {warp}): record {k} of {kept} has kind {int(kinds[k])} "
                f"(valid: {layout.KIND_BEGIN} begin, {layout.KIND_END} end, {layout.KIND_LANES} lane group; "
                "0 = never written)"
            )
        slot_times = recs["stamp"] & np.uint64(layout.TIME_MASK)  # every kept slot, lane-group records too
        recs, kinds, lanes, orphan = _split_lane_records(recs, kinds, i, cta, warp, wrapped=written > cap)
        slot_times = slot_times[orphan:]
        kept -= orphan
        dropped += orphan
        zero = np.flatnonzero(recs["region_id"] == 0)
        if zero.size:
            raise CorruptTraceError(f"ring {i} (CTA {cta} warp {warp}): record {int(zero[0])} has region ID 0 (reserved)")
        _check_ids(recs, i, cta, warp, known)
        times = recs["stamp"] & np.uint64(layout.TIME_MASK)
        # clock64 is per SM: launches appended under one arm may run this CTA on another SM. Lane groups of
        # one warp take their slots in any order, so time only has to grow within each group.
        monotone = config.clock_mode == layout.CLOCK_GLOBALTIMER or claims == 1
        backwards = _first_backwards(times, lanes) if monotone and len(times) > 1 else None
        if backwards is not None:
            k = backwards
            raise CorruptTraceError(
                f"ring {i} (CTA {cta} warp {warp}): time goes backwards between records {k} and {k + 1} "
                f"({int(times[k])} -> {int(times[k + 1])} {config.unit})"
            )
        if anchored and claims == 1 and kept:
            _check_anchors_against_records(i, cta, warp, anchor_rows[i], slot_times, written, kept, cap)
        ev = np.zeros(len(recs), dtype=EVENT_DTYPE)
        ev["ring"], ev["sm"], ev["cta"], ev["warp"] = i, sm, cta, warp
        ev["index"] = np.arange(len(recs), dtype=np.uint32)
        ev["lanes"] = lanes
        ev["region_id"] = recs["region_id"]
        ev["coord"] = recs["coord"]
        ev["kind"] = kinds
        ev["time"] = times
        chunks.append(ev)
        if anchored:
            a = anchor_rows[i]
            ring_anchors.append(RingAnchors(i, sm, int(a["first_timer"]), int(a["first_clock"]),
                                            int(a["last_timer"]), int(a["last_clock"]), claims))
            if claims > 1:
                problems.append(
                    f"approximate: ring {i} (CTA {cta} warp {warp}) was appended by {claims} CTA instances; their "
                    f"cycle stamps are converted with the first instance's anchors (wrong if they ran on another SM)"
                )
        ring_rows.append((i, sm, cta, warp, written, kept, dropped, claims))
    if unbuffered:
        hint = (" (register-cursor warps, ARGUS_WARP_STATE, record %globaltimer only and count here when armed "
                "with clock='clock64': arm clock='globaltimer', or build with ARGUS_TS_ANCHORED for cycle stamps)"
                if config.clock_mode == layout.CLOCK_CLOCK64 else "")
        problems.append(f"{unbuffered} warp(s) passed the filters but had no ring: their records are missing{hint}")
    if anchored:
        rates, approx = fit_rates(ring_anchors)
        problems.extend(approx)
        for ev in chunks:
            if len(ev):
                ev["time"] = cycles_to_ns(ev["time"], rates[int(ev["ring"][0])])
    problems.extend(_implausible_spans(chunks, config))
    events = np.concatenate(chunks) if chunks else np.zeros(0, dtype=EVENT_DTYPE)
    rings = np.array(ring_rows, dtype=RING_DTYPE) if ring_rows else np.zeros(0, dtype=RING_DTYPE)
    return Trace(config=config, events=events, rings=rings, unbuffered=unbuffered, problems=problems)


def _check_ids(recs: np.ndarray, i: int, cta: int, warp: int, known: set[int] | None) -> None:
    if known is not None:
        ids = np.unique(recs["region_id"])
        unknown = [int(x) for x in ids if int(x) not in known]
        if unknown:
            raise UnknownRegionIdError(
                f"ring {i} (CTA {cta} warp {warp}): region ID(s) {', '.join(f'0x{u:08x}' for u in unknown)} "
                f"not in the program's regions ({', '.join(f'0x{k:08x}' for k in sorted(known)) or 'none'})"
            )


def _launch_lanes(config: TraceConfig, warp: int) -> int:
    """The lanes warp ``warp`` of a CTA has at launch (fewer than 32 in a last warp that is not full)."""
    left = config.threads_per_cta - 32 * warp
    return 0xFFFFFFFF if left >= 32 else (1 << left) - 1


def _decode_lanes_ring(i: int, sm: int, cta: int, warp: int, h, ring_records: np.ndarray, config: TraceConfig,
                       problems: list[str]) -> tuple[np.ndarray, tuple]:
    """A ring of the register cursor's lanes build (layout.RING_WARP_LANES): 32 sub-rings of capacity // 32 records,
    sub-ring L written by lane L alone (as the lowest active lane of each marker's lane group) and closed by its end
    record. Returns the ring's events (each sub-ring dated from its end record's full stamp, lane masks restored,
    the sub-rings merged by time) and its RING_DTYPE row; wrapped sub-rings and a lane without an end record are
    added to ``problems``. Anything the device cannot have written raises CorruptTraceError, in one line."""
    where = f"ring {i} (CTA {cta} warp {warp}, SM {sm})"
    if config.clock_mode != layout.CLOCK_GLOBALTIMER:
        raise CorruptTraceError(f"{where}: a lanes-build ring (-DARGUS_REG_LANES=1) under clock "
                                f"{config.clock!r}: that build records %globaltimer only")
    if int(h["claims"]) != 1:
        raise CorruptTraceError(
            f"{where} refused: claimed by {int(h['claims'])}+ launches under one arm; the lanes build "
            "(-DARGUS_REG_LANES=1) restarts every lane's sub-ring at each launch, so the later launch overwrote the "
            "earlier one's records: arm before each launch")
    if int(h["written"]) or int(h["dropped"]):
        raise CorruptTraceError(f"{where}: a lanes-build ring header with written={int(h['written'])}, "
                                f"dropped={int(h['dropped'])} (that build writes 0: its end records hold the counts)")
    cap = config.capacity
    if cap < layout.LANES_MIN_CAPACITY:
        raise CorruptTraceError(f"{where}: a lanes-build ring of capacity {cap} < {layout.LANES_MIN_CAPACITY} "
                                "(that build records nothing there)")
    sub = cap // 32
    launch = _launch_lanes(config, warp)
    parts = []  # (time, rank, writer, position in its sub-ring, region, coord, kind, lanes) per sub-ring
    written = kept = dropped = 0
    wrapped = []
    grid = ring_records[: 32 * sub].reshape(32, sub)
    used = (grid["region_id"] != 0) | (grid["coord"] != 0) | (grid["stamp"] != 0)
    n_used = used.sum(axis=1)
    # the common sub-ring: nothing, or only a zero-count end record in slot 0 (a lane that wrote no record)
    idle = (n_used == 0) | ((n_used == 1) & (grid["region_id"][:, 0] == 0) & (grid["coord"][:, 0] == 0)
                            & ((grid["stamp"][:, 0] >> np.uint64(layout.KIND_SHIFT)) == layout.LANES_END_KIND))
    for lane in range(32):
        if idle[lane] and (n_used[lane] == 0 or (launch >> lane) & 1):
            continue
        r = ring_records[lane * sub:(lane + 1) * sub]
        ids, coords, stamps = r["region_id"], r["coord"], r["stamp"]
        empty = (ids == 0) & (coords == 0) & (stamps == 0)
        ends = np.flatnonzero((ids == 0) & ((stamps >> np.uint64(layout.KIND_SHIFT)) == layout.LANES_END_KIND))
        if len(ends) == 0:
            if not empty.all():
                problems.append(f"{where}: lane {lane}'s sub-ring holds {int((~empty).sum())} record(s) but no end "
                                "record (the lane left without the cursor's scope exit): they are not counted")
            continue
        if len(ends) > 1:
            raise CorruptTraceError(f"{where}: lane {lane}'s sub-ring has {len(ends)} end records (slots "
                                    f"{', '.join(map(str, ends[:4].tolist()))}); a lane writes one")
        if not (launch >> lane) & 1:
            raise CorruptTraceError(f"{where}: lane {lane}'s sub-ring has an end record, but the warp has lanes "
                                    f"0x{launch:08x} at launch")
        e = int(ends[0])
        n = int(coords[e])
        if n & (sub - 1) != e:
            raise CorruptTraceError(f"{where}: lane {lane}'s end record is at slot {e}, but its count {n} puts it at "
                                    f"slot {n & (sub - 1)} of {sub}")
        if n < sub:
            slots = np.arange(n)
            rest = np.ones(sub, dtype=bool)
            rest[: n + 1] = False
            if (~empty & rest).any():
                problems.append(f"{where}: lane {lane}'s sub-ring holds data past its count {n}: the rings were "
                                "not cleared when armed, or the end record is damaged")
        else:
            slots = np.arange(n + 1, n + sub) % sub  # the end record overwrote the oldest slot
            wrapped.append((lane, n - (sub - 1), n))
        rec = r[slots]
        bad = np.flatnonzero(rec["region_id"] == 0)
        if bad.size:
            k = int(slots[bad[0]])
            raise CorruptTraceError(f"{where}: lane {lane}'s sub-ring slot {k}, below its count {n}, holds no record "
                                    f"(region ID 0, stamp 0x{int(r['stamp'][k]):016x})")
        end_time = int(stamps[e]) & layout.TIME_MASK
        lo = (rec["stamp"] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        hi = (rec["stamp"] >> np.uint64(32)).astype(np.int64)
        times = end_time - ((end_time - lo) % (1 << 32))  # each record at most 2^32 ns (4.3 s) before its lane left
        kind_bit = hi & 1
        masks = (hi & ~1) | (1 if lane == 0 else 0)
        low_bits = (1 << lane) - 1
        wrong = np.flatnonzero(((masks & low_bits) != 0) | (((masks >> lane) & 1) == 0) | ((masks & ~launch) != 0))
        if wrong.size:
            k = int(wrong[0])
            raise CorruptTraceError(
                f"{where}: lane {lane}'s sub-ring slot {int(slots[k])} has lane mask 0x{int(masks[k]):08x}, whose "
                f"lowest lane is not {lane} or which is outside the warp's lanes 0x{launch:08x}: not a lanes-build "
                "record")
        back = np.flatnonzero(np.diff(times) < 0)
        if back.size:
            k = int(back[0])
            raise CorruptTraceError(f"{where}: lane {lane}'s sub-ring: time goes backwards between its records "
                                    f"{k} and {k + 1} ({int(times[k])} -> {int(times[k + 1])} ns)")
        lanes = np.where(masks == launch, LANES_WHOLE_WARP, masks).astype(np.int64)
        kinds = np.where(kind_bit == 1, layout.KIND_END, layout.KIND_BEGIN)
        if n >= sub:  # wrapped: ENDs whose BEGIN was overwritten lead the sub-ring; they are lost records too
            depth, keep = 0, np.ones(len(kinds), dtype=bool)
            for k, kd in enumerate(kinds.tolist()):
                if kd == layout.KIND_BEGIN:
                    depth += 1
                elif depth:
                    depth -= 1
                else:
                    keep[k] = False
            rec, times, masks, lanes, kinds = rec[keep], times[keep], masks[keep], lanes[keep], kinds[keep]
        pop = _popcount32(masks)
        # Ties on the clock (32 ns steps on H200) between sub-rings: ENDs first, the smaller group's first; then
        # BEGINs, the larger group's first (an outer region opens before, and closes after, the regions inside it).
        rank = np.where(kinds == layout.KIND_END, pop, 65 - pop)  # ENDs 1..32, BEGINs 33..64
        parts.append(np.stack([times, rank, np.full(len(rec), lane), np.arange(len(rec)),
                               rec["region_id"].astype(np.int64), rec["coord"].astype(np.int64), kinds, lanes]))
        written += n
        kept += len(rec)
        dropped += n - len(rec)
    if wrapped:
        lost = ", ".join(f"lane {lane}: {d} of {n}" for lane, d, n in wrapped[:4])
        problems.append(f"{where} wrapped: oldest records of {len(wrapped)} lane sub-ring(s) of {sub} overwritten "
                        f"({lost}{', ...' if len(wrapped) > 4 else ''})")
    cols = np.concatenate(parts, axis=1) if parts else np.zeros((8, 0), dtype=np.int64)
    order = _merge_sub_rings(cols)
    cols = cols[:, order]
    ev = np.zeros(cols.shape[1], dtype=EVENT_DTYPE)
    ev["ring"], ev["sm"], ev["cta"], ev["warp"] = i, sm, cta, warp
    ev["index"] = np.arange(len(ev), dtype=np.uint32)
    ev["time"] = cols[0].astype(np.uint64)
    ev["region_id"], ev["coord"], ev["kind"], ev["lanes"] = cols[4], cols[5], cols[6], cols[7]
    return ev, (i, sm, cta, warp, written, kept, dropped, 1)


def _popcount32(x: np.ndarray) -> np.ndarray:
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) & 0xFFFFFFFF) >> 24


def _merge_sub_rings(cols: np.ndarray) -> np.ndarray:
    """Order of a lanes ring's events: by time, ties by rank, then writer lane, keeping each sub-ring's own order (its
    lane's program order). A sort does it unless a sub-ring holds two events of one clock step in an order the rank
    inverts (a BEGIN and its END in one step); then its heads are merged one by one."""
    if cols.shape[1] == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((cols[3], cols[2], cols[1], cols[0]))
    writer, pos = cols[2][order], cols[3][order]
    fine = True
    for lane in np.unique(writer):
        if (np.diff(pos[writer == lane]) < 0).any():
            fine = False
            break
    if fine:
        return order
    import heapq

    starts = {}
    for k in range(cols.shape[1]):
        starts.setdefault(int(cols[2][k]), k)  # each sub-ring's events are contiguous, in its order
    ends = {lane: k + int((cols[2] == lane).sum()) for lane, k in starts.items()}
    heads = [(int(cols[0][k]), int(cols[1][k]), lane, k) for lane, k in starts.items()]
    heapq.heapify(heads)
    out = []
    while heads:
        _, _, lane, k = heapq.heappop(heads)
        out.append(k)
        if k + 1 < ends[lane]:
            heapq.heappush(heads, (int(cols[0][k + 1]), int(cols[1][k + 1]), lane, k + 1))
    return np.asarray(out, dtype=np.int64)


def _divergent_message(i: int, sm: int, cta: int, warp: int) -> str:
    """One line: which warp, what happened, what to do."""
    return (f"ring {i} (SM {sm}, CTA {cta}, warp {warp}) refused: a register-cursor marker (ARGUS_WARP_STATE) ran "
            "on part of the warp's lanes, so their records overwrote each other; run that function's markers on the "
            "whole warp, or remove its ARGUS_WARP_STATE() so its markers use the shared cursor (which records each lane "
            "group's pairs)")


def _split_lane_records(recs: np.ndarray, kinds: np.ndarray, i: int, cta: int, warp: int, *, wrapped: bool):
    """Separate a ring's lane-group records (ARGUS_KIND_LANES, written by the shared-cursor markers after the
    BEGIN/END of a divergent or partial lane group) from its markers. Returns (markers, their kinds, their lane masks, orphans): an
    orphan is a lane-group record at the oldest slot of a wrapped ring, whose marker was overwritten."""
    is_lanes = kinds == layout.KIND_LANES
    lanes = np.full(len(recs), LANES_WHOLE_WARP, dtype=np.uint32)
    if not is_lanes.any():
        return recs, kinds, lanes, 0
    orphan = 0
    if wrapped and is_lanes[0]:
        orphan = 1
        is_lanes[0] = False
        recs, kinds, is_lanes, lanes = recs[1:], kinds[1:], is_lanes[1:], lanes[1:]
    at = np.flatnonzero(is_lanes)
    bad = at[(at == 0) | is_lanes[np.maximum(at - 1, 0)]]
    if bad.size:
        raise CorruptTraceError(f"ring {i} (CTA {cta} warp {warp}): lane-group record {int(bad[0]) + orphan} "
                                "does not follow a BEGIN or END record")
    mask = recs["region_id"][at]
    if np.any(mask == 0):
        raise CorruptTraceError(f"ring {i} (CTA {cta} warp {warp}): lane-group record with no lanes")
    lanes[at - 1] = mask
    keep = ~is_lanes
    return recs[keep], kinds[keep], lanes[keep], orphan


def _first_backwards(times: np.ndarray, lanes: np.ndarray) -> int | None:
    """Index k (in ``times``) of the first record whose time is below that of the record before it in the
    same lane group; None when every group's times grow."""
    t = times.astype(np.int64)
    worst = None
    for group in np.unique(lanes):
        pos = np.flatnonzero(lanes == group)
        d = np.flatnonzero(np.diff(t[pos]) < 0)
        if d.size and (worst is None or pos[d[0]] < worst):
            worst = int(pos[d[0]])
    return worst


def _written_unused_slots(ring_records: np.ndarray, kept: int, config: TraceConfig) -> int:
    """How many slots past the ``kept`` written records of an unwrapped ring hold data.

    Slot ``kept`` may hold one register-cursor leftover (a marker outside the coordinate window is
    stored and then overwritten by the next one); every later slot of a cleared ring is zero."""
    rest = ring_records[kept:]
    if not len(rest):
        return 0
    nonzero = (rest["region_id"] != 0) | (rest["coord"] != 0) | (rest["stamp"] != 0)
    if nonzero[0] and config.coord_window is not None:
        lo, hi = config.coord_window
        c0 = int(rest["coord"][0])
        if c0 != layout.COORD_NONE and not lo <= c0 < hi:
            nonzero[0] = False  # the leftover
    return int(nonzero.sum())


def _refresh_index(written: int, capacity: int) -> int:
    """Index of the last record that refreshed the latest anchor: records 0, 1, 2, 4, 8, 16 and every
    min(ANCHOR_PERIOD, capacity)-th (the device's ``store_anchor`` rule)."""
    period = min(layout.ANCHOR_PERIOD, capacity)
    n = written - 1
    while n > 0 and n % period and n & (n - 1):
        n -= 1
    return n


def _check_anchors_against_records(i: int, cta: int, warp: int, anchors, cycles: np.ndarray, written: int,
                                   kept: int, capacity: int) -> None:
    """Anchored ring of one CTA instance: every record comes after the first anchor, and the latest
    anchor was read at or after the record that last refreshed it."""
    first_clock, last_clock = int(anchors["first_clock"]), int(anchors["last_clock"])
    early = np.flatnonzero(cycles < np.uint64(first_clock))
    if early.size:
        k = int(early[0])
        raise ClockConversionError(
            f"ring {i} (CTA {cta} warp {warp}): record {k} stamp {int(cycles[k])} cycles is before the ring's first "
            f"anchor ({first_clock} cycles), taken when the ring was claimed: damaged stamp or anchor"
        )
    n = _refresh_index(written, capacity)
    pos = n - (written - kept)  # position among the kept records (the oldest were overwritten)
    if 0 <= pos < kept and int(cycles[pos]) > last_clock:
        raise ClockConversionError(
            f"ring {i} (CTA {cta} warp {warp}): latest anchor ({last_clock} cycles) is before record {pos} "
            f"({int(cycles[pos])} cycles), which refreshed it: damaged stamp or anchor"
        )


def _implausible_spans(chunks: list[np.ndarray], config: TraceConfig) -> list[str]:
    """Problems for rings (and, with a clock shared by all SMs, the trace) whose times span too long."""
    limit = MAX_PLAUSIBLE_SPAN[config.unit]
    problems = []
    lows, highs = [], []
    for ev in chunks:
        if not len(ev):
            continue
        lo, hi = int(ev["time"].min()), int(ev["time"].max())
        lows.append(lo)
        highs.append(hi)
        if hi - lo > limit:
            problems.append(
                f"implausible: ring {int(ev['ring'][0])} (CTA {int(ev['cta'][0])} warp {int(ev['warp'][0])}) spans "
                f"{hi - lo} {config.unit} (> {limit}): a damaged timestamp"
            )
    shared_clock = config.clock_mode != layout.CLOCK_CLOCK64  # clock64 counters differ per SM
    if shared_clock and lows and not problems and max(highs) - min(lows) > limit:
        problems.append(
            f"implausible: the trace's rings span {max(highs) - min(lows)} {config.unit} (> {limit}) of one shared "
            "clock: a damaged timestamp"
        )
    return problems
