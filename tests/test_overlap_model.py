"""The analytic overlap model, its fit and the tuner, on recorded 2x H200 measurements.

The fixture ``tests/fixtures/overlap_h200x2_measurements.json`` was recorded by
``benchmarks/overlap.py`` on the device machine: profiled P = 1 points per (S, R), the model's
predictions at that time and every candidate timed. Nothing here touches a GPU.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlap.config import OverlapConfig, OverlapShapeError, candidate_configs
from overlap.measure import summarize_call
from overlap.model import ProfiledPoint, closed_form_ms, fit_link, fit_model, rank_of, simulate_ms
from overlap.tune import tune

FIXTURE = Path(__file__).parent / "fixtures" / "overlap_h200x2_measurements.json"


def _cases():
    return json.loads(FIXTURE.read_text())["cases"]


def _model(case):
    pts = [ProfiledPoint(**p) for p in case["points"]]
    return fit_model(case["world"], case["m_shard"], case["k"], case["n"], case["elem_bytes"], pts)


@settings(max_examples=200, deadline=None)
@given(t_comm=st.floats(0.001, 5.0), t_comp=st.floats(0.001, 5.0), S=st.integers(1, 16))
def test_simulation_reduces_to_the_closed_form(t_comm, t_comp, S):
    # Two ranks, no local GEMM, no set-up, P = 1: the textbook pipeline.
    sim = simulate_ms(2, S, 1, t_comm, t_comp, t_local=0.0, t_setup=0.0)
    assert math.isclose(sim, closed_form_ms(t_comm, t_comp, S), rel_tol=1e-9, abs_tol=1e-12)


def test_simulation_hides_comm_behind_the_local_gemm_and_pays_merged_steps():
    # Local GEMM 1.0 ms hides 4 chunks of 0.1 ms entirely: T = 1.0 + 4 * 0.2.
    assert math.isclose(simulate_ms(2, 4, 1, 0.1, 0.2, t_local=1.0), 1.8)
    # Comm-bound: chunks of 0.5 ms, local 0.2: the last step starts at 4 * 0.5.
    assert math.isclose(simulate_ms(2, 4, 1, 0.5, 0.1, t_local=0.2), 2.1)
    # P = 4 waits for all chunks, then one step of 4x the rows (given as its own time).
    assert math.isclose(simulate_ms(2, 4, 4, 0.5, 0.4, t_local=0.2), 2.4)
    # World 3: each step runs one GEMM per peer.
    assert math.isclose(simulate_ms(3, 2, 1, 0.1, 0.3, t_local=1.0), 1.0 + 2 * 0.6)
    assert simulate_ms(1, 1, 1, 9.0, 9.0, t_local=0.5) == 0.5  # no peers, no communication
    with pytest.raises(OverlapShapeError, match="P dividing S"):
        simulate_ms(2, 4, 3, 0.1, 0.1)


def test_link_fit_recovers_latency_and_throughput():
    # Synthetic points: 20 us + bytes / 300 GB/s.
    pts = [ProfiledPoint(S, 0, 0.02 + (2**26 / S) / 300e6, 1, 1, 0, 1) for S in (1, 2, 4, 8)]
    lat, gbs = fit_link(pts, lambda S: 2**26 / S)
    assert lat == pytest.approx(0.02, rel=1e-6)
    assert gbs == pytest.approx(300.0, rel=1e-6)


def test_recorded_fit_is_deterministic_and_calibrated_at_the_profiled_points():
    for case in _cases():
        m1, m2 = _model(case), _model(case)
        keys = sorted(case["all_measured_ms"])
        assert [m1.predict(OverlapConfig.from_key(k)) for k in keys] == [m2.predict(OverlapConfig.from_key(k)) for k in keys]
        for p in case["points"]:  # P = 1 predictions reproduce the event-timed call they were calibrated on
            assert m1.predict(OverlapConfig(p["S"], p["R"], 1)) == pytest.approx(p["measured_ms"], rel=1e-12)
        assert m1.overhead_ms >= 0.0


def test_model_ranking_covers_every_candidate_and_s1():
    for case in _cases():
        model = _model(case)
        cands = [OverlapConfig.from_key(k) for k in case["all_measured_ms"]]
        ranking = model.rank(cands)
        assert sorted(c.key() for c, _ in ranking) == sorted(case["all_measured_ms"])
        assert any(c.S == 1 for c, _ in ranking)
        preds = [p for _, p in ranking]
        assert preds == sorted(preds)


def test_measured_best_is_in_the_models_top_five_when_timing_was_interleaved():
    # Only the interleaved run: the sequential first run's candidate timings drift with temperature.
    cases = [c for c in _cases() if c["source"] == "run2-interleaved"]
    assert cases
    for case in cases:
        ranking = _model(case).rank([OverlapConfig.from_key(k) for k in case["all_measured_ms"]])
        best = OverlapConfig.from_key(min(case["all_measured_ms"], key=case["all_measured_ms"].get))
        assert rank_of(best, ranking) <= 5


def test_unprofiled_points_fall_back_to_the_fitted_per_chunk_overhead():
    case = _cases()[0]
    pts = [ProfiledPoint(**p) for p in case["points"] if p["S"] != 4]
    model = fit_model(case["world"], case["m_shard"], case["k"], case["n"], case["elem_bytes"], pts)
    cfg = OverlapConfig(4, pts[0].R, 2)
    assert model.predict(cfg) == pytest.approx(model.simulate(cfg) + model.overhead_ms * 4)


class _FakeRuntime:
    def __init__(self, world, r_values):
        self.world = world
        self.group = None

        class _Pool:
            pass

        self.pool = _Pool()
        self.pool.r_values = sorted(r_values)


def test_tuner_validates_only_the_models_top_k_and_picks_the_fastest_of_them():
    import torch

    for case in _cases():
        points = {(p["S"], p["R"]): ProfiledPoint(**p) for p in case["points"]}
        measured = {OverlapConfig.from_key(k): v for k, v in case["all_measured_ms"].items()}
        timed = []

        def profile_fn(S, R):
            return points.get((S, R)), {}

        def time_fn(cfg):
            timed.append(cfg)
            return measured[cfg]

        rt = _FakeRuntime(case["world"], {r for _, r in points})
        a = torch.empty(case["m_shard"], case["k"], dtype=torch.bfloat16)
        b = torch.empty(case["k"], case["n"], dtype=torch.bfloat16)
        res = tune(rt, a, b, s_values=(1, 2, 4, 8), p_values=(1, 2, 4, 8), top=5,
                   profile_fn=profile_fn, time_fn=time_fn)
        assert len(timed) == 5
        assert [c for c, _ in res.ranking[:5]] == timed
        assert res.best == min(timed, key=lambda c: measured[c])
        assert res.to_dict()["best_model_rank"] <= 5


def test_summarize_call_splits_a_crafted_timeline():
    def k(name, ts, dur, cat="kernel"):
        return {"name": name, "cat": cat, "ts_us": ts, "dur_us": dur, "stream": 1, "grid": [1, 1, 1], "bytes": 1000}

    # R = 0, S = 2, P = 1, two ranks: local copy, barrier, local GEMM, 2 pulls, 2 step GEMMs.
    ev = [k("Memcpy DtoD", 0, 10, "gpu_memcpy"), k("barrier_kernel", 10, 2), k("nvjet_gemm", 12, 100),
          k("Memcpy PtoP", 13, 20, "gpu_memcpy"), k("Memcpy PtoP", 33, 20, "gpu_memcpy"),
          k("nvjet_gemm", 112, 50), k("nvjet_gemm", 162, 50)]
    s = summarize_call(ev, 2, 2, 1, 0)
    assert s["matched"] and s["gemm_split"] == "exact" and s["comm_split"] == "exact"
    assert s["setup_ms"] == pytest.approx(0.012)
    assert s["local_gemm_ms"] == pytest.approx(0.1) and s["step_gemm_ms"] == pytest.approx(0.05)
    assert s["chunk_ms"] == pytest.approx([0.02, 0.02])
    assert s["overlapped_comm_ms"] == pytest.approx(0.04)
    assert s["span_ms"] == pytest.approx(0.212)
    # R > 0: NCCL kernels are the chunks; an extra GEMM kernel falls back to a split by rows.
    ev = [k("nvjet_gemm", 0, 100), k("ncclDevKernel_SendRecv", 1, 30), k("ncclDevKernel_SendRecv", 31, 30),
          k("nvjet_gemm", 100, 40), k("splitKreduce_gemm", 140, 5), k("nvjet_gemm", 145, 40)]
    s = summarize_call(ev, 2, 2, 1, 8)
    assert s["matched"] and s["chunk_ms"] == pytest.approx([0.03, 0.03])
    assert s["gemm_split"].startswith("by rows")
    assert s["local_gemm_ms"] == pytest.approx(0.185 / 2)  # (100 + 40 + 5 + 40) us shared by rows


def test_candidate_grid_matches_the_benchmark():
    for case in _cases():
        r_vals = sorted({OverlapConfig.from_key(k).R for k in case["all_measured_ms"]})
        grid = candidate_configs((1, 2, 4, 8), r_vals, (1, 2, 4, 8), case["m_shard"])
        assert sorted(c.key() for c in grid) == sorted(case["all_measured_ms"])


def test_trace_events_after_the_alignment_barrier_only():
    from overlap.measure import device_events_from_trace

    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_u8_RING_LL", "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 90.0, "dur": 1.0},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 160.0, "dur": 10.0,
         "args": {"bytes": 4096, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "ts": 155.0, "dur": 300.0,
         "args": {"grid": [2, 66, 1], "stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 150.0, "dur": 5.0},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 200.0},
    ]}
    ev = device_events_from_trace(trace)
    assert [e["name"] for e in ev] == ["nvjet_sm90_tst_256x128", "Memcpy DtoD (Device -> Device)"]
    assert ev[0]["grid"] == [2, 66, 1] and ev[1]["bytes"] == 4096
    del trace["traceEvents"][0]  # no barrier in the window: nothing is cut
    assert len(device_events_from_trace(trace)) == 3


def test_recorded_cases_plot_and_summarise(tmp_path):
    pytest.importorskip("matplotlib")
    from overlap.bench import geomean, summary_lines
    from overlap.plot import plot_surfaces

    raws = []
    rows = []
    for case in _cases():
        model = _model(case)
        preds = {k: model.predict(OverlapConfig.from_key(k)) for k in case["all_measured_ms"]}
        raws.append({"m_shard": case["m_shard"], "k": case["k"], "n": case["n"],
                     "all_measured_ms": case["all_measured_ms"], "all_predicted_ms": preds})
        best = min(case["all_measured_ms"].values())
        rows.append({"serial_ms": 2 * best, "torch_fused_ms": best, "ours_ms": best, "ideal_ms": best,
                     "model_rank_of_best": 1})
    png = plot_surfaces(raws, tmp_path / "surface.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    lines = summary_lines(rows)
    assert lines[0].startswith("geomean speedup over serial: ours 2.000x")
    assert "cases where ours is slower than torch fused: none" in lines
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)


def test_merged_steps_shed_the_profiled_per_step_cost():
    # Two R = 0 points whose profiles saw 5 us between consecutive step GEMMs.
    pts = [ProfiledPoint(1, 0, 0.2, 0.35, 0.35, 0.02, 0.80),
           ProfiledPoint(4, 0, 0.05, 0.35, 0.09, 0.02, 0.82, step_gap_ms=0.005)]
    model = fit_model(2, 2048, 8192, 8192, 2, pts)
    assert model.step_overhead == {0: pytest.approx(0.005)}
    p1, p4 = OverlapConfig(4, 0, 1), OverlapConfig(4, 0, 4)
    assert model.predict(p1) == pytest.approx(0.82)  # P = 1 stays calibrated on its timing
    # P = 4 runs one step instead of four: three steps' fixed cost comes off the calibrated residual.
    assert model.predict(p4) == pytest.approx(model.simulate(p4) + model.residual[(4, 0)] - 3 * 0.005)


def test_step_gap_counts_only_steps_whose_data_had_arrived():
    from overlap.measure import fixed_step_gap_ms

    def ev(ts, dur):
        return {"ts_us": ts, "dur_us": dur}

    steps = [ev(100, 50), ev(154, 50), ev(300, 50)]   # gaps: 4 us (data there), 96 us (waited for data)
    chunks = [[ev(0, 20)], [ev(20, 20)], [ev(40, 250)]]  # chunk 2 arrives at 290, after step 1 ended (204)
    assert fixed_step_gap_ms(steps, chunks, 1, 1) == pytest.approx(0.004)
    late = [[ev(0, 20)], [ev(20, 200)], [ev(40, 250)]]   # every step waited: no fixed cost measurable
    assert fixed_step_gap_ms(steps, late, 1, 1) == 0.0
