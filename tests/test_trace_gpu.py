"""Tracing a real kernel on the GPU: exact occurrence counts and order, filters, wrap, clock64,
arming rules, host cost. Each test first checks the kernel's output against a NumPy reference."""
from __future__ import annotations

import time

import numpy as np
import pytest

from argus_rt.regions import RegionTree
from argus_rt.trace import TraceConfig, TraceSession, layout, pair_intervals, region_stats

pytestmark = pytest.mark.gpu

from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cuda" / "nested_regions.cu"
TREE = RegionTree.load(ROOT / "examples" / "cuda" / "regions.json")
EX, A, B, INNER = (TREE[n].id for n in ("example", "example/stage_a", "example/stage_b", "example/stage_b/inner"))
CTAS, THREADS, ITERS, ROUNDS = 6, 96, 5, 16
WARPS = THREADS // 32


def reference(x: np.ndarray, iters: int, rounds: int) -> np.ndarray:
    """NumPy float64 model of nested_regions (fp32 FMAs on the GPU)."""
    x = x.astype(np.float64)
    for _ in range(rounds):
        x = x * 0.5 + 0.25
    acc = np.zeros_like(x)
    for _ in range(rounds):
        acc = acc * 0.75 + x
    for it in range(iters):
        for _ in range(rounds):
            acc = acc * 0.75 + (x + it)
        for _ in range(rounds):
            acc = acc * 0.5 + 1.0
    return acc


def expected_sequence(iters: int) -> list[tuple[int, int, int]]:
    """(kind, region_id, coord) recorded by every warp, in order."""
    none = layout.COORD_NONE
    seq = [(1, EX, none), (1, A, none), (2, A, none)]
    for it in range(iters):
        seq += [(1, B, it), (1, INNER, it), (2, INNER, it), (2, B, it)]
    return seq + [(2, EX, none)]


@pytest.fixture(scope="module")
def torch_cuda():
    import torch

    return torch


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    import os

    from argus_rt.kinds.cuda.build import CudaBuildSpec, build
    from argus_rt.launch import CubinModule

    os.environ.setdefault("ARGUS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    out = {}
    for mode in (0, 2):
        out[mode] = CubinModule.load(build(CudaBuildSpec(f"nested.m{mode}", [EXAMPLE], argus_mode=mode)).cubin)
    out["anchored"] = CubinModule.load(build(CudaBuildSpec(
        "nested.anchored", [EXAMPLE], argus_mode=2, defines={"ARGUS_TIMESTAMP": "ARGUS_TS_ANCHORED"})).cubin)
    return out


def run(torch, mod, n=None, iters=ITERS, threads=THREADS, ctas=CTAS, rounds=ROUNDS, timing=None):
    """Launch nested_regions on fresh random inputs and check it against the NumPy reference.
    ``timing``: a list that receives the launch's CUDA-event time in us."""
    n = ctas * threads - 7 if n is None else n  # a partial last CTA exercises the bounds check
    x = torch.rand(n, device="cuda") * 2 + 0.5
    out = torch.full((n,), float("nan"), device="cuda")
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    mod.launch("nested_regions", grid=ctas, block=threads, args=[out, x, np.int32(n), np.int32(iters), np.int32(rounds)])
    e1.record()
    torch.cuda.synchronize()
    if timing is not None:
        timing.append(e0.elapsed_time(e1) * 1e3)
    ref = reference(x.cpu().numpy(), iters, rounds)
    got = out.cpu().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)  # fp32 FMA chain vs float64
    return got


def test_trace_free_build_matches_reference(torch_cuda, modules):
    run(torch_cuda, modules[0])


def test_exact_counts_and_order(torch_cuda, modules):
    torch = torch_cuda
    sess = TraceSession(modules[2], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=64))
    sess.arm()
    run(torch, modules[2])
    trace = sess.decode(known_ids=[r.id for r in TREE])
    headers = trace.rings[["ring", "sm", "written", "claims"]].tolist()
    assert not trace.incomplete, trace.problems
    assert len(trace.rings) == CTAS * WARPS
    assert {int(w) for w in trace.rings["written"]} == {len(expected_sequence(ITERS))}, headers
    want = expected_sequence(ITERS)
    for ring in trace.rings:
        ev = trace.ring_events(int(ring["ring"]))
        got = list(zip(ev["kind"].tolist(), ev["region_id"].tolist(), ev["coord"].tolist()))
        assert got == want, f"ring {int(ring['ring'])}"
        assert int(ring["written"]) == len(want) and int(ring["dropped"]) == 0 and int(ring["claims"]) == 1
    iv = pair_intervals(trace)
    counts = {s.region_id: s.count for s in region_stats(iv)}
    nw = CTAS * WARPS
    assert counts == {EX: nw, A: nw, B: nw * ITERS, INNER: nw * ITERS}
    rows = iv.rows
    assert np.all(rows["end"] >= rows["start"])
    for r in rows[rows["region_id"] == INNER]:  # inner lies within its stage_b parent
        p = rows[int(r["parent"])]
        assert p["region_id"] == B and p["coord"] == r["coord"] and p["start"] <= r["start"] and r["end"] <= p["end"]
    ctas_seen = sorted({int(c) for c in trace.rings["cta"]})
    assert ctas_seen == list(range(CTAS))


