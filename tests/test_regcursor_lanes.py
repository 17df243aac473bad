"""The register cursor's opt-in lanes build (-DARGUS_REG_LANES=1, csrc/argus/argus_cursors.cuh), on the CPU.

In that build a warp's ring of ``capacity`` records is 32 sub-rings of ``capacity // 32``: a marker's writer is the
lowest active lane of its lane group (lane 0 in a converged warp), and only the writer stores, into its own sub-ring
at its own count, which only it advances. Two lane groups of one warp never share a lowest lane, so no two records
share a slot: no shared memory, no atomic, no branch. A record is (region, coord, time bits 0..31, lane mask with bit
0 replaced by the kind); at scope exit each lane closes its sub-ring with an end record (region 0, its count, the full
time), and the decoder dates each sub-ring's records from it, restores the masks and merges the sub-rings by time.

Here: the default build (no define, or =0) is SASS-identical; every reference-execution kernel builds in the lanes
build (modes 0 and 1 ignore it); the marker's SASS (no shared memory, atomic, barrier or branch; at most
MAX_PER_OCCURRENCE instructions per BEGIN/END pair of the timed loop); and the decoder on rings that a Python mirror of
the lanes cursor writes (converged, half-warps in different regions, nested regions in a divergent group, clock ties
between sub-rings, a wrapped sub-ring, a lane without its end record, malformed rings refused in one line).

GPU: tests/test_regcursor_lanes_gpu.py and benchmarks/marker_cost.py's register_lanes* rows.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, decode, layout, pair_intervals
from argus_rt.trace.decode import LANES_WHOLE_WARP
from argus_rt.trace.errors import CorruptTraceError, MismatchedMarkersError
from occurrences import occurrence_key
from toolchain import needs_nvcc, parse_sass

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ("refexec_compute", "refexec_compute_helper", "refexec_compute_helper_value", "refexec_compute_helper_inline",
           "refexec_compute_divergent")
REG = {"REFEXEC_WARP_STATE": "1"}
LANES = {**REG, "ARGUS_REG_LANES": "1"}
FULL = 0xFFFFFFFF
OUTER, LOW, HIGH, QUARTER = 0x0A0A0001, 0x0A0A0002, 0x0A0A0003, 0x0A0A0004
T0 = 1_764_000_000_000_000_000  # a %globaltimer reading (ns since 1970): its high word is far from 0


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


# ---- the Python mirror of the lanes cursor -------------------------------------------------------------------------


class LanesWarp:
    """One warp's lanes-build register cursor (RegCursor / emit_with / ~RegCursor with ARGUS_REG_LANES): a count per
    lane, records in the writer's sub-ring at that lane's count, end records and the header at scope exit."""

    def __init__(self, raw: np.ndarray, cfg: TraceConfig, cta: int, warp: int, sm: int, launch: int = FULL):
        self.cfg, self.cta, self.warp, self.sm, self.launch = cfg, cta, warp, sm, launch
        ring = cfg.ring_of(cta, warp)
        stride = layout.ring_stride(cfg.capacity)
        head = layout.header_bytes()
        self.header = raw[ring * stride: ring * stride + layout.RING_HEADER_DTYPE.itemsize].view(layout.RING_HEADER_DTYPE)
        self.records = raw[ring * stride + head: ring * stride + head + cfg.capacity * 16].view(layout.RECORD_DTYPE)
        self.sub = cfg.capacity // 32
        h = self.header[0]
        self.append = int(h["magic"]) == layout.RING_MAGIC and int(h["seq"]) == cfg.seq
        self.count = [0] * 32

    def _take(self, coord: int) -> bool:
        lo, hi = self.cfg.coord_window if self.cfg.coord_window is not None else (0, layout.COORD_NONE)
        return coord == layout.COORD_NONE or (coord - lo) % (1 << 32) < (hi - lo) % (1 << 32)

    def _slot(self, lane: int) -> int:
        return lane * self.sub + (self.count[lane] & (self.sub - 1))

    def marker(self, kind: str, region: int, t: int, coord: int = layout.COORD_NONE, lanes: int = FULL) -> None:
        """The writer (the group's lowest lane) stores at its count; the count advances only inside the coordinate
        window, so a record outside it stays at the lane's next slot until its next record or end record overwrites it
        (as in the default register cursor)."""
        writer = (lanes & -lanes).bit_length() - 1
        hi = (lanes & ~1) | (1 if kind == "end" else 0)
        self.records[self._slot(writer)] = (region, coord, (t & 0xFFFFFFFF) | (hi << 32))
        self.count[writer] += int(self._take(coord))

    def leave(self, lanes: int, t: int) -> None:
        for lane in range(32):
            if (lanes >> lane) & 1:
                self.records[self._slot(lane)] = (0, self.count[lane],
                                                  (t & layout.TIME_MASK) | (layout.LANES_END_KIND << layout.KIND_SHIFT))
        self.header[0] = (layout.RING_MAGIC, self.cfg.seq, self.sm, self.cta, self.warp | layout.RING_WARP_LANES, 0, 0,
                          2 if self.append else 1)


def _config(capacity=2048, threads=64, **kw) -> TraceConfig:
    return TraceConfig(ctas=1, threads_per_cta=threads, capacity=capacity, **kw)


def _raw(cfg):
    return np.zeros(cfg.buffer_bytes, dtype=np.uint8)


# ---- decoder --------------------------------------------------------------------------------------------------------


def test_header_constants_match_the_mirror():
    text = (ROOT / "csrc" / "argus" / "argus_cursors.cuh").read_text()

    def define(name):
        return int(re.search(rf"#define {name} (0x[0-9A-Fa-f]+|\d+)u", text).group(1), 0)

    assert define("ARGUS_RING_WARP_LANES") == layout.RING_WARP_LANES
    assert define("ARGUS_LANES_END_KIND") == layout.LANES_END_KIND
    assert define("ARGUS_REG_LANES_MIN_CAPACITY") == layout.LANES_MIN_CAPACITY
    assert layout.RING_WARP_LANES & layout.RING_WARP_DIVERGENT == 0 and layout.RING_WARP_LANES > 32


def test_converged_warp_nested_regions_and_full_times_across_a_2_32_boundary():
    """Converged: every record in lane 0's sub-ring, lanes = the whole warp; the times' high word comes back from the
    end record, also for records stamped before the low word wrapped."""
    cfg = _config()
    raw = _raw(cfg)
    base = (T0 | 0xFFFFFFFF) - 500  # the low 32 bits wrap 500 ns in
    want = []
    for warp in (0, 1):
        w = LanesWarp(raw, cfg, 0, warp, sm=3)
        t = base
        for i in range(6):
            w.marker("begin", OUTER, t := t + 40, coord=i)
            w.marker("begin", LOW, t := t + 40, coord=i)
            w.marker("end", LOW, t := t + 40, coord=i)
            w.marker("end", OUTER, t := t + 40, coord=i)
        w.leave(FULL, t + 10)
    want = [(OUTER, i, FULL, 0, None) for i in range(6)] + [(LOW, i, FULL, 1, (OUTER, i)) for i in range(6)]
    tr = decode(raw.tobytes(), cfg)
    assert not tr.incomplete, tr.problems
    assert (tr.events["lanes"] == LANES_WHOLE_WARP).all()
    assert list(tr.rings["written"]) == [24, 24] and list(tr.rings["dropped"]) == [0, 0]
    rows = pair_intervals(tr).rows
    for ring in (0, 1):
        assert Counter(occurrence_key(rows, k) for k in range(len(rows)) if rows["ring"][k] == ring) == Counter(want)
    times = tr.ring_events(0)["time"].astype(np.int64)
    assert times.tolist() == [base + 40 * (k + 1) for k in range(24)]  # exact, with the high word across the wrap


def test_half_warps_in_different_regions_pair_per_lane_group():
    """The divergent kernel's ring (each half its own pairs, in its lowest lane's sub-ring, the halves interleaved in any
    order and sometimes on one clock step) decodes to exactly what marker_cost's register_lanes_divergent check wants."""
    from benchmarks.marker_cost import REGION_OCCURRENCE, REGION_REFEXEC, expected_occurrences

    cfg = _config(capacity=2048)
    raw = _raw(cfg)
    gen = np.random.default_rng(5)
    for warp in (0, 1):
        w = LanesWarp(raw, cfg, 0, warp, sm=7)
        t, todo = T0, {0x0000FFFF: [], 0xFFFF0000: []}
        for occ in range(16):
            todo[0x0000FFFF] += [("begin", REGION_OCCURRENCE, occ), ("end", REGION_OCCURRENCE, occ)]
            todo[0xFFFF0000] += [("begin", REGION_REFEXEC, occ), ("end", REGION_REFEXEC, occ)]
        while any(todo.values()):
            half = int(gen.choice([h for h, v in todo.items() if v]))
            kind, region, occ = todo[half].pop(0)
            t += int(gen.integers(0, 3)) * 32  # 32 ns steps: ties between the halves
            w.marker(kind, region, t, coord=occ, lanes=half)
        w.leave(FULL, t + 32)
    tr = decode(raw.tobytes(), cfg)
    assert not tr.incomplete, tr.problems
    rows = pair_intervals(tr).rows
    want = expected_occurrences("register_lanes_divergent", 16)
    for ring in (0, 1):
        r = rows[rows["ring"] == ring]
        assert Counter(zip(r["region_id"].tolist(), r["coord"].tolist(), r["lanes"].tolist())) == want
        assert int(tr.rings["written"][ring]) == 64  # one slot per marker, no lane-group records


