"""The decoder on bytes written out by hand from csrc/argus/argus_layout.h (no GPU, no layout.py).

The buffers below are literal hex, one field per line, each line's comment naming the C field it
holds (struct ArgusRingHeader, ArgusRingAnchors, ArgusRecord, ArgusCtl) and its value. They were
derived from the header alone, so they catch a drift of argus_rt/trace/layout.py (the Python mirror
the decoder and tests/ring_writer.py share): a reordered, resized or renamed field, a wrong magic,
kind shift or ring stride all make these tests fail, even where no C compiler is at hand to run
tests/test_trace_layout.py. (ARGUS_ANCHOR_PERIOD, which says when the device refreshes an anchor rather
than where a byte lies, only matters for rings of more than 32 records; test_trace_layout.py checks it.)

What argus_layout.h fixes, all little endian:

  ArgusRingHeader (32 B): u32 magic ("ARGR" = 0x52475241: bytes 41 52 47 52), seq, sm, cta, warp,
                          written, dropped, claims
  ArgusRingAnchors (32 B, anchored builds only, right after the ring header):
                          u64 first_timer, first_clock, last_timer, last_clock
  ArgusRecord (16 B):     u32 region_id, u32 coord (0xFFFFFFFF = none), u64 stamp
                          stamp = kind << 62 | time: BEGIN 1 (top byte 0x40), END 2 (top byte 0x80)
                          lane-group record (kind 3, top byte 0xC0), right after the BEGIN/END of a
                          divergent group: region_id = the group's lane mask, coord = its lowest lane
  ring stride:            32 + 16 * capacity bytes (64 + 16 * capacity anchored)
  ring index:             (CTA - cta_begin) * warps_per_cta + warp; slot of record n: n % capacity
"""
from __future__ import annotations

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, decode, pair_intervals
from tests.ring_writer import RingWriter

A, B = 0x1234ABCD, 0x5678EF01  # region IDs whose four bytes all differ: a swapped field shows
NONE = 0xFFFFFFFF  # ARGUS_COORD_NONE


def hexbytes(text: str) -> bytes:
    """Bytes of hex text; '#' starts a comment running to the end of the line."""
    return bytes.fromhex("".join(line.split("#", 1)[0] for line in text.splitlines()))


def interval_rows(iv) -> list[tuple]:
    return [tuple(int(r[f]) for f in ("ring", "sm", "cta", "warp", "region_id", "coord", "depth", "parent",
                                      "start", "end", "duration")) for r in iv.rows]


# CTAs [1, 3) of a 3-CTA launch, 64 threads (2 warps) per CTA, 4 records per ring, armed with seq 42:
# 4 rings of 32 + 16 * 4 = 96 bytes. Ring 0 (CTA 1 warp 0) wrapped: 6 records written, the first two
# overwritten by records 4 and 5; ring 3 (CTA 2 warp 1) holds 2 records; rings 1 and 2 were never claimed.
GLOBALTIMER_RINGS = hexbytes("""
    # ---- ring 0, byte 0: ArgusRingHeader
    41 52 47 52                # magic    "ARGR"
    2a 00 00 00                # seq      42
    07 00 00 00                # sm       7
    01 00 00 00                # cta      1
    00 00 00 00                # warp     0
    06 00 00 00                # written  6
    02 00 00 00                # dropped  2 (= written - capacity)
    01 00 00 00                # claims   1
    # ring 0, byte 32: ArgusRecord slots 0..3 hold records 4, 5, 2, 3
    01 ef 78 56  ff ff ff ff   # slot 0 = record 4: region_id B, coord none
    2c 01 00 00 00 00 00 40    #   stamp BEGIN | 300
    01 ef 78 56  ff ff ff ff   # slot 1 = record 5: region_id B, coord none
    4a 01 00 00 00 00 00 80    #   stamp END | 330
    cd ab 34 12  01 00 00 00   # slot 2 = record 2: region_id A, coord 1
    c8 00 00 00 00 00 00 40    #   stamp BEGIN | 200
    cd ab 34 12  01 00 00 00   # slot 3 = record 3: region_id A, coord 1
    04 01 00 00 00 00 00 80    #   stamp END | 260
    # (overwritten: record 0 BEGIN A at 100, record 1 END A at 150)
""") + bytes(96) + bytes(96) + hexbytes("""
    # ---- ring 3, byte 288: ArgusRingHeader
    41 52 47 52                # magic    "ARGR"
    2a 00 00 00                # seq      42
    82 00 00 00                # sm       130
    02 00 00 00                # cta      2
    01 00 00 00                # warp     1
    02 00 00 00                # written  2
    00 00 00 00                # dropped  0
    01 00 00 00                # claims   1
    # ring 3, byte 320: ArgusRecord slots 0..3
    cd ab 34 12  00 00 00 00   # slot 0 = record 0: region_id A, coord 0
    e8 03 00 00 00 00 00 40    #   stamp BEGIN | 1000
    cd ab 34 12  00 00 00 00   # slot 1 = record 1: region_id A, coord 0
    48 04 00 00 00 00 00 80    #   stamp END | 1096
    00 00 00 00  00 00 00 00   # slot 2: never written
    00 00 00 00 00 00 00 00
    00 00 00 00  00 00 00 00   # slot 3: never written
    00 00 00 00 00 00 00 00
""")