def test_filters(torch_cuda, modules):
    torch = torch_cuda
    cfg = TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=64, cta_range=(2, 4))
    sess = TraceSession(modules[2], cfg)
    sess.arm(warp_mask=0b010)
    run(torch, modules[2])
    t = sess.decode()
    assert sorted(zip(t.rings["cta"].tolist(), t.rings["warp"].tolist())) == [(2, 1), (3, 1)]
    sess.arm(coord_window=(1, 3))
    run(torch, modules[2])
    t = sess.decode()
    assert len(t.rings) == 2 * WARPS
    for ring in t.rings:
        ev = t.ring_events(int(ring["ring"]))
        coords = sorted({c for c in ev["coord"].tolist() if c != layout.COORD_NONE})
        assert coords == [1, 2] and len(ev) == 4 + 4 * 2
    # SM filter: only warps that ran on even-numbered SMs record.
    sess.arm(sms=list(range(0, 256, 2)))
    run(torch, modules[2])
    t = sess.decode()
    assert all(int(s) % 2 == 0 for s in t.rings["sm"])


def test_wrap_is_counted(torch_cuda, modules):
    torch = torch_cuda
    sess = TraceSession(modules[2], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=8))
    sess.arm()
    run(torch, modules[2])
    t = sess.decode()
    total = len(expected_sequence(ITERS))
    assert t.incomplete and t.dropped == CTAS * WARPS * (total - 8)
    for ring in t.rings:
        ev = t.ring_events(int(ring["ring"]))
        got = list(zip(ev["kind"].tolist(), ev["region_id"].tolist(), ev["coord"].tolist()))
        assert got == expected_sequence(ITERS)[-8:]
    iv = pair_intervals(t)  # orphan ENDs of overwritten BEGINs are skipped, never mispaired
    assert iv.incomplete and set(iv.rows["region_id"].tolist()) <= {B, INNER}


def test_disarm_append_and_clock64(torch_cuda, modules):
    torch = torch_cuda
    sess = TraceSession(modules[2], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=128))
    sess.arm()
    run(torch, modules[2])
    first = sess.decode()
    n1, iv1 = len(first.events), len(pair_intervals(first))
    sess.disarm()
    run(torch, modules[2])
    assert len(sess.decode().events) == n1  # the disarmed launch recorded nothing
    sess.arm()
    run(torch, modules[2])
    run(torch, modules[2])
    t = sess.decode()
    assert len(t.events) == 2 * n1 and set(t.rings["claims"].tolist()) == {2}
    assert len(pair_intervals(t)) == 2 * iv1  # the second launch appended complete occurrences
    sess.arm(clock="clock64")
    run(torch, modules[2])
    iv = pair_intervals(sess.decode())
    assert iv.unit == "cycles" and np.all(iv.rows["duration"] > 0)


def test_warps_without_ring_are_counted(torch_cuda, modules):
    torch = torch_cuda
    sess = TraceSession(modules[2], TraceConfig(ctas=CTAS, threads_per_cta=32, capacity=64))  # too small
    sess.arm()
    run(torch, modules[2])
    t = sess.decode()
    assert t.unbuffered == CTAS * (WARPS - 1) and t.incomplete


def test_host_cost_per_traced_launch_is_below_1ms(torch_cuda, modules):
    torch = torch_cuda
    sess = TraceSession(modules[2], TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=64))
    x = torch.rand(CTAS * THREADS, device="cuda") + 0.5
    out = torch.empty_like(x)
    args = [out, x, np.int32(x.numel()), np.int32(ITERS), np.int32(ROUNDS)]
    costs = []
    for _ in range(300):
        t0 = time.perf_counter()
        sess.arm()
        modules[2].launch("nested_regions", grid=CTAS, block=THREADS, args=args)
        costs.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    assert np.median(costs) < 1e-3, f"median arm+launch host cost {np.median(costs) * 1e6:.1f} us"


def test_nvrtc_build_traces_the_same(torch_cuda):
    try:
        import cuda.bindings.nvrtc  # noqa: F401
    except ImportError:
        pytest.skip("cuda-python NVRTC bindings not installed")
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build
    from argus_rt.launch import CubinModule

    mod = CubinModule.load(build(CudaBuildSpec("nested.nvrtc", [EXAMPLE], argus_mode=2), backend="nvrtc").cubin)
    sess = TraceSession(mod, TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=64))
    sess.arm()
    run(torch_cuda, mod)
    t = sess.decode()
    assert len(t.events) == CTAS * WARPS * len(expected_sequence(ITERS))


# ---- timestamp variants: default (%globaltimer per record) and anchored (clock64 + anchors) ------
VARIANT_MODULE = {"globaltimer": 2, "anchored": "anchored"}


