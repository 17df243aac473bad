"""Marker paths on the CPU: the helper and divergent kernels build in every mode with the shared cursor
(csrc/argus/argus_shared_cursor.cuh, the default since issue 20: lane-group records; its fast-path SASS is checked in
tests/test_shared_cursor.py), the decoder pairs lane groups (ARGUS_KIND_LANES) of rings the Python mirror writes, and
benchmarks/marker_cost.py's rows and checks.

GPU: tests/test_marker_paths_gpu.py runs each path and checks its decoded occurrences.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from argus_rt.trace import TraceConfig, decode, layout, pair_intervals
from argus_rt.trace.decode import LANES_WHOLE_WARP
from argus_rt.trace.errors import CorruptTraceError
from tests.ring_writer import RingWriter
from toolchain import needs_nvcc

KERNELS = ("refexec_compute", "refexec_compute_helper", "refexec_compute_divergent")
A, B = 0x1111_1111, 0x2222_2222


def _lane_record(w: RingWriter, cta, warp, lanes, lowest, time):
    """What emit_slow writes after the marker of a divergent group (the mirror's raw slot write)."""
    cfg = w.config
    h = w._header(cfg.ring_of(cta, warp))
    n = int(h["written"][0])
    w._records(cfg.ring_of(cta, warp))[n & (cfg.capacity - 1)] = (
        lanes, lowest, (time & layout.TIME_MASK) | (layout.KIND_LANES << layout.KIND_SHIFT))
    h["written"] = n + 1
    h["dropped"] = max(0, n + 1 - cfg.capacity)


def test_divergent_half_warps_pair_per_lane_group():
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=16)
    w = RingWriter(cfg)
    # the two halves interleave in the ring, and their slots are not in time order across the halves
    w.emit(0, 0, 3, "begin", A, 100, coord=0)
    _lane_record(w, 0, 0, 0x0000FFFF, 0, 100)
    w.emit(0, 0, 3, "begin", B, 90, coord=0)
    _lane_record(w, 0, 0, 0xFFFF0000, 16, 90)
    w.emit(0, 0, 3, "end", A, 200, coord=0)
    _lane_record(w, 0, 0, 0x0000FFFF, 0, 200)
    w.emit(0, 0, 3, "end", B, 250, coord=0)
    _lane_record(w, 0, 0, 0xFFFF0000, 16, 250)
    t = decode(w.bytes(), cfg)
    assert not t.incomplete and len(t.events) == 4
    rows = pair_intervals(t).rows
    got = sorted(zip(rows["region_id"].tolist(), rows["lanes"].tolist(), rows["duration"].tolist()))
    assert got == [(A, 0x0000FFFF, 100), (B, 0xFFFF0000, 160)]
    assert set(rows["depth"].tolist()) == {0}


def _divergent_ring(order, merged=False):
    """The ring of one warp of refexec_compute_divergent (16 occurrences): lanes 0-15 run region
    refexec/occurrence, lanes 16-31 region refexec, each half BEGIN/END per occurrence; ``order`` says which
    half takes its next slot (0 low, 1 high). ``merged``: what the slow path wrote when it took
    __activemask() inside itself and the hardware had run both halves' calls together: one whole-warp
    record by lane 0 (the low half's marker), nothing for the high half."""
    from benchmarks.marker_cost import REGION_OCCURRENCE, REGION_REFEXEC

    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=256)
    w = RingWriter(cfg)
    steps = {0: [(k, c) for c in range(16) for k in ("begin", "end")]}
    steps[1] = list(steps[0])
    t = 1000
    for half in order:
        kind, c = steps[half].pop(0)
        t += 32
        if merged:
            if half == 0:
                w.emit(0, 0, 5, kind, REGION_OCCURRENCE, t, coord=c)
            continue
        w.emit(0, 0, 5, kind, (REGION_OCCURRENCE, REGION_REFEXEC)[half], t, coord=c)
        _lane_record(w, 0, 0, (0x0000FFFF, 0xFFFF0000)[half], 16 * half, t)
    return cfg, w


def _occurrences(cfg, w):
    from collections import Counter

    t = decode(w.bytes(), cfg)
    assert not t.incomplete, t.problems
    rows = pair_intervals(t).rows
    return Counter(zip(rows["region_id"].tolist(), rows["coord"].tolist(), rows["lanes"].tolist()))


@pytest.mark.parametrize("seed", range(4))
def test_divergent_kernel_ring_decodes_to_the_gpu_test_s_occurrences_in_any_interleaving(seed):
    """benchmarks/marker_cost.py's check for the shared_divergent path, on rings whose two halves take
    slots in random interleavings (as their shared atomics may): every interleaving pairs per lane group."""
    import random

    from benchmarks.marker_cost import expected_occurrences

    order = [0] * 32 + [1] * 32
    random.Random(seed).shuffle(order)
    assert _occurrences(*_divergent_ring(order)) == expected_occurrences("shared_divergent", 16)