def test_nested_regions_in_a_divergent_group_with_clock_ties():
    """A whole-warp region around a lane group's region around a smaller group's, the other half in its own regions;
    markers of different sub-rings on one clock step (the high half's last END, the END of the whole-warp region around
    it and the next whole-warp BEGIN: by lowest lane the whole warp's would come first, and pair wrongly) and a
    zero-length region (BEGIN and END on one step in one sub-ring) still nest right."""
    cfg = _config(capacity=512, coord_window=(0, 8))
    raw = _raw(cfg)
    w = LanesWarp(raw, cfg, 0, 0, sm=1)
    want = []
    t = T0
    for i in range(3):
        w.marker("begin", OUTER, t, coord=i)  # same step as the last HIGH END and OUTER END before it
        w.marker("begin", LOW, t, coord=i, lanes=0x0000FFFF)
        w.marker("begin", QUARTER, t := t + 32, coord=i, lanes=0x0000FF00)
        w.marker("end", QUARTER, t, coord=i, lanes=0x0000FF00)  # zero-length
        w.marker("begin", OUTER, t, coord=100)  # outside the window: stored, then overwritten by lane 0's next record
        w.marker("end", LOW, t := t + 32, coord=i, lanes=0x0000FFFF)
        for j in range(i + 1):
            w.marker("begin", HIGH, t := t + 32, coord=j, lanes=0xFFFF0000)
            w.marker("end", HIGH, t := t + 32, coord=j, lanes=0xFFFF0000)
        w.marker("end", OUTER, t, coord=i)  # same step as the high half's last END
        want += [(OUTER, i, FULL, 0, None), (LOW, i, 0x0000FFFF, 1, (OUTER, i)),
                 (QUARTER, i, 0x0000FF00, 2, (LOW, i))]
        want += [(HIGH, j, 0xFFFF0000, 1, (OUTER, i)) for j in range(i + 1)]
    w.leave(FULL, t + 32)
    tr = decode(raw.tobytes(), cfg)
    assert not tr.incomplete, tr.problems
    rows = pair_intervals(tr).rows
    assert Counter(occurrence_key(rows, k) for k in range(len(rows))) == Counter(want)
    for k in range(len(rows)):  # each occurrence lies inside its parent's
        p = int(rows[k]["parent"])
        if p >= 0:
            assert rows[p]["start"] <= rows[k]["start"] <= rows[k]["end"] <= rows[p]["end"]
    # three sub-rings: lane 0 (whole warp and lanes 0-15), lane 8 (lanes 8-15), lane 16 (the high half)
    sub = cfg.capacity // 32
    ends = [lane for lane in range(32) if int(w.records[lane * sub + (w.count[lane] & (sub - 1))]["coord"]) > 0]
    assert ends == [0, 8, 16]