@pytest.mark.parametrize("variant", list(VARIANT_MODULE))
def test_exact_counts_and_order_per_timestamp_variant(torch_cuda, modules, variant):
    iters, rounds = 40, 200  # tens of us per warp: enough anchor span for the anchored decoder
    mod = modules[VARIANT_MODULE[variant]]
    sess = TraceSession(mod, TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=256, clock=variant))
    sess.arm()
    run(torch_cuda, mod, iters=iters, rounds=rounds)
    trace = sess.decode(known_ids=[r.id for r in TREE])
    assert trace.unit == "ns" and not trace.incomplete, trace.problems
    want = expected_sequence(iters)
    assert len(trace.rings) == CTAS * WARPS
    for ring in trace.rings:
        ev = trace.ring_events(int(ring["ring"]))
        assert list(zip(ev["kind"].tolist(), ev["region_id"].tolist(), ev["coord"].tolist())) == want
        assert np.all(np.diff(ev["time"].astype(np.int64)) >= 0), f"ring {int(ring['ring'])} time goes backwards"
    iv = pair_intervals(trace)
    nw = CTAS * WARPS
    assert {s.region_id: s.count for s in region_stats(iv)} == {EX: nw, A: nw, B: nw * iters, INNER: nw * iters}


def test_anchored_ns_durations_match_globaltimer_build(torch_cuda, modules):
    """On a ~1 ms kernel with few markers (marker cost < 1%), the anchored build's ns durations of
    the per-iteration region agree with the %globaltimer build's within 2%, and each build's
    whole-kernel span lies within the CUDA-event time of its launch (and above 90% of it)."""
    iters, rounds = 20, 15000
    mean_b, spans = {}, {}
    for variant, key in VARIANT_MODULE.items():
        mod = modules[key]
        sess = TraceSession(mod, TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=128, clock=variant))
        run(torch_cuda, mod, iters=2, rounds=rounds)  # warm-up launch, untraced
        sess.arm()
        timing = []
        run(torch_cuda, mod, iters=iters, rounds=rounds, timing=timing)
        trace = sess.decode()
        assert not trace.incomplete, trace.problems
        rows = pair_intervals(trace).rows
        mean_b[variant] = float(rows[rows["region_id"] == B]["duration"].mean())
        ex = rows[rows["region_id"] == EX]
        spans[variant] = (float(ex["end"].max()) - float(ex["start"].min())) / 1e3, timing[0]
    for variant, (span_us, event_us) in spans.items():
        # The CUDA-event time also holds launch latency and the warps' work outside the region, so
        # it bounds the traced span from above; 90% below catches a wrong cycles->ns rate. (Seen on
        # an H200: span 1427.5 us inside an event time of 1490.1 us for the globaltimer build.)
        assert 0.90 * event_us <= span_us <= 1.01 * event_us, \
            f"{variant}: trace span {span_us:.1f} us vs event {event_us:.1f} us"
    ratio = mean_b["anchored"] / mean_b["globaltimer"]
    assert abs(ratio - 1) <= 0.02, f"stage_b mean: anchored {mean_b['anchored']:.0f} ns vs globaltimer {mean_b['globaltimer']:.0f} ns"


# ---- the shared cursor's slow path (clock64, anchored) and fast path give one whole-warp record per marker --------
@pytest.mark.parametrize("variant", ["globaltimer", "clock64", "anchored"])
def test_converged_markers_are_whole_warp_records(torch_cuda, modules, variant):
    """The exact-sequence check, on the fast path (globaltimer) and the slow path (clock64 stamps, the anchored
    build): every warp records the expected sequence once (no extra lane-group markers: the removed fast markers'
    bf5d6b0 wrote 27 records per ring of 24), each by the whole warp."""
    from argus_rt.trace.decode import LANES_WHOLE_WARP

    mod = modules["anchored" if variant == "anchored" else 2]
    sess = TraceSession(mod, TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=64, clock=variant))
    sess.arm()
    run(torch_cuda, mod)
    trace = sess.decode(known_ids=[r.id for r in TREE])
    # this kernel can run in under the anchored clock's 6.4 us fit window, so its cycles->ns rate may be flagged
    # approximate (the fast build on the H200, 2026-12-02 at d8ef444: 2816 ns of anchors); counts and order do not use it
    problems = [p for p in trace.problems if not (variant == "anchored" and p.startswith("approximate:"))]
    assert problems == [], trace.problems
    want = expected_sequence(ITERS)
    assert len(trace.rings) == CTAS * WARPS
    assert {int(w) for w in trace.rings["written"]} == {len(want)}, trace.rings[["ring", "written"]].tolist()
    for ring in trace.rings:
        ev = trace.ring_events(int(ring["ring"]))
        assert list(zip(ev["kind"].tolist(), ev["region_id"].tolist(), ev["coord"].tolist())) == want
        assert set(ev["lanes"].tolist()) == {LANES_WHOLE_WARP}, f"ring {int(ring['ring'])}"
    nw = CTAS * WARPS
    iv = pair_intervals(trace)
    assert {s.region_id: s.count for s in region_stats(iv)} == {EX: nw, A: nw, B: nw * ITERS, INNER: nw * ITERS}