def globaltimer_config(clock: str = "globaltimer") -> TraceConfig:
    return TraceConfig(ctas=3, threads_per_cta=64, capacity=4, cta_range=(1, 3), clock=clock, seq=42)


def test_literal_globaltimer_rings_decode_to_the_written_intervals():
    c = globaltimer_config()
    assert len(GLOBALTIMER_RINGS) == 4 * 96 == c.buffer_bytes
    t = decode(GLOBALTIMER_RINGS, c, known_ids=[A, B])
    # (ring, sm, cta, warp, written, kept, dropped, claims)
    assert [tuple(int(x) for x in r) for r in t.rings] == [(0, 7, 1, 0, 6, 4, 2, 1), (3, 130, 2, 1, 2, 2, 0, 1)]
    assert t.unit == "ns" and t.dropped == 2
    assert t.problems == ["ring 0 (CTA 1 warp 0, SM 7) wrapped: 2 oldest of 6 records overwritten"]
    # Production order: ring 0's slots 2, 3, 0, 1, then ring 3's slots 0, 1.
    assert list(t.events["region_id"]) == [A, A, B, B, A, A]
    assert list(t.events["coord"]) == [1, 1, NONE, NONE, 0, 0]
    assert list(t.events["kind"]) == [1, 2, 1, 2, 1, 2]
    assert list(t.events["time"]) == [200, 260, 300, 330, 1000, 1096]
    iv = pair_intervals(t)
    # (ring, sm, cta, warp, region_id, coord, depth, parent, start, end, duration)
    assert interval_rows(iv) == [
        (0, 7, 1, 0, A, 1, 0, -1, 200, 260, 60),
        (0, 7, 1, 0, B, NONE, 0, -1, 300, 330, 30),
        (3, 130, 2, 1, A, 0, 0, -1, 1000, 1096, 96),
    ]
    assert iv.incomplete  # the wrap is carried into the intervals


def test_literal_rings_under_clock64_keep_their_cycles():
    """The same bytes armed with clock64: one ring layout for both clocks, stamps kept as cycles."""
    t = decode(GLOBALTIMER_RINGS, globaltimer_config("clock64"))
    assert t.unit == "cycles"
    assert [r[-3:] for r in interval_rows(pair_intervals(t))] == [(200, 260, 60), (300, 330, 30), (1000, 1096, 96)]


def test_ring_writer_writes_the_literal_globaltimer_bytes():
    """tests/ring_writer.py, which the other decoder tests build rings with, agrees with the hand-written bytes."""
    w = RingWriter(globaltimer_config())
    for kind, rid, time, coord in [("begin", A, 100, NONE), ("end", A, 150, NONE), ("begin", A, 200, 1),
                                   ("end", A, 260, 1), ("begin", B, 300, NONE), ("end", B, 330, NONE)]:
        w.emit(1, 0, 7, kind, rid, time, coord=coord)
    w.emit(2, 1, 130, "begin", A, 1000, coord=0)
    w.emit(2, 1, 130, "end", A, 1096, coord=0)
    assert w.bytes() == GLOBALTIMER_RINGS


