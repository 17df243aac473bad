"""Region tracing of Triton kernels on the CPU: the TTGIR transform of the example (every marker
found, the traced TTGIR compiles for sm_90), decoding of hand-made device buffers, and
`latency` answered end to end through the runtime with a CPU stand-in for the GPU collect."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton")

from argus_rt.backends.base import register_backend  # noqa: E402
from argus_rt.kinds.triton import probes as P  # noqa: E402
from argus_rt.kinds.triton import region_trace as RT  # noqa: E402
from argus_rt.program import load_program  # noqa: E402
from tests.backend_swap import StandinTritonTraceBase, standin_triton_trace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "triton"
N_CTAS = 3
T0 = 10**12  # a plausible %globaltimer value (ns)


@pytest.fixture(scope="module")
def program():
    return load_program(EXAMPLE)


@pytest.fixture(scope="module")
def variant(program):
    from argus_rt.kinds.triton.discovery import program_ttgir

    ttgir, iterations = program_ttgir(program)
    return RT.make_region_trace(ttgir, iterations)


def _encode(sites, n_ctas: int, times: dict, sm_of=lambda c: 100 + c) -> np.ndarray:
    """A device buffer written the way the traced kernel writes it (independent of the decoder):
    ``times[(cta, site index, trip)] = ns``; slots missing from ``times`` stay 0 (not reached)."""
    words = RT.HEADER_WORDS + RT.WORDS_PER_RECORD * sum(s.slots for s in sites)
    buf = np.zeros((n_ctas, words), dtype=np.int64)
    for c in range(n_ctas):
        buf[c, 0] = sm_of(c) + 1
    for (c, k, trip), ns in times.items():
        s = sites[k]
        w = 1 + 2 * (s.first_slot + trip)
        buf[c, w] = (1 if s.kind == "begin" else 2) << 32 | s.region_id
        buf[c, w + 1] = ns
    return buf.ravel()


def _example_times(sites, n_ctas: int, trips: int, durations: dict) -> dict:
    """Program-order timestamps for the example: each region occurrence lasts ``durations[name]`` ns
    plus 1 ns per CTA index, children nested inside parents."""
    idx = {(s.kind, s.name): k for k, s in enumerate(sites)}
    times = {}
    for c in range(n_ctas):
        t = T0 + 10**6 * c
        times[(c, idx[("begin", "tma_matmul")], 0)] = t
        times[(c, idx[("begin", "tma_matmul/kloop")], 0)] = t + 10
        t += 20
        for it in range(trips):
            for child in ("tma_matmul/kloop/load", "tma_matmul/kloop/mma"):
                times[(c, idx[("begin", child)], it)] = t
                t += durations[child] + c
                times[(c, idx[("end", child)], it)] = t
                t += 5
        times[(c, idx[("end", "tma_matmul/kloop")], 0)] = t
        times[(c, idx[("begin", "tma_matmul/epilogue")], 0)] = t + 5
        t += 5 + durations["tma_matmul/epilogue"] + c
        times[(c, idx[("end", "tma_matmul/epilogue")], 0)] = t
        times[(c, idx[("end", "tma_matmul")], 0)] = t + 3
    return times


DURATIONS = {"tma_matmul/kloop/load": 40, "tma_matmul/kloop/mma": 700, "tma_matmul/epilogue": 2500}


# ---- the transform ------------------------------------------------------------------------------
def test_transform_finds_every_marker_of_the_example(program, variant):
    names = {r.name for r in program.regions}
    assert len(names) == 5
    assert sorted((s.kind, s.name) for s in variant.sites) == sorted((k, n) for n in names for k in ("begin", "end"))
    assert all(s.region_id == program.regions[s.name].id for s in variant.sites)
    in_loop = {s.name for s in variant.sites if s.loop_line is not None}
    assert in_loop == {"tma_matmul/kloop/load", "tma_matmul/kloop/mma"}
    assert all(s.slots == (8 if s.loop_line is not None else 1) for s in variant.sites)
    assert variant.words_per_cta == 1 + 2 * (6 + 4 * 8)
    # one timer read per marker, placed right after it
    lines = variant.ttgir.splitlines()
    markers = [i for i, t in enumerate(lines) if "argus:begin" in t or "argus:end" in t]
    assert len(markers) == 10
    for i in markers:
        assert "%globaltimer" in lines[i + 2] and "_tag = arith.constant" in lines[i + 1]
    assert variant.descriptor()["arg"]["words_per_cta"] == variant.words_per_cta


def test_traced_ttgir_compiles_for_sm90_and_marker_only_build_is_unchanged(program, variant, tmp_path):
    import importlib.util

    compiled = P.compile_ttgir(variant.ttgir, tmp_path, "region_traced")  # GPUTarget("cuda", 90, 32)
    ptx = compiled.asm["ptx"]
    assert ptx.count("%globaltimer") == 10 and ptx.count("pmevent.mask") == 30
    assert ".param .u64" in ptx and "tma_matmul_kernel_param_6" in ptx  # the extra buffer argument
    spec = importlib.util.spec_from_file_location("argus_rt_example_tma", EXAMPLE / "tma_matmul.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    marker_only = mod.compile_reference().asm["ptx"]
    assert "%globaltimer" not in marker_only and marker_only.count("pmevent.mask") == 30


def test_transform_refuses_bad_input(variant):
    with pytest.raises(RT.RegionTraceError, match="iterations must be a positive int, got 0"):
        RT.make_region_trace(variant.ttgir, 0)
    plain = "\n".join(t for t in variant.ttgir.splitlines() if "argus:" not in t and "argus_rt" not in t)
    plain = plain.replace(f", {RT.REGION_ARG}: !tt.ptr<i64>", "")
    with pytest.raises(RT.RegionTraceError, match="has no Argus markers"):
        RT.make_region_trace(plain, 8)


# ---- decoding -----------------------------------------------------------------------------------
def test_decoding_a_hand_made_buffer_gives_the_right_intervals(variant):
    trips = 8
    buf = _encode(variant.sites, N_CTAS, _example_times(variant.sites, N_CTAS, trips, DURATIONS))
    cols = {k: np.asarray(v) for k, v in RT.decode_region_buffer(buf, N_CTAS, variant.sites).items()}
    ids = {s.name: s.region_id for s in variant.sites}
    dur = cols["end"] - cols["start"]
    for c in range(N_CTAS):
        for name, d in DURATIONS.items():
            sel = (cols["cta"] == c) & (cols["region_id"] == ids[name])
            assert sorted(dur[sel].tolist()) == [d + c] * (trips if "kloop/" in name else 1)
        top = (cols["cta"] == c) & (cols["region_id"] == ids["tma_matmul"])
        assert top.sum() == 1 and cols["start"][top][0] == T0 + 10**6 * c
        assert set(cols["sm"][cols["cta"] == c].tolist()) == {100 + c}
    loads = cols["region_id"] == ids["tma_matmul/kloop/load"]
    assert sorted(set(cols["coord"][loads].tolist())) == list(range(trips))
    assert set(cols["coord"][cols["region_id"] == ids["tma_matmul"]].tolist()) == {RT.COORD_NONE}
    assert set(cols["warp"].tolist()) == {0} and len(dur) == N_CTAS * (3 + 2 * trips)


def test_decoding_pairs_by_program_order_when_timestamps_tie(variant):
    """Two markers within one timer tick: the slots' program order, not the clock, pairs them."""
    times = _example_times(variant.sites, 1, 8, {k: 0 for k in DURATIONS})
    cols = RT.decode_region_buffer(_encode(variant.sites, 1, times), 1, variant.sites)
    assert len(cols["start"]) == 3 + 2 * 8