def test_a_wrapped_sub_ring_is_incomplete_and_keeps_its_newest_records():
    """Lane 16's sub-ring (capacity 256: eight slots per lane) takes ten records: its end record overwrites the oldest
    kept slot, the decoder keeps the newest seven, counts three as dropped and says which lane wrapped; the whole warp's
    sub-ring is untouched, and the END whose BEGIN was overwritten is skipped, not a mismatch."""
    cfg = _config(capacity=256)
    raw = _raw(cfg)
    w = LanesWarp(raw, cfg, 0, 0, sm=0)
    t = T0
    w.marker("begin", OUTER, t := t + 32)
    for i in range(5):
        w.marker("begin", HIGH, t := t + 32, coord=i, lanes=0xFFFF0000)
        w.marker("end", HIGH, t := t + 32, coord=i, lanes=0xFFFF0000)
    w.marker("end", OUTER, t := t + 32)
    w.leave(FULL, t + 32)
    tr = decode(raw.tobytes(), cfg)
    assert tr.incomplete and any("wrapped" in p and "lane 16: 3 of 10" in p for p in tr.problems), tr.problems
    assert [int(tr.rings[f][0]) for f in ("written", "kept", "dropped")] == [12, 8, 4]  # 3 overwritten, 1 orphan END
    iv = pair_intervals(tr)
    assert sorted((int(r["region_id"]), int(r["coord"]), int(r["lanes"])) for r in iv.rows) == [
        (OUTER, layout.COORD_NONE, FULL)] + [(HIGH, i, 0xFFFF0000) for i in (2, 3, 4)]