# One CTA of 32 threads, 8 records per ring, seq 42: ring 0 (CTA 0 warp 0) holds the two half-warps of a divergent
# warp (refexec_compute_divergent's pattern), each marker followed by its group's lane record, the halves'
# slots interleaved and, across the halves, out of time order.
DIVERGENT_RING = hexbytes("""
    # ---- ring 0, byte 0: ArgusRingHeader
    41 52 47 52                # magic    "ARGR"
    2a 00 00 00                # seq      42
    03 00 00 00                # sm       3
    00 00 00 00                # cta      0
    00 00 00 00                # warp     0
    08 00 00 00                # written  8
    00 00 00 00                # dropped  0
    01 00 00 00                # claims   1
    # ring 0, byte 32: ArgusRecord slots 0..7
    cd ab 34 12  00 00 00 00   # slot 0: region_id A, coord 0
    64 00 00 00 00 00 00 40    #   stamp BEGIN | 100
    ff ff 00 00  00 00 00 00   # slot 1: lane record: mask 0x0000ffff, lowest lane 0
    64 00 00 00 00 00 00 c0    #   stamp LANES | 100
    01 ef 78 56  00 00 00 00   # slot 2: region_id B, coord 0
    5a 00 00 00 00 00 00 40    #   stamp BEGIN | 90
    00 00 ff ff  10 00 00 00   # slot 3: lane record: mask 0xffff0000, lowest lane 16
    5a 00 00 00 00 00 00 c0    #   stamp LANES | 90
    cd ab 34 12  00 00 00 00   # slot 4: region_id A, coord 0
    c8 00 00 00 00 00 00 80    #   stamp END | 200
    ff ff 00 00  00 00 00 00   # slot 5: lane record: mask 0x0000ffff, lowest lane 0
    c8 00 00 00 00 00 00 c0    #   stamp LANES | 200
    01 ef 78 56  00 00 00 00   # slot 6: region_id B, coord 0
    fa 00 00 00 00 00 00 80    #   stamp END | 250
    00 00 ff ff  10 00 00 00   # slot 7: lane record: mask 0xffff0000, lowest lane 16
    fa 00 00 00 00 00 00 c0    #   stamp LANES | 250
""")


def test_literal_divergent_half_warps_pair_per_lane_group():
    c = TraceConfig(ctas=1, threads_per_cta=32, capacity=8, seq=42)
    assert len(DIVERGENT_RING) == 32 + 16 * 8 == c.buffer_bytes
    t = decode(DIVERGENT_RING, c, known_ids=[A, B])
    assert not t.incomplete and [tuple(int(x) for x in r) for r in t.rings] == [(0, 3, 0, 0, 8, 8, 0, 1)]
    assert list(t.events["region_id"]) == [A, B, A, B] and list(t.events["kind"]) == [1, 1, 2, 2]
    assert list(t.events["lanes"]) == [0x0000FFFF, 0xFFFF0000, 0x0000FFFF, 0xFFFF0000]
    assert list(t.events["time"]) == [100, 90, 200, 250]
    rows = pair_intervals(t).rows
    assert [(int(r["region_id"]), int(r["lanes"]), int(r["start"]), int(r["end"]), int(r["depth"])) for r in rows] == [
        (A, 0x0000FFFF, 100, 200, 0), (B, 0xFFFF0000, 90, 250, 0)]


def test_literal_stamp_uses_all_62_time_bits():
    """stamp bits 0..61 are time, 62..63 kind: the largest times a stamp holds survive decoding."""
    ring = hexbytes("""
        41 52 47 52                # magic    "ARGR"
        01 00 00 00                # seq      1
        00 00 00 00                # sm       0
        00 00 00 00                # cta      0
        00 00 00 00                # warp     0
        02 00 00 00                # written  2
        00 00 00 00                # dropped  0
        01 00 00 00                # claims   1
        cd ab 34 12  ff ff ff ff   # record 0: region_id A, coord none
        00 ff ff ff ff ff ff 7f    #   stamp BEGIN | 2**62 - 256
        cd ab 34 12  ff ff ff ff   # record 1: region_id A, coord none
        ff ff ff ff ff ff ff bf    #   stamp END | 2**62 - 1
    """)
    c = TraceConfig(ctas=1, threads_per_cta=32, capacity=2, seq=1)
    assert interval_rows(pair_intervals(decode(ring, c))) == [(0, 0, 0, 0, A, NONE, 0, -1, 2**62 - 256, 2**62 - 1, 255)]
    w = RingWriter(c)
    w.emit(0, 0, 0, "begin", A, 2**62 - 256)
    w.emit(0, 0, 0, "end", A, 2**62 - 1)
    assert w.bytes() == ring