def test_fewer_trips_than_slots_is_not_an_error(variant):
    times = _example_times(variant.sites, 2, 5, DURATIONS)
    cols = RT.decode_region_buffer(_encode(variant.sites, 2, times), 2, variant.sites)
    assert len(cols["start"]) == 2 * (3 + 2 * 5)


def test_decoding_rejects_bad_buffers(variant):
    sites = variant.sites
    good = _example_times(sites, N_CTAS, 8, DURATIONS)
    idx = {(s.kind, s.name): k for k, s in enumerate(sites)}
    with pytest.raises(RT.RegionTraceError, match=r"buffer has 5 words; 3 CTAs x 77 words expected"):
        RT.decode_region_buffer(np.zeros(5, dtype=np.int64), N_CTAS, sites)
    buf = _encode(sites, N_CTAS, good)
    buf[1 * variant.words_per_cta] = 0
    with pytest.raises(RT.RegionTraceError, match="CTA 1 recorded nothing"):
        RT.decode_region_buffer(buf, N_CTAS, sites)
    buf = _encode(sites, N_CTAS, good)
    buf[1] = 0x7 << 32  # CTA 0, slot 0: a wrong tag
    with pytest.raises(RT.RegionTraceError, match=r"CTA 0 slot 0: tag 0x700000000, expected .*begin tma_matmul\)"):
        RT.decode_region_buffer(buf, N_CTAS, sites)
    missing_end = {k: v for k, v in good.items() if k != (2, idx[("end", "tma_matmul/epilogue")], 0)}
    with pytest.raises(RT.RegionTraceError, match=r"CTA 2: end of 'tma_matmul' .* open region is tma_matmul/epilogue"):
        RT.decode_region_buffer(_encode(sites, N_CTAS, missing_end), N_CTAS, sites)
    backwards = dict(good)
    backwards[(0, idx[("end", "tma_matmul/epilogue")], 0)] = T0 - 1
    with pytest.raises(RT.RegionTraceError, match="CTA 0: 'tma_matmul/epilogue' ends at"):
        RT.decode_region_buffer(_encode(sites, N_CTAS, backwards), N_CTAS, sites)
    never_ended = {k: v for k, v in good.items() if k != (0, idx[("end", "tma_matmul")], 0)}
    with pytest.raises(RT.RegionTraceError, match=r"CTA 0: region\(s\) \['tma_matmul'\] begun but never ended"):
        RT.decode_region_buffer(_encode(sites, N_CTAS, never_ended), N_CTAS, sites)


