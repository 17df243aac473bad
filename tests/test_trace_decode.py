"""Decoder, pairing, statistics and export on rings built with tests/ring_writer.py (no GPU).

RingWriter shares argus_rt/trace/layout.py with the decoder; tests/test_trace_literal_bytes.py decodes
bytes written out by hand from csrc/argus/argus_layout.h instead, and checks RingWriter against them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from argus_rt.regions import RegionTree
from argus_rt.trace import (
    CorruptTraceError,
    MismatchedMarkersError,
    TraceConfig,
    TraceConfigError,
    TruncatedTraceError,
    UnknownRegionIdError,
    chrome_trace,
    decode,
    layout,
    pair_intervals,
    region_stats,
    write_chrome_trace,
)
from tests.ring_writer import RingWriter

OUTER, INNER, OTHER = 0x11111111, 0x22222222, 0x33333333


def cfg(**kw) -> TraceConfig:
    base = dict(ctas=2, threads_per_cta=64, capacity=8, seq=77)
    base.update(kw)
    return TraceConfig(**base)


def nested_writer(c: TraceConfig) -> RingWriter:
    """CTA 0 warp 0 on SM 5: outer[0,100) containing inner[10,30) and inner[40,70) (coords 0, 1)."""
    w = RingWriter(c)
    w.emit(0, 0, 5, "begin", OUTER, 0)
    w.emit(0, 0, 5, "begin", INNER, 10, coord=0)
    w.emit(0, 0, 5, "end", INNER, 30, coord=0)
    w.emit(0, 0, 5, "begin", INNER, 40, coord=1)
    w.emit(0, 0, 5, "end", INNER, 70, coord=1)
    w.emit(0, 0, 5, "end", OUTER, 100)
    # CTA 1 warp 1 on SM 9: one inner occurrence of 50.
    w.emit(1, 1, 9, "begin", INNER, 1000, coord=0)
    w.emit(1, 1, 9, "end", INNER, 1050, coord=0)
    return w


def test_nesting_decodes_and_pairs_exactly():
    c = cfg()
    t = decode(nested_writer(c).bytes(), c)
    assert not t.incomplete and t.dropped == 0
    assert list(t.rings["ring"]) == [0, 3] and list(t.rings["sm"]) == [5, 9]
    assert list(t.events["kind"]) == [1, 1, 2, 1, 2, 2, 1, 2]
    iv = pair_intervals(t)
    rows = iv.rows
    assert len(rows) == 4 and not iv.incomplete
    outer = rows[rows["region_id"] == OUTER]
    assert list(outer["duration"]) == [100] and list(outer["depth"]) == [0]
    inner0 = rows[(rows["region_id"] == INNER) & (rows["ring"] == 0)]
    assert list(inner0["duration"]) == [20, 30]
    assert list(inner0["coord"]) == [0, 1]
    assert list(inner0["depth"]) == [1, 1]
    parent_row = int(inner0["parent"][0])
    assert rows[parent_row]["region_id"] == OUTER


def test_region_stats_values():
    c = cfg()
    stats = {s.region_id: s for s in region_stats(pair_intervals(decode(nested_writer(c).bytes(), c)))}
    s = stats[INNER]
    assert (s.count, s.total, s.min, s.max) == (3, 100.0, 20.0, 50.0)
    assert s.mean == pytest.approx(100 / 3)
    assert s.p50 == 30.0
    assert s.sms == 2 and s.sm_mean_min == 25.0 and s.sm_mean_max == 50.0 and s.sm_spread == 25.0
    assert s.unit == "ns" and not s.incomplete
    assert stats[OUTER].count == 1 and stats[OUTER].total == 100.0


def test_stats_use_region_names():
    tree = RegionTree("p")
    tree.add("a")
    c = cfg()
    w = RingWriter(c)
    rid = tree["a"].id
    w.emit(0, 0, 0, "begin", rid, 5)
    w.emit(0, 0, 0, "end", rid, 9)
    (s,) = region_stats(pair_intervals(decode(w.bytes(), c, known_ids=[rid])), names=tree)
    assert s.name == "a" and s.total == 4.0


def test_wrapped_ring_keeps_newest_and_is_incomplete():
    c = cfg(capacity=4)
    w = RingWriter(c)
    for k in range(5):  # 10 records into a ring of 4: 6 overwritten
        w.emit(0, 0, 1, "begin", OUTER, 100 * k, coord=k)
        w.emit(0, 0, 1, "end", OUTER, 100 * k + 7, coord=k)
    t = decode(w.bytes(), c)
    assert t.incomplete and t.dropped == 6
    assert list(t.rings[["written", "kept", "dropped"]][0]) == [10, 4, 6]
    assert list(t.events["time"]) == [300, 307, 400, 407]  # oldest kept first
    iv = pair_intervals(t)
    assert list(iv.rows["coord"]) == [3, 4] and list(iv.rows["duration"]) == [7, 7]
    assert iv.incomplete and "wrapped" in iv.problems[0]


def test_wrapped_ring_drops_a_register_cursor_leftover_outside_the_window():
    # Register-cursor markers outside the coordinate window still store, into the slot the next recorded
    # marker takes; in a wrapped ring that is the oldest kept record. The decoder drops such a leftover.
    c = cfg(capacity=4, coord_window=(0, 5))
    w = RingWriter(c)
    for k in range(5):  # coords 0..4 recorded: 10 records into a ring of 4
        w.emit(0, 0, 1, "begin", OUTER, 100 * k, coord=k)
        w.emit(0, 0, 1, "end", OUTER, 100 * k + 7, coord=k)
    raw = w.raw.copy()
    recs = raw[layout.RING_HEADER_DTYPE.itemsize:][: 4 * 16].view(layout.RECORD_DTYPE)
    assert int(recs[10 % 4]["coord"]) == 3  # the oldest kept record (BEGIN of coord 3)
    recs[10 % 4] = (OUTER, 9, (950 | (layout.KIND_END << layout.KIND_SHIFT)))  # a marker at coord 9 (outside)
    t = decode(raw, c)
    assert list(t.rings[["written", "kept", "dropped"]][0]) == [10, 3, 7]
    assert list(t.events["time"]) == [307, 400, 407]
    iv = pair_intervals(t, strict=False)
    assert list(iv.rows["coord"]) == [4] and iv.incomplete


def test_wrap_that_cuts_an_occurrence_skips_the_orphan_end():
    c = cfg(capacity=4)
    w = RingWriter(c)
    w.emit(0, 0, 1, "begin", OUTER, 0)
    for k in range(2):
        w.emit(0, 0, 1, "begin", INNER, 10 + 10 * k, coord=k)
        w.emit(0, 0, 1, "end", INNER, 15 + 10 * k, coord=k)
    w.emit(0, 0, 1, "end", OUTER, 100)  # 6 records, ring keeps the last 4: E inner0? no: B1,E1 ... E outer
    iv = pair_intervals(decode(w.bytes(), c))
    assert [int(r) for r in iv.rows["region_id"]] == [INNER]  # outer lost its BEGIN
    assert iv.incomplete


def test_unclaimed_and_stale_rings_are_empty():
    c = cfg()
    w = nested_writer(c)
    stale = RingWriter(cfg(seq=76))
    stale.emit(0, 1, 3, "begin", OUTER, 1)
    raw = np.frombuffer(w.bytes(), dtype=np.uint8).copy()
    stride = layout.ring_stride(c.capacity)
    raw[stride : 2 * stride] = np.frombuffer(stale.bytes(), dtype=np.uint8)[stride : 2 * stride]
    t = decode(raw, c)
    assert list(t.rings["ring"]) == [0, 3]
    # TraceSession.arm clears the rings: another arm's header is damage (or a stray launch), flagged
    assert t.incomplete and t.problems == [
        "ring 1: header seq 76 is not this arm's seq 77: a damaged header, or a launch of another arm wrote it "
        "after TraceSession.arm cleared the rings; its records are not counted"]


def test_appended_launches_under_one_arm_count_claims():
    c = cfg()
    w = RingWriter(c)
    w.emit(0, 0, 2, "begin", OUTER, 1)
    w.emit(0, 0, 2, "end", OUTER, 2)
    w.claim(0, 0, 7)  # a second launch's CTA 0 warp 0 continues the same ring
    w.emit(0, 0, 7, "begin", OUTER, 3)
    w.emit(0, 0, 7, "end", OUTER, 4)
    t = decode(w.bytes(), c)
    assert int(t.rings["claims"][0]) == 2 and len(pair_intervals(t)) == 2


def _header_field(raw: np.ndarray, ring: int, name: str, c: TraceConfig) -> np.ndarray:
    off = ring * layout.ring_stride(c.capacity) + layout.RING_HEADER_DTYPE.fields[name][1]
    return raw[off : off + 4].view("<u4")


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("magic", 0xDEADBEEF, "magic 0xdeadbeef"),
        ("cta", 1, "maps to ring"),
        ("warp", 40, "maps to ring"),
        ("sm", 999, "SM id 999"),
        ("dropped", 3, "dropped=3"),
        ("claims", 0, "claims=0"),
    ],
)
def test_corrupt_header_fields_raise(field, value, match):
    c = cfg()
    raw = np.frombuffer(nested_writer(c).bytes(), dtype=np.uint8).copy()
    _header_field(raw, 0, field, c)[0] = value
    with pytest.raises(CorruptTraceError, match=match):
        decode(raw, c)


def test_header_without_magic_but_fields_is_corrupt():
    c = cfg()
    raw = np.zeros(c.buffer_bytes, dtype=np.uint8)
    _header_field(raw, 2, "written", c)[0] = 3
    with pytest.raises(CorruptTraceError, match="ring 2: header has no magic"):
        decode(raw, c)


def test_written_beyond_records_is_corrupt():
    c = cfg()
    raw = np.frombuffer(nested_writer(c).bytes(), dtype=np.uint8).copy()
    _header_field(raw, 0, "written", c)[0] = 7  # only 6 records were written: slot 6 is empty
    with pytest.raises(CorruptTraceError, match="record 6 of 7 has kind 0"):
        decode(raw, c)


def test_time_going_backwards_is_corrupt():
    c = cfg()
    w = RingWriter(c)
    w.emit(0, 0, 0, "begin", OUTER, 50)
    w.emit(0, 0, 0, "end", OUTER, 40)
    with pytest.raises(CorruptTraceError, match="time goes backwards between records 0 and 1"):
        decode(w.bytes(), c)


def test_truncated_buffer():
    c = cfg()
    data = nested_writer(c).bytes()
    with pytest.raises(TruncatedTraceError, match=f"holds {len(data) - 1} bytes"):
        decode(data[:-1], c)


def test_unknown_region_id():
    c = cfg()
    with pytest.raises(UnknownRegionIdError, match="0x22222222"):
        decode(nested_writer(c).bytes(), c, known_ids=[OUTER])


def test_region_id_zero_is_corrupt():
    c = cfg()
    w = RingWriter(c)
    w.emit(0, 0, 0, "begin", 0, 1)
    with pytest.raises(CorruptTraceError, match="region ID 0"):
        decode(w.bytes(), c)


@pytest.mark.parametrize(
    "events,match",
    [
        ([("begin", OUTER, 0, 0), ("end", INNER, 0, 5)], "innermost open region is 0x11111111"),
        ([("begin", OUTER, 0, 0), ("end", OUTER, 1, 5)], r"END of region 0x11111111 \(coord 1\)"),
        ([("end", OUTER, 0, 5)], "with no open region"),
        ([("begin", OUTER, 0, 0)], "never closed"),
        ([("begin", OUTER, 0, 0), ("begin", INNER, 0, 1), ("end", OUTER, 0, 2), ("end", INNER, 0, 3)], "innermost"),
    ],
)
def test_mismatched_markers(events, match):
    c = cfg()
    w = RingWriter(c)
    for kind, rid, coord, time in events:
        w.emit(1, 0, 4, kind, rid, time, coord=coord)
    t = decode(w.bytes(), c)
    with pytest.raises(MismatchedMarkersError, match=match):
        pair_intervals(t)
    loose = pair_intervals(t, strict=False)
    assert loose.incomplete and any("ring 2 (CTA 1 warp 0, SM 4)" in p for p in loose.problems)


def test_unbuffered_warps_make_the_trace_incomplete():
    c = cfg()
    t = decode(nested_writer(c).bytes(), c, unbuffered=3)
    assert t.incomplete and "3 warp(s)" in t.problems[0]
    assert "ARGUS_TS_ANCHORED" not in t.problems[0]


def test_unbuffered_warps_under_clock64_name_the_register_cursor_and_the_remedy():
    c = cfg(clock="clock64")
    t = decode(nested_writer(c).bytes(), c, unbuffered=2)
    assert t.incomplete and "ARGUS_WARP_STATE" in t.problems[-1] and "ARGUS_TS_ANCHORED" in t.problems[-1]


def test_clock64_unit():
    c = cfg(clock="clock64")
    t = decode(nested_writer(c).bytes(), c)
    assert pair_intervals(t).unit == "cycles"


def test_chrome_export(tmp_path):
    c = cfg()
    iv = pair_intervals(decode(nested_writer(c).bytes(), c))
    doc = chrome_trace(iv, names={OUTER: "outer", INNER: "inner"})
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 4
    outer = next(e for e in xs if e["name"] == "outer")
    assert outer["ts"] == 0.0 and outer["dur"] == pytest.approx(0.1) and outer["pid"] == 5
    late = next(e for e in xs if e["pid"] == 9)
    assert late["ts"] == pytest.approx(1.0) and late["args"]["coord"] == 0
    path = write_chrome_trace(iv, tmp_path / "t.json")
    assert json.loads(path.read_text())["traceEvents"]


def test_ring_geometry_and_filters():
    c = TraceConfig(ctas=10, threads_per_cta=100, capacity=16, cta_range=(4, 6), sms=[0, 33, 255], coord_window=(2, 5))
    assert c.warps_per_cta == 4 and c.num_rings == 8 and c.ring_of(5, 3) == 7
    ctl = c.ctl_block(0x1000)
    assert int(ctl["cta_begin"]) == 4 and int(ctl["cta_end"]) == 6 and int(ctl["num_rings"]) == 8
    assert list(ctl["sm_mask"]) == [1, 2, 0, 0, 0, 0, 0, 1 << 31]
    assert (int(ctl["coord_begin"]), int(ctl["coord_end"])) == (2, 5)
    assert len(ctl.tobytes()) == layout.CTL_DTYPE.itemsize


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"capacity": 12}, "power of two"),
        ({"clock": "tsc"}, "valid: globaltimer, clock64"),
        ({"threads_per_cta": 2048}, r"\[1, 1024\]"),
        ({"cta_range": (3, 3)}, "cta_range"),
        ({"sms": [256]}, "SM index 256"),
        ({"coord_window": (5, 5)}, "empty"),
        ({"warp_mask": -1}, "warp_mask"),
    ],
)
def test_bad_config_values(kw, match):
    with pytest.raises(TraceConfigError, match=match):
        cfg(**kw)


def test_arm_clears_the_rings_of_the_previous_arm():
    import torch

    from argus_rt.trace import TraceSession

    class HostModule:  # a module with host-side globals (no GPU)
        def write_global(self, name, data, stream=None, blocking=True):
            self.ctl = np.array(data, dtype=np.uint8)

    sess = TraceSession(HostModule(), cfg(), device="cpu")
    first = sess.arm()
    sess.buffer.copy_(torch.from_numpy(nested_writer(first).raw))  # what the device wrote under it
    second = sess.arm(warp_mask=0b10)  # this arm's filter skips warp 0: its ring is not claimed again
    assert not sess.buffer.any()
    t = sess.decode()
    assert second.seq != first.seq and len(t.events) == 0 and not t.incomplete, t.problems


def test_lowered_written_is_flagged_not_silent():
    c = cfg()
    w = nested_writer(c)
    header = w.raw[: layout.RING_HEADER_DTYPE.itemsize].view(layout.RING_HEADER_DTYPE)
    header["written"] = 2  # ring 0 wrote 6 records; keep only outer BEGIN + inner BEGIN
    t = decode(w.bytes(), c)
    assert t.incomplete and any("4 record slot(s) after written=2 hold data" in p for p in t.problems)
    header["written"] = 4  # outer BEGIN, inner [10, 30), inner BEGIN: still flagged
    assert decode(w.bytes(), c).incomplete


def test_a_register_cursor_leftover_after_written_is_not_flagged():
    c = cfg(coord_window=(0, 4))
    w = RingWriter(c)
    w.emit(0, 0, 1, "begin", OUTER, 5, coord=1)
    w.emit(0, 0, 1, "end", OUTER, 9, coord=1)
    w.emit(0, 0, 1, "begin", OUTER, 12, coord=7)  # outside the window: stored, count not advanced
    header = w.raw[: layout.RING_HEADER_DTYPE.itemsize].view(layout.RING_HEADER_DTYPE)
    header["written"] = 2
    assert not decode(w.bytes(), c).incomplete


@pytest.mark.parametrize("clock", ["globaltimer", "anchored"])
def test_a_timestamp_far_out_is_flagged(clock):
    c = cfg(clock=clock, capacity=64)
    w = RingWriter(c)
    for k in range(8):
        w.emit(0, 0, 1, "begin", OUTER, 10_000 * k)
        w.emit(0, 0, 1, "end", OUTER, 10_000 * k + 700)
    recs = w.raw[layout.header_bytes(c.clock_mode):].view(layout.RECORD_DTYPE)
    recs["stamp"][15] += np.uint64(2**50)  # the last END, many days late; still in order
    t = decode(w.bytes(), c)
    assert t.incomplete and any(p.startswith("implausible: ring 0") for p in t.problems), t.problems
    assert region_stats(pair_intervals(t))[0].incomplete


def test_far_apart_rings_of_one_clock_are_flagged():
    c = cfg()
    w = RingWriter(c)
    for cta, t0 in ((0, 10), (1, 10 + 2**41)):
        w.emit(cta, 0, cta, "begin", OUTER, t0)
        w.emit(cta, 0, cta, "end", OUTER, t0 + 50)
    t = decode(w.bytes(), c)
    assert any(p.startswith("implausible: the trace's rings span") for p in t.problems)
    c64 = cfg(clock="clock64")  # per-SM counters: rings of two SMs may be far apart
    w64 = RingWriter(c64)
    for cta, t0 in ((0, 10), (1, 10 + 2**41)):
        w64.emit(cta, 0, cta, "begin", OUTER, t0)
        w64.emit(cta, 0, cta, "end", OUTER, t0 + 50)
    assert not decode(w64.bytes(), c64).incomplete


def test_end_stamped_before_its_begin_is_an_error_not_a_huge_duration():
    c = cfg(clock="clock64")
    w = RingWriter(c)
    w.emit(0, 0, 1, "begin", OUTER, 500)
    w.claim(0, 0, 2)  # a second CTA instance (another SM's counter) appends: no order across them
    w.emit(0, 0, 2, "end", OUTER, 100)
    t = decode(w.bytes(), c)
    with pytest.raises(MismatchedMarkersError, match="before its BEGIN"):
        pair_intervals(t)
    loose = pair_intervals(t, strict=False)
    assert len(loose) == 0 and loose.incomplete


def _anchored_ring(n_pairs: int = 8):
    c = cfg(clock="anchored", capacity=64, ctas=1, threads_per_cta=32)
    w = RingWriter(c, ghz=1.5)
    for k in range(n_pairs):
        w.emit(0, 0, 1, "begin", OUTER, 10**9 + 2000 * k)
        w.emit(0, 0, 1, "end", OUTER, 10**9 + 2000 * k + 700)
    anchors = w.raw[layout.ANCHOR_FIRST_OFFSET:layout.ANCHORED_HEADER_BYTES].view(layout.ANCHORS_DTYPE)
    recs = w.raw[layout.ANCHORED_HEADER_BYTES:].view(layout.RECORD_DTYPE)
    return c, w, anchors, recs


def test_anchored_record_before_the_first_anchor_is_an_error():
    from argus_rt.trace import ClockConversionError

    c, w, anchors, _ = _anchored_ring()
    assert not decode(w.bytes(), c).incomplete
    anchors["first_clock"] += np.uint64(10**6)
    with pytest.raises(ClockConversionError, match="record 0 stamp .* is before the ring's first anchor"):
        decode(w.bytes(), c)


def test_anchored_latest_anchor_before_its_record_is_an_error():
    from argus_rt.trace import ClockConversionError

    c, w, _anchors, recs = _anchored_ring()
    recs["stamp"][8] += np.uint64(5)  # still in order; of 16 records, record 8 refreshed the anchor last
    with pytest.raises(ClockConversionError, match="latest anchor .* is before record 8"):
        decode(w.bytes(), c)


def test_anchored_rate_outside_plausible_clocks_is_an_error():
    from argus_rt.trace import ClockConversionError

    c, w, anchors, _ = _anchored_ring()
    anchors["last_timer"] = anchors["first_timer"] + (anchors["last_timer"] - anchors["first_timer"]) * np.uint64(100)
    with pytest.raises(ClockConversionError, match="outside the plausible 0.1-10 GHz"):
        decode(w.bytes(), c)