# One CTA of one warp, 4 records, anchored build armed with seq 9: one ring of 64 + 16 * 4 = 128 bytes.
# SM 11 runs at 2 cycles per ns. The ring was claimed at globaltimer 1,000,000 ns = clock64 5,000,000;
# record 2 refreshed the latest anchor (records 1, 2, 4, ... do) at 1,007,200 ns = 5,014,400 cycles,
# so the ring's own anchors give 7,200 ns / 14,400 cycles = 0.5 ns per cycle (span >= 6,400 ns: no fit).
ANCHORED_RING = hexbytes("""
    # ---- ring 0, byte 0: ArgusRingHeader
    41 52 47 52                # magic    "ARGR"
    09 00 00 00                # seq      9
    0b 00 00 00                # sm       11
    00 00 00 00                # cta      0
    00 00 00 00                # warp     0
    04 00 00 00                # written  4
    00 00 00 00                # dropped  0
    01 00 00 00                # claims   1
    # byte 32: ArgusRingAnchors
    40 42 0f 00 00 00 00 00    # first_timer 1,000,000 ns
    40 4b 4c 00 00 00 00 00    # first_clock 5,000,000 cycles
    60 5e 0f 00 00 00 00 00    # last_timer  1,007,200 ns
    80 83 4c 00 00 00 00 00    # last_clock  5,014,400 cycles
    # byte 64: ArgusRecord slots 0..3, stamps in clock64 cycles
    cd ab 34 12  ff ff ff ff   # record 0: region_id A, coord none
    80 4b 4c 00 00 00 00 40    #   stamp BEGIN | 5,000,064 cycles (-> 1,000,032 ns)
    01 ef 78 56  07 00 00 00   # record 1: region_id B, coord 7
    10 53 4c 00 00 00 00 40    #   stamp BEGIN | 5,002,000 cycles (-> 1,001,000 ns)
    01 ef 78 56  07 00 00 00   # record 2: region_id B, coord 7
    80 83 4c 00 00 00 00 80    #   stamp END | 5,014,400 cycles (-> 1,007,200 ns)
    cd ab 34 12  ff ff ff ff   # record 3: region_id A, coord none
    c0 89 4c 00 00 00 00 80    #   stamp END | 5,016,000 cycles (-> 1,008,000 ns)
""")


def anchored_config() -> TraceConfig:
    return TraceConfig(ctas=1, threads_per_cta=32, capacity=4, clock="anchored", seq=9)


def test_literal_anchored_ring_decodes_to_ns_through_its_anchors():
    c = anchored_config()
    assert len(ANCHORED_RING) == 128 == c.buffer_bytes
    t = decode(ANCHORED_RING, c, known_ids=[A, B])
    assert [tuple(int(x) for x in r) for r in t.rings] == [(0, 11, 0, 0, 4, 4, 0, 1)]
    assert t.unit == "ns" and t.problems == []
    assert list(t.events["time"]) == [1_000_032, 1_001_000, 1_007_200, 1_008_000]
    assert interval_rows(pair_intervals(t)) == [
        (0, 11, 0, 0, A, NONE, 0, -1, 1_000_032, 1_008_000, 7_968),
        (0, 11, 0, 0, B, 7, 1, 0, 1_001_000, 1_007_200, 6_200),
    ]


def test_ring_writer_writes_the_literal_anchored_bytes():
    # clock64 of SM 11 = 3,000,000 + 2 * t: 5,000,000 cycles at t = 1,000,000 ns.
    w = RingWriter(anchored_config(), ghz=2.0, clock_offsets={11: 3_000_000})
    w.claim(0, 0, 11, time=1_000_000)
    for kind, rid, time, coord in [("begin", A, 1_000_032, NONE), ("begin", B, 1_001_000, 7),
                                   ("end", B, 1_007_200, 7), ("end", A, 1_008_000, NONE)]:
        w.emit(0, 0, 11, kind, rid, time, coord=coord)
    assert w.bytes() == ANCHORED_RING


def test_control_block_bytes_follow_argus_ctl():
    """The other direction: the argus_ctl bytes the host writes for the device (struct ArgusCtl, 96 B)."""
    # Neighbouring fields get different values, so two swapped fields show.
    c = TraceConfig(ctas=3, threads_per_cta=96, capacity=8, clock="anchored", sms=(0, 33, 255), cta_range=(1, 3),
                    warp_mask=0b110, coord_window=(5, 9), seq=42)
    want = hexbytes("""
        00 56 34 12 00 7f 00 00   # buffers       0x00007f0012345600
        01 00 00 00               # enabled       1
        2a 00 00 00               # seq           42
        08 00 00 00               # capacity      8
        06 00 00 00               # num_rings     6 (2 CTAs x 3 warps)
        03 00 00 00               # warps_per_cta 3 (96 threads)
        02 00 00 00               # clock_mode    ARGUS_CLOCK_ANCHORED
        01 00 00 00               # cta_begin     1
        03 00 00 00               # cta_end       3
        06 00 00 00               # warp_mask     warps 1 and 2
        05 00 00 00               # coord_begin   5
        09 00 00 00               # coord_end     9
        01 00 00 00               # version       ARGUS_LAYOUT_VERSION 1
        00 00 00 00               # unbuffered    0 (the device counts here)
        00 00 00 00               # reserved
        01 00 00 00               # sm_mask[0]    SM 0
        02 00 00 00               # sm_mask[1]    SM 33
        00 00 00 00               # sm_mask[2]
        00 00 00 00               # sm_mask[3]
        00 00 00 00               # sm_mask[4]
        00 00 00 00               # sm_mask[5]
        00 00 00 00               # sm_mask[6]
        00 00 00 80               # sm_mask[7]    SM 255
    """)
    assert len(want) == 96
    got = c.ctl_block(buffers=0x00007F0012345600)
    assert np.asarray(got).tobytes() == want


