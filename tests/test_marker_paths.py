"""Marker paths on the CPU: the default markers (a58e52b's, GPU-verified) and the opt-in fast markers
(-DARGUS_FAST_MARKERS=1, csrc/argus/argus_fast_markers.cuh: fast path SASS, lane-group records), the helper
and divergent kernels build in every mode with either, and the decoder pairs lane groups (ARGUS_KIND_LANES)
of rings the Python mirror writes.

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
FAST = {"ARGUS_FAST_MARKERS": "1"}  # the opt-in fast markers (benchmarks/marker_cost.py: FAST_DEFINES)
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
    """benchmarks/marker_cost.py's check for the fast_shared_divergent path, on rings whose two halves take
    slots in random interleavings (as their shared atomics may): every interleaving pairs per lane group."""
    import random

    from benchmarks.marker_cost import expected_occurrences

    order = [0] * 32 + [1] * 32
    random.Random(seed).shuffle(order)
    assert _occurrences(*_divergent_ring(order)) == expected_occurrences("fast_shared_divergent", 16)


def test_slow_path_merging_both_halves_gives_the_h200_failure():
    """The 00:20 H200 failure (ring 0: no (refexec, c, 0xFFFF0000) occurrence, yet no mismatch and no problem)
    is what the decoder gives for a ring whose slow path merged both halves into one whole-warp group:
    so the decoder paired what it was given, and the device wrote one group per marker pair."""
    from benchmarks.marker_cost import expected_occurrences

    got = _occurrences(*_divergent_ring([0, 1] * 32, merged=True))
    want = expected_occurrences("fast_shared_divergent", 16)
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


def _sass(mode: int, kernel: str, defines: dict | None = None) -> list[str]:
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    name = f"refexec.paths.m{mode}" + (".fast" if defines else "")
    res = build(CudaBuildSpec(name, [SOURCES["reference_execution"]], argus_mode=mode, defines=defines or {}))
    return sass_lines(disassemble(res.cubin, kernel))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def _fast_paths(lines: list[str]) -> list[tuple[list[str], int]]:
    """Each fast marker's fast path (ARGUS_FAST_MARKERS build): from its cursor load (the LDS.128 pair before the branch on it) to
    the 16-byte record store, with the index of its %globaltimer read (unpredicated: the slow path's is
    predicated) in that window."""
    out = []
    for i, ln in enumerate(lines):
        if "SR_GLOBALTIMER" in ln and "@" not in ln.split("SR_GLOBALTIMER")[0]:
            branch = max((j for j in range(i) if " BRA " in lines[j]), default=None)
            loads = [j for j in range(branch or 0) if "LDS.128" in lines[j]]
            end = next((j for j in range(i, len(lines)) if "STG.E.128" in lines[j]), None)
            if branch is not None and len(loads) >= 2 and end is not None:
                out.append((lines[loads[-2]: end + 1], i - loads[-2]))
    return out


@needs_nvcc
@pytest.mark.parametrize("defines", [None, FAST], ids=["default", "fast"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_marker_path_builds_in_every_mode(kernel, defines):
    for mode in (0, 1, 2):
        assert _sass(mode, kernel, defines)


@needs_nvcc
def test_trace_free_build_is_the_same_with_the_fast_define():
    """ARGUS_FAST_MARKERS only changes the trace build: modes 0 and 1 give the same SASS with or without it."""
    for mode in (0, 1):
        for kernel in KERNELS:
            assert _sass(mode, kernel, FAST) == _sass(mode, kernel), (mode, kernel)


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_default_markers_take_no_lane_group_slots(kernel):
    """The default (a58e52b's markers): no shared-memory atomic (lane groups of a warp take no slots of their
    own: the lowest active lane records for the warp). The fast build's slow path takes its slots with them."""
    assert not any("ATOMS" in ln for ln in _sass(2, kernel))
    assert any("ATOMS" in ln for ln in _sass(2, kernel, FAST))


