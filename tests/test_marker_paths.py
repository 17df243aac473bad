"""Marker paths on the CPU: the default markers' fast path (SASS), the helper and divergent kernels build
in every mode, and the decoder pairs lane groups (ARGUS_KIND_LANES) of rings the Python mirror writes.

GPU: tests/test_marker_paths_gpu.py runs each path and checks its decoded occurrences.
"""
from __future__ import annotations

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


def _fast_paths(lines: list[str]) -> list[list[str]]:
    """Each default marker's fast path: from its %globaltimer read to the 16-byte record store."""
    out = []
    for i, ln in enumerate(lines):
        if "SR_GLOBALTIMER" in ln:
            end = next((j for j in range(i, len(lines)) if "STG.E.128" in lines[j]), None)
            if end is not None:
                out.append(lines[i: end + 1])
    return out


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_marker_path_builds_in_every_mode(kernel):
    for mode in (0, 1, 2):
        assert _sass(mode, kernel)


@needs_nvcc
def test_default_marker_fast_path_is_one_shared_load_pair_one_branch_and_no_call():
    # Measured proxy (no GPU here): SASS from the timer read to the record store. The old path had a
    # lane election, a claim branch with BSSY, a clock-select after the cursor load and two shared-load latencies.
    paths = _fast_paths(_sass(2, "refexec_compute"))
    assert len(paths) >= 2
    for p in paths:
        text = "\n".join(p)
        assert text.count("LDS.128") == 2 and "CALL" not in text and "LDG" not in text, text
        assert "SR_CLOCKLO" not in text and "FLO" not in text, text  # no clock select, no lane election
        assert sum(" BRA " in ln for ln in p) == 1, text
    # In the loop (the first marker, peeled before it, also computes the CTA index and warp slot): today 20-22.
    for p in paths[1:]:
        assert len(p) <= 24, f"{len(p)} instructions from the timer read to the record store:\n" + "\n".join(p)