def test_slow_path_merging_both_halves_gives_the_h200_failure():
    """The 00:20 H200 failure (ring 0: no (refexec, c, 0xFFFF0000) occurrence, yet no mismatch and no problem)
    is what the decoder gives for a ring whose slow path merged both halves into one whole-warp group:
    so the decoder paired what it was given, and the device wrote one group per marker pair."""
    from benchmarks.marker_cost import expected_occurrences

    got = _occurrences(*_divergent_ring([0, 1] * 32, merged=True))
    want = expected_occurrences("shared_divergent", 16)
    assert sorted(set(got) ^ set(want))[:4] == [(0x08F8A352, c, 0xFFFF0000) for c in range(4)]
    assert set(got) == {(0xEAF59E52, c, LANES_WHOLE_WARP) for c in range(16)}


def test_lane_groups_nest_inside_the_whole_warps_region_and_subsets_close_it():
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=16)
    w = RingWriter(cfg)
    w.emit(0, 0, 0, "begin", A, 10)
    w.emit(0, 0, 0, "begin", B, 20, coord=1)
    _lane_record(w, 0, 0, 0x0000FFFF, 0, 20)
    w.emit(0, 0, 0, "end", B, 30, coord=1)
    _lane_record(w, 0, 0, 0x0000FFFF, 0, 30)
    w.emit(0, 0, 0, "end", A, 40)  # lanes 16-31 exited: a subset closes the warp's region
    _lane_record(w, 0, 0, 0x0000FFFF, 0, 40)
    rows = pair_intervals(decode(w.bytes(), cfg)).rows
    outer, inner = rows[rows["region_id"] == A][0], rows[rows["region_id"] == B][0]
    assert outer["lanes"] == LANES_WHOLE_WARP and inner["depth"] == 1 and inner["parent"] == 0
    assert outer["duration"] == 30 and inner["duration"] == 10


def test_end_by_other_lanes_is_a_mismatch_not_a_pairing():
    from argus_rt.trace.errors import MismatchedMarkersError

    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=16)
    w = RingWriter(cfg)
    w.emit(0, 0, 0, "begin", A, 10)
    _lane_record(w, 0, 0, 0x0000FFFF, 0, 10)
    w.emit(0, 0, 0, "end", A, 20)
    _lane_record(w, 0, 0, 0xFFFF0000, 16, 20)
    with pytest.raises(MismatchedMarkersError, match="no open region"):
        pair_intervals(decode(w.bytes(), cfg))


def test_time_going_backwards_within_one_lane_group_is_still_corrupt():
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=16)
    w = RingWriter(cfg)
    w.emit(0, 0, 0, "begin", A, 100)
    _lane_record(w, 0, 0, 0x0000FFFF, 0, 100)
    w.emit(0, 0, 0, "end", A, 50)
    _lane_record(w, 0, 0, 0x0000FFFF, 0, 50)
    with pytest.raises(CorruptTraceError, match="time goes backwards"):
        decode(w.bytes(), cfg)


def test_lane_record_without_a_marker_before_it_is_corrupt():
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=16)
    w = RingWriter(cfg)
    w.claim(0, 0, 0)
    _lane_record(w, 0, 0, 0x0000FFFF, 0, 10)
    with pytest.raises(CorruptTraceError, match="does not follow a BEGIN or END"):
        decode(w.bytes(), cfg)


def test_orphan_lane_record_of_a_wrapped_ring_is_dropped():
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=4)
    w = RingWriter(cfg)
    for k, kind in enumerate(("begin", "end")):  # 4 slots, then 1: the oldest kept slot is the BEGIN's lane record
        w.emit(0, 0, 0, kind, A, 10 * k)
        _lane_record(w, 0, 0, 0x0000FFFF, 0, 10 * k)
    w.emit(0, 0, 0, "begin", B, 30)
    t = decode(w.bytes(), cfg)
    assert t.incomplete and t.events["lanes"].tolist() == [0x0000FFFF, LANES_WHOLE_WARP]
    assert t.events["kind"].tolist() == [layout.KIND_END, layout.KIND_BEGIN]
    assert int(t.rings["dropped"][0]) == 2  # 1 overwritten + the orphan


def _sass(mode: int, kernel: str) -> list[str]:
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    res = build(CudaBuildSpec(f"refexec.paths.m{mode}", [SOURCES["reference_execution"]], argus_mode=mode))
    return sass_lines(disassemble(res.cubin, kernel))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_marker_path_builds_in_every_mode(kernel):
    for mode in (0, 1, 2):
        assert _sass(mode, kernel)


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_shared_cursor_lane_groups_take_their_own_slots(kernel):
    """The shared cursor's slow path takes a lane group's slots with a shared-memory atomic (a58e52b's markers, removed,
    had none: the lowest active lane wrote an unlabelled record at the warp's count)."""
    assert any("ATOMS" in ln for ln in _sass(2, kernel))