@pytest.mark.parametrize("clock, mode", [("globaltimer", "00 00 00 00"), ("clock64", "01 00 00 00"),
                                         ("anchored", "02 00 00 00")])
def test_control_block_clock_mode_values(clock, mode):
    """ArgusCtl.clock_mode (bytes 28..31, after u64 buffers and six u32 fields) holds ARGUS_CLOCK_GLOBALTIMER 0,
    ARGUS_CLOCK_CLOCK64 1 or ARGUS_CLOCK_ANCHORED 2."""
    ctl = np.asarray(TraceConfig(ctas=1, threads_per_cta=32, clock=clock).ctl_block(buffers=0)).tobytes()
    assert ctl[28:32] == bytes.fromhex(mode)


# The columns of a58e52b's decoder (decode.EVENT_DTYPE / intervals.INTERVAL_DTYPE there), whose markers are
# the default again: today's decoder adds `lanes` and nothing else.
A58E52B_EVENT_FIELDS = ("ring", "sm", "cta", "warp", "index", "region_id", "coord", "kind", "time")
A58E52B_INTERVAL_FIELDS = ("ring", "sm", "cta", "warp", "region_id", "coord", "depth", "parent", "start", "end",
                           "duration")


def _columns(rows, fields) -> list[tuple]:
    return [tuple(int(r[f]) for f in fields) for r in rows]


@pytest.mark.parametrize("rings, config", [(GLOBALTIMER_RINGS, globaltimer_config), (ANCHORED_RING, anchored_config)])
def test_default_marker_records_decode_as_at_a58e52b(rings, config):
    """Records of the default markers (one per warp and marker, no lane-group record) decode to what
    a58e52b's decoder gave for these bytes (its events and intervals, every column: taken from a58e52b's
    argus_rt/trace run on them), each made by the whole warp (lanes = LANES_WHOLE_WARP)."""
    from argus_rt.trace.decode import EVENT_DTYPE, LANES_WHOLE_WARP
    from argus_rt.trace.intervals import INTERVAL_DTYPE

    assert EVENT_DTYPE.names == A58E52B_EVENT_FIELDS + ("lanes",)
    assert INTERVAL_DTYPE.names == A58E52B_INTERVAL_FIELDS + ("lanes",)
    t = decode(rings, config(), known_ids=[A, B])
    iv = pair_intervals(t)
    if rings is GLOBALTIMER_RINGS:
        events = [(0, 7, 1, 0, 0, A, 1, 1, 200), (0, 7, 1, 0, 1, A, 1, 2, 260), (0, 7, 1, 0, 2, B, NONE, 1, 300),
                  (0, 7, 1, 0, 3, B, NONE, 2, 330), (3, 130, 2, 1, 0, A, 0, 1, 1000), (3, 130, 2, 1, 1, A, 0, 2, 1096)]
        intervals = [(0, 7, 1, 0, A, 1, 0, -1, 200, 260, 60), (0, 7, 1, 0, B, NONE, 0, -1, 300, 330, 30),
                     (3, 130, 2, 1, A, 0, 0, -1, 1000, 1096, 96)]
    else:
        events = [(0, 11, 0, 0, 0, A, NONE, 1, 1_000_032), (0, 11, 0, 0, 1, B, 7, 1, 1_001_000),
                  (0, 11, 0, 0, 2, B, 7, 2, 1_007_200), (0, 11, 0, 0, 3, A, NONE, 2, 1_008_000)]
        intervals = [(0, 11, 0, 0, A, NONE, 0, -1, 1_000_032, 1_008_000, 7_968),
                     (0, 11, 0, 0, B, 7, 1, 0, 1_001_000, 1_007_200, 6_200)]
    assert _columns(t.events, A58E52B_EVENT_FIELDS) == events
    assert _columns(iv.rows, A58E52B_INTERVAL_FIELDS) == intervals
    assert set(t.events["lanes"].tolist()) == set(iv.rows["lanes"].tolist()) == {LANES_WHOLE_WARP}