def test_records_outside_the_window_are_overwritten_in_every_sub_ring():
    """A marker outside the coordinate window is stored at its writer's next slot without advancing the count (the
    store's predicate is the writer test alone): the writer's next record overwrites it, or, when it is the sub-ring's
    last, the end record at scope exit; also in a wrapped sub-ring. The decoder sees only the in-window occurrences."""
    cfg = _config(capacity=256, coord_window=(0, 4))  # eight slots per lane
    raw = _raw(cfg)
    w = LanesWarp(raw, cfg, 0, 0, sm=5)
    t = T0
    for i in range(6):  # coordinates 4 and 5 are outside the window; lane 16's sub-ring wraps (8 in-window records)
        w.marker("begin", HIGH, t := t + 32, coord=i, lanes=0xFFFF0000)
        w.marker("end", HIGH, t := t + 32, coord=i, lanes=0xFFFF0000)
        w.marker("begin", LOW, t := t + 32, coord=7 - i, lanes=0x0000FFFF)  # 7, 6, 5, 4 outside; 3, 2 inside
        w.marker("end", LOW, t := t + 32, coord=7 - i, lanes=0x0000FFFF)
    w.marker("begin", OUTER, t := t + 32, coord=9)  # lane 0's last marker, outside: the end record overwrites it
    w.marker("end", OUTER, t := t + 32, coord=9)
    w.leave(FULL, t + 32)
    assert w.count[0] == 4 and w.count[16] == 8
    tr = decode(raw.tobytes(), cfg)
    assert any("lane 16" in p for p in tr.problems), tr.problems  # lane 16 wrapped: its oldest occurrence is lost
    got = sorted((int(r["region_id"]), int(r["coord"]), int(r["lanes"])) for r in pair_intervals(tr).rows)
    assert got == sorted([(LOW, c, 0x0000FFFF) for c in (2, 3)] + [(HIGH, c, 0xFFFF0000) for c in (1, 2, 3)])


def test_partial_last_warp_records_whole_warp_markers_and_its_lane_groups():
    cfg = TraceConfig(ctas=1, threads_per_cta=48, capacity=256)
    raw = _raw(cfg)
    w = LanesWarp(raw, cfg, 0, 1, sm=0, launch=0x0000FFFF)
    w.marker("begin", OUTER, T0 + 10, lanes=0x0000FFFF)
    w.marker("begin", LOW, T0 + 11, lanes=0x000000F0)
    w.marker("end", LOW, T0 + 12, lanes=0x000000F0)
    w.marker("end", OUTER, T0 + 13, lanes=0x0000FFFF)
    w.leave(0x0000FFFF, T0 + 20)
    tr = decode(raw.tobytes(), cfg)
    assert not tr.incomplete, tr.problems
    rows = pair_intervals(tr).rows
    assert sorted((int(r["region_id"]), int(r["lanes"])) for r in rows) == [(OUTER, LANES_WHOLE_WARP), (LOW, 0xF0)]