# ---- end to end through the runtime, with a CPU stand-in for the GPU collect --------------------
class StandinRegionTrace(StandinTritonTraceBase):
    """CPU stand-in for the Triton 'trace' adapter's region-tracing config (tests only): it builds the
    real traced variant (transform), fills its buffer as the kernel would, and publishes the document
    with the real decoder."""

    def collect(self, ctx):
        from argus_rt.kinds.triton.discovery import program_ttgir

        assert ctx.config == {}, ctx.config
        ttgir, iterations = program_ttgir(ctx.program)
        v = RT.make_region_trace(ttgir, iterations)
        buf = _encode(v.sites, N_CTAS, _example_times(v.sites, N_CTAS, iterations, DURATIONS))
        doc = RT.region_intervals_document(RT.decode_region_buffer(buf, N_CTAS, v.sites), launches=1,
                                           notes=["CPU stand-in"])
        return {"region_intervals": ctx.write_json("region_intervals", doc)}


if os.environ.get("ARGUS_TRITON_REGION_STANDIN_WORKER") == "1":  # spawned workers import this module
    register_backend(StandinRegionTrace(), kind="triton", replace=True)


@pytest.fixture
def standin_trace():
    with standin_triton_trace(StandinRegionTrace(), "ARGUS_TRITON_REGION_STANDIN_WORKER"):
        yield


def test_latency_is_answered_end_to_end_with_a_stand_in_collect(program, standin_trace, tmp_path):
    from argus_rt.planner import plan_query
    from argus_rt.report import Report
    from argus_rt.runtime.scheduler import Runtime
    from argus_rt.workspace import Workspace

    plan = plan_query(program, "tma_matmul", ["latency"])
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_workers=2) as rt:
        res = rt.run(plan)
        assert res.ok, [(r.op, r.error) for r in res.failed()]
        report = Report.from_run(plan, res)
    values = report.select("latency")
    assert {v["qualification"] for v in values} == {"observed"}
    mean = {v["region"]: v["value"] for v in values if v["metric"] == "mean"}
    count = {v["region"]: v["value"] for v in values if v["metric"] == "count"}
    assert set(mean) == {r.name for r in program.regions}
    for name, d in DURATIONS.items():  # durations d + cta index, CTAs 0..2: mean d + 1
        assert mean[name] == pytest.approx(d + 1)
    assert count["tma_matmul/kloop/mma"] == N_CTAS * 8 and count["tma_matmul"] == N_CTAS
    assert all(mean[n] > 0 for n in mean)