@needs_nvcc
def test_barrier_then_register_cursor_marker_syncs_the_warp_before_the_timer_read():
    """ws_pipeline with -DWS_REG_CURSOR=1 (ARGUS_WARP_STATE): after every BAR.SYNC the marker's __syncwarp (a NOP, or a
    WARPSYNC) comes before its timer read. Without it the CS2R issues before the barrier releases the warp (H200,
    2026-12-02: 2000 of 2000 stamps early, scripts/timer_after_barrier.py)."""
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines

    src = Path(__file__).parent / "fixtures" / "ws_pipeline" / "ws_pipeline.cu"
    spec = CudaBuildSpec("ws_pipeline.paths.reg", [src], argus_mode=2, defines={"WS_REG_CURSOR": "1"})
    lines = sass_lines(disassemble(build(spec).cubin, "ws_pipeline"))
    bars = [i for i, ln in enumerate(lines) if "BAR.SYNC" in ln]
    assert bars
    for b in bars:
        timer = next(j for j in range(b, len(lines)) if "SR_GLOBALTIMER" in lines[j])
        assert not any("LDS" in ln for ln in lines[b:timer])  # the register cursor: nothing loaded before the stamp
        assert any(op in ln for ln in lines[b:timer] for op in (" NOP ", " WARPSYNC")), "\n".join(lines[b: timer + 1])


def test_marker_cost_expects_the_register_cursor_s_divergent_trace_to_be_refused():
    """register_divergent's check passes when the decoder refuses the trace (and returns the refusal for the row), and
    fails when the trace decodes."""
    from argus_rt.trace.errors import DivergentMarkersError
    from benchmarks.marker_cost import REFUSED, check_failure, check_trace, unmeasured_row

    class Session:
        def __init__(self, error):
            self.error = error

        def decode(self):
            if self.error:
                raise self.error
            return object()  # a trace that decoded

    refusal = "ring 3 (SM 7, CTA 0, warp 3) refused: ..."
    assert REFUSED == ("register_divergent",)
    assert check_trace(Session(DivergentMarkersError(refusal)), "register_divergent", 16) == refusal
    why = check_failure(lambda: check_trace(Session(None), "register_divergent", 16))
    assert why is not None and why.startswith("AssertionError") and "must be refused" in why
    assert unmeasured_row("register_divergent", "armed", "k", refusal, check="refused")["check"] == f"refused: {refusal}"


def test_marker_cost_times_no_path_whose_check_fails_and_says_why():
    """benchmarks/marker_cost.py: a path whose output or trace check fails gets unmeasured rows naming the
    failure (one line, no table separator), and the run goes on; other errors are not swallowed."""
    from argus_rt.trace.errors import MismatchedMarkersError
    from benchmarks.marker_cost import CLOCK, OCCURRENCES, PATHS, check_failure, unmeasured_row
    from benchmarks.results_doc import markdown_table

    def mismatch():
        raise MismatchedMarkersError("ring 0 (CTA 0 warp 0, SM 124) record 2: END of region 0xeaf59e52\n| no open region")

    def broken():
        raise RuntimeError("not a check")

    assert check_failure(lambda: None) is None
    why = check_failure(mismatch)
    assert why.startswith("MismatchedMarkersError: ring 0 (CTA 0 warp 0, SM 124) record 2") and "\n" not in why
    assert "|" not in why and check_failure(lambda: _fail("wrong count")) == "AssertionError: wrong count"
    with pytest.raises(RuntimeError):
        check_failure(broken)
    row = unmeasured_row("shared", "armed", "refexec_compute", why)
    assert list(row) == ["cursor", "state", "kernel", "check", *(f"added_us_occ{o}" for o in OCCURRENCES),
                         "per_marker_ns", "fixed_us", "spread"]
    assert row["check"] == f"failed: {why}" and row["per_marker_ns"] is None
    table = markdown_table([row], [k for k in row if k != "spread"])
    assert table.splitlines()[2].count("unmeasured") == len(OCCURRENCES) + 2
    # one row per path and build: the shared cursor (the lean_* rows before issue 20's default change) has no define
    assert {p for p in PATHS if p.startswith("shared")} == {"shared", "shared_helper", "shared_divergent", "shared_clock64"}
    assert all(PATHS[p][1] == {} for p in PATHS if p.startswith("shared"))
    # the opt-in straight-line build: the same four paths, each with the define
    straight = [p for p in PATHS if p.startswith("straight") and p != "straight_vote"]
    assert {p.replace("straight", "shared") for p in straight} == {p for p in PATHS if p.startswith("shared")}
    assert all(PATHS[p] == (PATHS[p.replace("straight", "shared")][0], {"ARGUS_SHARED_STRAIGHT": "1"}) for p in straight)
    assert PATHS["straight_vote"] == ("refexec_compute", {"ARGUS_SHARED_STRAIGHT": "2"})  # the vote tail, body only
    runs = {(k, tuple(sorted(d.items())), CLOCK.get(p, "globaltimer")) for p, (k, d) in PATHS.items()}
    assert len(runs) == len(PATHS) and set(CLOCK) <= set(PATHS)
    assert not [p for p in PATHS if "fast" in p or "lean" in p]  # the fast markers and the lean define are gone


def _fail(msg):
    raise AssertionError(msg)