@needs_nvcc
def test_fast_marker_fast_path_is_one_shared_load_pair_one_branch_and_no_call():
    # Measured proxy (no GPU here): SASS from the cursor load to the record store. The default path has a
    # lane election, a claim branch with BSSY, a clock-select after the cursor load and two shared-load latencies.
    paths = _fast_paths(_sass(2, "refexec_compute", FAST))
    assert len(paths) >= 2
    for p, timer in paths:
        text = "\n".join(p)
        assert text.count("LDS.128") == 2 and "CALL" not in text and "LDG" not in text, text
        assert "SR_CLOCKLO" not in text and "FLO" not in text, text  # no clock select, no lane election
        assert sum(" BRA " in ln for ln in p) == 1, text
        # The timer is read after the branch on the cursor load (which waits for the load, and the load for a
        # barrier before the marker): not next to a BAR.SYNC.DEFER_BLOCKING, where it could issue before release.
        assert " BRA " in "\n".join(p[:timer]), text
    # In the loop (the first marker, peeled before it, also computes the CTA index and warp slot): today 19-21.
    for p, _ in paths[1:]:
        assert len(p) <= 24, f"{len(p)} instructions from the cursor load to the record store:\n" + "\n".join(p)


@needs_nvcc
@pytest.mark.parametrize("defines", [None, FAST], ids=["default", "fast"])
def test_barrier_then_marker_reads_the_timer_after_the_cursor_load(defines):
    """ws_pipeline (tests/fixtures), default and fast markers: a consumer's compute BEGIN right after bar.sync. Its stamp must not be
    read in the barrier's shadow: between the BAR.SYNC and the timer read sit the cursor load and the branch
    on it (a stamp read before the barrier released the warp would date the compute before its tile's load)."""
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines

    src = Path(__file__).parent / "fixtures" / "ws_pipeline" / "ws_pipeline.cu"
    spec = CudaBuildSpec("ws_pipeline.paths" + (".fast" if defines else ""), [src], argus_mode=2, defines=defines or {})
    lines = sass_lines(disassemble(build(spec).cubin, "ws_pipeline"))
    bars = [i for i, ln in enumerate(lines) if "BAR.SYNC" in ln]
    assert bars
    for b in bars:
        timer = next(j for j in range(b, len(lines)) if "SR_GLOBALTIMER" in lines[j])
        between = "\n".join(lines[b:timer])
        assert between.count("LDS.128") == 2 and " BRA " in between, "\n".join(lines[b: timer + 1])


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_fast_slow_path_group_leaves_together(kernel):
    """bf5d6b0 on H200: lanes other than the slow path's recording lane returned at once (a predicated RET),
    ran the next marker without it and wrote a lane group 0xfffffffe. Now every return of the out-of-line
    slow path follows a WARPSYNC (on the call site's mask), and no RET is predicated."""
    lines = _sass(2, kernel, FAST)
    assert not [ln for ln in lines if " RET." in ln and "@" in ln.split("RET")[0]]
    # The slow path starts by electing its group's lowest lane from the mask (__ffs: BREV, FLO).
    starts = [i for i, ln in enumerate(lines) if " BREV " in ln]
    assert starts, "no out-of-line slow path"
    for s in starts:
        ret = next(i for i in range(s, len(lines)) if " RET." in lines[i])
        assert any("WARPSYNC" in ln for ln in lines[max(s, ret - 4): ret]), "\n".join(lines[max(s, ret - 6): ret + 1])


def test_marker_cost_times_no_path_whose_check_fails_and_says_why():
    """benchmarks/marker_cost.py: a path whose output or trace check fails gets unmeasured rows naming the
    failure (one line, no table separator), and the run goes on; other errors are not swallowed."""
    from argus_rt.trace.errors import MismatchedMarkersError
    from benchmarks.marker_cost import OCCURRENCES, PATHS, check_failure, unmeasured_row
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
    row = unmeasured_row("fast_shared", "armed", "refexec_compute", why)
    assert list(row) == ["cursor", "state", "kernel", "check", *(f"added_us_occ{o}" for o in OCCURRENCES),
                         "per_marker_ns", "fixed_us", "spread"]
    assert row["check"] == f"failed: {why}" and row["per_marker_ns"] is None
    table = markdown_table([row], [k for k in row if k != "spread"])
    assert table.splitlines()[2].count("unmeasured") == len(OCCURRENCES) + 2
    assert {p for p in PATHS if p.startswith("fast_")} == {"fast_shared", "fast_shared_helper", "fast_shared_divergent"}
    assert all(PATHS[p][1].get("ARGUS_FAST_MARKERS") == "1" for p in PATHS if p.startswith("fast_"))
    assert not any("ARGUS_FAST_MARKERS" in PATHS[p][1] for p in ("shared", "shared_helper", "register"))


def _fail(msg):
    raise AssertionError(msg)