def test_lane_groups_leaving_apart_and_a_lane_without_its_end_record():
    """Lanes 24-31 leave first and lanes 0-23 record on: both closes are fine. A lane whose sub-ring has records but no
    end record (it left through PTX exit) is reported, its records uncounted; the others decode."""
    cfg = _config()
    raw = _raw(cfg)
    w = LanesWarp(raw, cfg, 0, 1, sm=2)
    w.marker("begin", OUTER, T0 + 10)
    w.marker("end", OUTER, T0 + 20)
    w.marker("begin", HIGH, T0 + 25, lanes=0xFF000000)
    w.marker("end", HIGH, T0 + 26, lanes=0xFF000000)
    w.leave(0xFF000000, T0 + 30)
    w.marker("begin", LOW, T0 + 40, lanes=0x00FFFFFF)
    w.marker("end", LOW, T0 + 50, lanes=0x00FFFFFF)
    w.leave(0x00FFFFFF, T0 + 60)
    tr = decode(raw.tobytes(), cfg)
    assert not tr.incomplete, tr.problems
    assert sorted((int(r["region_id"]), int(r["lanes"])) for r in pair_intervals(tr).rows) == [
        (OUTER, FULL), (LOW, 0x00FFFFFF), (HIGH, 0xFF000000)]
    w.records[24 * (cfg.capacity // 32) + 2] = np.zeros(1, dtype=layout.RECORD_DTYPE)  # lane 24's end record: gone
    tr = decode(raw.tobytes(), cfg)
    assert any("lane 24's sub-ring holds 2 record(s) but no end record" in p for p in tr.problems), tr.problems
    assert sorted(int(r["region_id"]) for r in pair_intervals(tr).rows) == [OUTER, LOW]


def _one_ring():
    cfg = _config()
    raw = _raw(cfg)
    w = LanesWarp(raw, cfg, 0, 0, sm=4)
    w.marker("begin", LOW, T0 + 10, lanes=0x0000FFFF)
    w.marker("end", LOW, T0 + 20, lanes=0x0000FFFF)
    w.marker("begin", HIGH, T0 + 30, lanes=0xFFFF0000)
    w.marker("end", HIGH, T0 + 40, lanes=0xFFFF0000)
    w.leave(FULL, T0 + 50)
    return cfg, raw, w


@pytest.mark.parametrize("damage, match", [
    ("mask", "lane 16's sub-ring slot 0 has lane mask 0x00f00000, whose lowest lane is not 16"),
    ("two_ends", "lane 0's sub-ring has 2 end records"),
    ("end_slot", "lane 16's end record is at slot 2, but its count 5 puts it at slot 5"),
    ("hole", "lane 16's sub-ring slot 1, below its count 2, holds no record"),
    ("backwards", "lane 0's sub-ring: time goes backwards between its records 0 and 1"),
    ("appended", "refused: claimed by 2+ launches under one arm"),
])
def test_a_malformed_lanes_ring_is_refused_in_one_line(damage, match):
    cfg, raw, w = _one_ring()
    sub = cfg.capacity // 32
    rec = w.records
    if damage == "mask":  # a record in lane 16's sub-ring whose mask says lane 20 is its lowest lane
        rec[16 * sub]["stamp"] = (int(rec[16 * sub]["stamp"]) & 0xFFFFFFFF) | (0x00F00000 << 32)
    elif damage == "two_ends":
        rec[sub - 1] = rec[2]
    elif damage == "end_slot":
        rec[16 * sub + 2]["coord"] = 5
    elif damage == "hole":
        rec[16 * sub + 1] = np.zeros(1, dtype=layout.RECORD_DTYPE)
    elif damage == "backwards":
        rec[1]["stamp"] = int(rec[1]["stamp"]) - 15
    elif damage == "appended":  # a second launch under the same arm
        w2 = LanesWarp(raw, cfg, 0, 0, sm=4)
        w2.marker("begin", LOW, T0 + 110, lanes=0x0000FFFF)
        w2.marker("end", LOW, T0 + 120, lanes=0x0000FFFF)
        w2.leave(FULL, T0 + 130)
    with pytest.raises(CorruptTraceError) as e:
        decode(raw.tobytes(), cfg)
    assert match in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert "ring 0 (CTA 0 warp 0, SM 4)" in str(e.value)


def test_mismatched_lane_groups_are_refused_not_paired():
    """A region begun by the whole warp and ended by half of it: a MismatchedMarkersError (the END's group is not the
    BEGIN's), as with the shared cursor's lane-group records."""
    cfg = _config()
    raw = _raw(cfg)
    w = LanesWarp(raw, cfg, 0, 0, sm=1)
    w.marker("begin", OUTER, T0 + 10)
    w.marker("end", OUTER, T0 + 20, lanes=0x0000FFFF)
    w.marker("end", OUTER, T0 + 30, lanes=0xFFFF0000)
    w.leave(FULL, T0 + 40)
    tr = decode(raw.tobytes(), cfg)
    with pytest.raises(MismatchedMarkersError):
        pair_intervals(tr)


def test_the_check_of_register_lanes_divergent_fails_when_a_half_warp_s_occurrence_is_missing(monkeypatch):
    from test_regcursor_apart import assert_divergent_check_can_fail

    cfg = _config(capacity=2048)
    assert_divergent_check_can_fail(monkeypatch, "register_lanes_divergent", cfg, _raw,
                                    lambda raw, warp: LanesWarp(raw, cfg, 0, warp, sm=0),
                                    lambda w: w.leave(FULL, T0 + 10_000), t0=T0)


def test_marker_cost_rows_of_the_lanes_build():
    from benchmarks.marker_cost import LANES as ROWS_LANES
    from benchmarks.marker_cost import PATHS, REFUSED

    assert ROWS_LANES == LANES
    assert PATHS["register_lanes"] == ("refexec_compute", LANES)
    assert PATHS["register_lanes_helper_value"] == ("refexec_compute_helper_value", LANES)
    assert PATHS["register_lanes_helper_inline"] == ("refexec_compute_helper_inline", LANES)
    assert PATHS["register_lanes_divergent"] == ("refexec_compute_divergent", LANES)
    assert "register_lanes_divergent" not in REFUSED


# ---- builds and SASS ----------------------------------------------------------------------------------------------


def _sass(mode: int, kernel: str, defines: dict, occurrences: int = 256) -> list[str]:
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    name = f"refexec.lanes.m{mode}.o{occurrences}" + "".join(f".{k}{v}" for k, v in sorted(defines.items()))
    res = build(CudaBuildSpec(name, [SOURCES["reference_execution"]], argus_mode=mode,
                              defines={"OCCURRENCES": str(occurrences), **defines}))
    return sass_lines(disassemble(res.cubin, kernel))


@needs_nvcc
def test_default_build_is_sass_identical_with_lanes_0():
    for kernel in KERNELS:
        assert _sass(2, kernel, {**REG, "ARGUS_REG_LANES": "0"}, 64) == _sass(2, kernel, REG, 64), kernel


@needs_nvcc
def test_every_kernel_builds_in_the_lanes_build_and_modes_0_1_ignore_it():
    for kernel in KERNELS:
        for mode in (0, 1):
            assert _sass(mode, kernel, LANES, 64) == _sass(mode, kernel, REG, 64), (mode, kernel)
        lines = _sass(2, kernel, LANES, 64)
        assert sum("SR_GLOBALTIMERLO" in ln for ln in lines) >= 2, kernel
        assert not [ln for ln in lines if "ATOMS" in ln], kernel  # no lane-group slot claims
        # the only shared memory: the arm's seq (stored at the declaration, loaded at scope exit), as in the default
        default = _sass(2, kernel, REG, 64)
        for op in ("LDS", "STS"):
            assert sum(f" {op}" in ln for ln in lines) == sum(f" {op}" in ln for ln in default), (kernel, op)


# Non-FFMA instructions of the timed loop (one BEGIN/END pair and the loop's own control) of refexec_compute at
# OCCURRENCES=256, and of the __noinline__ by-value helper (one pair), nvcc 13.0 sm_90a: the default register cursor
# 40 and 46; the lanes build 43 and 49 in session 18 (+1.5 per marker: the writer LOP3 per marker where the default ANDs
# both markers' masks in one LOP3, and two register copies of the count around the body's loop, or in the helper a
# second window SEL), 43 and 51 since the window left the store's predicate (in the helper ptxas makes `@p add count,
# take` a VIADD, a window-predicated IADD3 and a writer-predicated move: two more instructions, eight fewer stall
# cycles; the schedule is bounded by MAX_STALL_EXTRA below). MAX_* allow one instruction more than that.
MAX_LOOP_EXTRA, MAX_HELPER_EXTRA = 4, 6
FORBIDDEN = ("LDS", "STS", "ATOMS", "ATOM", "RED", "BSSY", "BSYNC", "MATCH", "BRA.DIV", "R2UR", "REDUX", "WARPSYNC",
             "CALL", "LDG", "VOTE.ALL", "MEMBAR", "SHFL", "BAR")


def _outer_loop(ins):
    """The body kernel's outer loop: the longest backward branch's span that holds two timer reads."""
    best = None
    for k, (addr, _, op, ops) in enumerate(ins):
        if op == "BRA" and int(ops.split()[-1], 16) < addr:
            start = next(j for j, x in enumerate(ins) if x[0] == int(ops.split()[-1], 16))
            body = ins[start: k + 1]
            if sum("SR_GLOBALTIMER" in x[3] for x in body) >= 2 and (best is None or len(body) > len(best)):
                best = body
    return best


def _helper(ins):
    """The __noinline__ helper: from the CALL's target to its RET."""
    target = next(int(ops.split()[-1], 16) for _, _, op, ops in ins if op.startswith("CALL"))
    start = next(j for j, x in enumerate(ins) if x[0] == target)
    end = next(j for j in range(start, len(ins)) if ins[j][2].startswith("RET"))
    return ins[start: end + 1]


def _marker_paths(body):
    """Each marker's instructions from its activemask (VOTE.ANY ... PT, PT) to its record store."""
    paths = []
    for k, (_, _, op, ops) in enumerate(body):
        if op == "VOTE.ANY" and ops.endswith("PT, PT"):
            end = next(j for j in range(k, len(body)) if body[j][2] == "STG.E.128")
            paths.append(body[k: end + 1])
    return paths


@needs_nvcc
@pytest.mark.parametrize("kernel", ["refexec_compute", "refexec_compute_helper_value"])
def test_lanes_marker_is_straight_line_with_a_predicated_store(kernel):
    """Each marker: the activemask, the __syncwarp's NOP before the timer read, the writer test (one LOP3 to a
    predicate, on the activemask and %lanemask_lt only: the coordinate window gates the count update, not the store), a
    32-bit timer read, and the record store predicated on the writer; no shared memory, atomic, barrier, branch or
    convergence check. The loop (or helper) holds at most MAX_*_EXTRA instructions more than the default's."""
    lanes, default = parse_sass(_sass(2, kernel, LANES)), parse_sass(_sass(2, kernel, REG))
    pick = _outer_loop if kernel == "refexec_compute" else _helper
    body, base = pick(lanes), pick(default)
    paths = _marker_paths(body)
    assert len(paths) == 2, len(paths)
    text = "\n".join(f"{p or ''} {op} {ops}" for _, p, op, ops in body)
    for path in paths:
        ops = [op for _, _, op, _ in path]
        assert not [op for op in ops if op.split(".")[0] in FORBIDDEN or op in FORBIDDEN], text
        assert "BRA" not in ops, text
        timer = next(k for k, (_, _, op, a) in enumerate(path) if op == "CS2R.32" and "SR_GLOBALTIMERLO" in a)
        assert "NOP" in ops[1:timer], text  # the __syncwarp before the stamp
        writer = [(k, a) for k, (_, _, op, a) in enumerate(path) if op == "LOP3.LUT" and a.startswith("P")]
        assert len(writer) == 1, text
        args = [a.strip().split(".")[0] for a in writer[0][1].split(",")]
        mask = path[0][3].split(",")[0].strip()  # VOTE.ANY's destination: the activemask
        assert args[2] == mask and args[4] == "RZ", text  # (active & lanemask_lt) == 0: no window operand
        assert path[-1][1] == f"@!{args[0]}", text  # the store is predicated on the writer test
    non_ffma = [x for x in body if x[2] != "FFMA"]
    non_ffma_base = [x for x in base if x[2] != "FFMA"]
    extra = MAX_LOOP_EXTRA if kernel == "refexec_compute" else MAX_HELPER_EXTRA
    assert len(non_ffma) <= len(non_ffma_base) + extra, (len(non_ffma), len(non_ffma_base), text)


@needs_nvcc
def test_lanes_and_apart_together_do_not_compile():
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build
    from tests.test_cuda_build import SOURCES

    with pytest.raises(Exception, match="define one"):
        build(CudaBuildSpec("refexec.lanes.apart", [SOURCES["reference_execution"]], argus_mode=2,
                            defines={**LANES, "ARGUS_REG_APART": "1"}))


def _issue_stalls(kernel: str, defines: dict, occurrences: int = 256) -> list[tuple[int, int, str]]:
    """(address, stall cycles, instruction) of every instruction, from the scheduling control bits ptxas writes in
    each 128-bit instruction (bits 105..108 of the word: the cycles the warp waits before issuing its next
    instruction; Volta and later, Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking").
    cuobjdump prints the word's low and high 64 bits on two lines."""
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble
    from tests.test_cuda_build import SOURCES

    name = f"refexec.lanes.m2.o{occurrences}" + "".join(f".{k}{v}" for k, v in sorted(defines.items()))
    res = build(CudaBuildSpec(name, [SOURCES["reference_execution"]], argus_mode=2,
                              defines={"OCCURRENCES": str(occurrences), **defines}))
    lines = disassemble(res.cubin, kernel).splitlines()
    out = []
    for k, line in enumerate(lines):
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);\s*/\*\s*0x[0-9a-f]{16}\s*\*/", line)
        if m:
            hi = int(re.search(r"0x([0-9a-f]{16})", lines[k + 1]).group(1), 16)
            out.append((int(m.group(1), 16), (hi >> 41) & 15, " ".join(m.group(2).split())))
    return out


def _loop_or_helper_stalls(ins, kernel: str) -> int:
    """Stall cycles of the non-FFMA instructions of the body kernel's outer loop, or of the __noinline__ helper."""
    def target(text):
        parts = text.split()
        op = parts[1] if text.startswith("@") else parts[0]
        return int(parts[-1], 16) if op.startswith("BRA") and parts[-1].startswith("0x") else None

    if kernel == "refexec_compute":
        back = [(target(t), a) for a, _, t in ins if target(t) is not None and target(t) < a]
        lo, hi = max(back, key=lambda b: b[1] - b[0])
    else:
        lo = next(int(t.split()[-1], 16) for _, _, t in ins if t.split()[0].startswith("CALL"))
        hi = next(a for a, _, t in ins if a >= lo and t.startswith("RET"))
    return sum(s for a, s, t in ins if lo <= a <= hi and not t.startswith("FFMA"))


# Stall cycles (ptxas's schedule) of the marker loop / helper, nvcc 13.0 sm_90a, OCCURRENCES=256: default register
# cursor 139 / 138, session 18's lanes build 147 / 146 (its BEGIN's window ISETP/SEL in front of the writer test, whose
# predicate then guarded the store ~13 cycles later), this build 141 / 137.
MAX_STALL_EXTRA = 3


@needs_nvcc
@pytest.mark.parametrize("kernel", ["refexec_compute", "refexec_compute_helper_value"])
def test_lanes_marker_schedule_is_within_a_few_cycles_of_the_default(kernel):
    """What the static schedule says one BEGIN/END pair costs: the lanes build's loop (or helper) waits at most
    MAX_STALL_EXTRA cycles more than the default register cursor's between its instructions (session 18's header: +8)."""
    lanes = _loop_or_helper_stalls(_issue_stalls(kernel, LANES), kernel)
    default = _loop_or_helper_stalls(_issue_stalls(kernel, REG), kernel)
    assert lanes <= default + MAX_STALL_EXTRA, (lanes, default)

