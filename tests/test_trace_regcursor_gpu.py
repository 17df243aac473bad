"""Register-cursor markers (ARGUS_WARP_STATE) on the GPU, on the reference-execution kernel:
exact records per warp, coordinate window, wrap, append under one arm, the clock64 refusal and the
anchored build. Every launch's output is first checked against a float64 NumPy model (rel. error < 1e-4)."""
from __future__ import annotations

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, TraceSession, pair_intervals
from benchmarks.trace_overhead import fma_chain_reference

pytestmark = pytest.mark.gpu

CTAS, THREADS, OCC, INNER = 8, 256, 64, 4
WARPS = CTAS * THREADS // 32


@pytest.fixture(scope="module")
def mods(tmp_path_factory):
    import os

    from argus_rt.kinds.cuda.build import CudaBuildSpec, build
    from argus_rt.launch import CubinModule
    from tests.test_cuda_build import SOURCES

    os.environ.setdefault("ARGUS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    src = [SOURCES["reference_execution"]]
    reg = {"REFEXEC_WARP_STATE": "1"}
    return {
        "reg": CubinModule.load(build(CudaBuildSpec("refexec.reg", src, argus_mode=2, defines=reg)).cubin),
        "reg_anchored": CubinModule.load(build(CudaBuildSpec(
            "refexec.reg.anch", src, argus_mode=2, defines={**reg, "ARGUS_TIMESTAMP": "ARGUS_TS_ANCHORED"})).cubin),
    }


def launch_checked(mod, inner=INNER):
    import torch

    n = CTAS * THREADS
    a0 = torch.rand(n, device="cuda") * 0.9 + 0.1
    b = torch.rand(n, device="cuda") * 0.09 + 0.9
    c = torch.rand(n, device="cuda") * 0.09 + 0.01
    out = torch.full((n,), float("nan"), device="cuda")
    mod.launch("refexec_compute", grid=CTAS, block=THREADS, args=[out, a0, b, c, np.int32(inner)])
    torch.cuda.synchronize()
    ref = fma_chain_reference(*(t.double().cpu().numpy() for t in (a0, b, c)), OCC * inner * 8)
    got = out.cpu().numpy()
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-4


def events_per_ring(trace):
    return [trace.ring_events(int(r["ring"])) for r in trace.rings]


def expected(coords):
    return [(k, c) for c in coords for k in (1, 2)]


def test_every_warp_records_every_occurrence_in_order(mods):
    sess = TraceSession(mods["reg"], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=256))
    sess.arm()
    launch_checked(mods["reg"])
    t = sess.decode()
    assert not t.incomplete, t.problems[:3]
    assert len(t.rings) == WARPS and set(t.rings["written"].tolist()) == {2 * OCC}
    assert set(t.rings["dropped"].tolist()) == {0}
    for ev in events_per_ring(t):
        assert list(zip(ev["kind"].tolist(), ev["coord"].tolist())) == expected(range(OCC))
        assert np.all(np.diff(ev["time"].astype(np.int64)) >= 0)
    iv = pair_intervals(t)
    assert len(iv) == WARPS * OCC and np.all(iv.rows["duration"] > 0)


def test_coordinate_window_records_only_its_occurrences(mods):
    sess = TraceSession(mods["reg"], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=256))
    sess.arm(coord_window=(10, 13))
    launch_checked(mods["reg"])
    t = sess.decode()
    assert set(t.rings["written"].tolist()) == {6}
    for ev in events_per_ring(t):
        assert list(zip(ev["kind"].tolist(), ev["coord"].tolist())) == expected(range(10, 13))


def test_wrap_counts_dropped_records_and_keeps_the_latest(mods):
    sess = TraceSession(mods["reg"], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=32))
    sess.arm()
    launch_checked(mods["reg"])
    t = sess.decode()
    assert t.incomplete and t.dropped == WARPS * (2 * OCC - 32)
    for ev in events_per_ring(t):
        assert list(zip(ev["kind"].tolist(), ev["coord"].tolist())) == expected(range(OCC - 16, OCC))


def test_window_with_wrap_drops_the_out_of_window_leftover(mods):
    # Markers outside the window store into the next slot; once the ring has wrapped that slot is the oldest
    # kept record, which the decoder must recognise (coordinate outside the window) and drop.
    sess = TraceSession(mods["reg"], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=4))
    sess.arm(coord_window=(10, 13))  # 6 records into rings of 4
    launch_checked(mods["reg"])
    t = sess.decode()
    assert set(t.rings["written"].tolist()) == {6} and set(t.rings["kept"].tolist()) == {3}
    assert set(t.rings["dropped"].tolist()) == {3}
    for ev in events_per_ring(t):
        assert list(zip(ev["kind"].tolist(), ev["coord"].tolist())) == [(2, 11), (1, 12), (2, 12)]
    assert sorted(set(pair_intervals(t, strict=False).rows["coord"].tolist())) == [12]


def test_second_launch_under_one_arm_appends(mods):
    sess = TraceSession(mods["reg"], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=256))
    sess.arm()
    launch_checked(mods["reg"])
    launch_checked(mods["reg"])
    t = sess.decode()
    assert set(t.rings["written"].tolist()) == {4 * OCC} and set(t.rings["claims"].tolist()) == {2}
    assert len(pair_intervals(t)) == 2 * WARPS * OCC
    sess.arm()  # a new arm starts the rings again
    launch_checked(mods["reg"])
    t = sess.decode()
    assert set(t.rings["written"].tolist()) == {2 * OCC} and set(t.rings["claims"].tolist()) == {1}


def test_clock64_arm_is_refused_by_register_cursor_warps_and_reported(mods):
    sess = TraceSession(mods["reg"], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=256))
    sess.arm(clock="clock64")
    launch_checked(mods["reg"])
    t = sess.decode()
    assert len(t.events) == 0 and t.unbuffered == WARPS and t.incomplete
    assert any("ARGUS_TS_ANCHORED" in p for p in t.problems), t.problems


def test_anchored_register_cursor_decodes_to_ns(mods):
    sess = TraceSession(mods["reg_anchored"], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=256,
                                                          clock="anchored"))
    sess.arm()
    launch_checked(mods["reg_anchored"], inner=64)  # tens of us per warp: anchors far enough apart
    t = sess.decode()
    assert t.unit == "ns" and not t.incomplete, t.problems[:3]
    for ev in events_per_ring(t):
        assert list(zip(ev["kind"].tolist(), ev["coord"].tolist())) == expected(range(OCC))
    assert len(pair_intervals(t)) == WARPS * OCC
