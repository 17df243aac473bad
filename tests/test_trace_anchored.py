"""Anchored timestamps (-DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED): cycles -> ns on synthetic rings, the
variant's nvcc build, and the guard that the default build does not depend on the new macro."""
from __future__ import annotations

import re

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, decode, layout, pair_intervals
from argus_rt.trace.anchors import MIN_SPAN_NS, MIN_USABLE_SPAN_NS, TIMER_STEP_NS, RingAnchors, fit_rates
from argus_rt.trace.errors import ClockConversionError, TraceConfigError
from argus_rt.trace.session import TraceSession
from tests.ring_writer import RingWriter
from toolchain import needs_nvcc

RID = 0x1234ABCD


def _write_pairs(w: RingWriter, cta: int, warp: int, sm: int, start_ns: int, durations, gap_ns: int = 100):
    """BEGIN/END pairs back to back from ``start_ns``; returns the true (begin, end) times."""
    truth, t = [], start_ns
    for i, d in enumerate(durations):
        w.emit(cta, warp, sm, "begin", RID, t, coord=i)
        w.emit(cta, warp, sm, "end", RID, t + int(d), coord=i)
        truth.append((t, t + int(d)))
        t += int(d) + gap_ns
    return truth


def _check_close(trace, ring, truth, t0_slack=TIMER_STEP_NS):
    ev = trace.ring_events(ring)
    got = ev["time"].astype(np.int64).reshape(-1, 2)
    want = np.array(truth, dtype=np.int64)[-len(got):]
    dur_got, dur_want = got[:, 1] - got[:, 0], want[:, 1] - want[:, 0]
    # Durations: the rate is within 1%; one cycle of rounding each side.
    assert np.all(np.abs(dur_got - dur_want) <= 0.01 * dur_want + 2), (dur_got[:4], dur_want[:4])
    # Absolute times: the first anchor's timer is up to one step early, then the 1% rate error.
    since = want - want[0, 0]
    assert np.all(np.abs(got - want) <= t0_slack + 0.01 * since + 2)


@pytest.mark.parametrize("ghz", [1.98, 1.41, 0.75])
def test_known_frequency_converts_within_one_percent(ghz):
    cfg = TraceConfig(ctas=2, threads_per_cta=64, capacity=256, clock="anchored", seq=7)
    w = RingWriter(cfg, ghz=ghz, clock_offsets={3: 10**12, 5: 77})
    rng = np.random.default_rng()
    truths = {}
    for cta, sm in ((0, 3), (1, 5)):
        for warp in range(2):
            durs = rng.integers(50, 2000, size=60)
            truths[cfg.ring_of(cta, warp)] = _write_pairs(w, cta, warp, sm, int(rng.integers(10**9, 2 * 10**9)), durs)
    trace = decode(w.bytes(), cfg)
    assert trace.unit == "ns" and not trace.incomplete, trace.problems
    for ring, truth in truths.items():
        _check_close(trace, ring, truth)
    assert len(pair_intervals(trace)) == 4 * 60


def test_ring_with_close_anchors_uses_its_sm_line():
    cfg = TraceConfig(ctas=1, threads_per_cta=64, capacity=256, clock="anchored", seq=1)
    w = RingWriter(cfg, ghz=1.6, clock_offsets={2: 5 * 10**9})
    long_truth = _write_pairs(w, 0, 0, 2, 10**6, [400] * 100)  # ~50 us of anchors on SM 2
    short_truth = _write_pairs(w, 0, 1, 2, 10**6 + 3000, [300, 250])  # 4 records: anchors < 1 us apart
    a = RingAnchors(1, 2, *(int(x) for x in _anchors(w, cfg, 1)))
    assert a.span_ns < MIN_SPAN_NS
    trace = decode(w.bytes(), cfg)
    assert not trace.incomplete, trace.problems
    rates, _ = fit_rates([RingAnchors(r, 2, *(int(x) for x in _anchors(w, cfg, r))) for r in (0, 1)])
    assert rates[0].source == "ring" and rates[1].source == "sm"
    _check_close(trace, 0, long_truth)
    _check_close(trace, 1, short_truth)


def test_sm_without_long_span_uses_launch_rate():
    cfg = TraceConfig(ctas=2, threads_per_cta=32, capacity=256, clock="anchored", seq=1)
    w = RingWriter(cfg, ghz=1.755, clock_offsets={0: 123456789, 9: 42})
    long_truth = _write_pairs(w, 0, 0, 0, 5 * 10**6, [500] * 80)
    short_truth = _write_pairs(w, 1, 0, 9, 5 * 10**6, [700, 900, 300])
    trace = decode(w.bytes(), cfg)
    assert not trace.incomplete, trace.problems
    rates, _ = fit_rates([RingAnchors(r, sm, *(int(x) for x in _anchors(w, cfg, r))) for r, sm in ((0, 0), (1, 9))])
    assert rates[1].source == "launch"
    _check_close(trace, 0, long_truth)
    _check_close(trace, 1, short_truth)


def test_wrapped_ring_keeps_converting_with_latest_anchor():
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=16, clock="anchored", seq=3)
    w = RingWriter(cfg, ghz=1.98, clock_offsets={1: 999})
    truth = _write_pairs(w, 0, 0, 1, 10**7, np.full(50, 600))  # 100 records into 16 slots
    anc = _anchors(w, cfg, 0)
    assert anc[2] > anc[0]  # the latest anchor moved with the wraps
    trace = decode(w.bytes(), cfg)
    assert any("wrapped" in p for p in trace.problems)
    assert not any(p.startswith("approximate") for p in trace.problems)
    _check_close(trace, 0, truth)


def test_too_close_anchors_are_flagged_approximate():
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=256, clock="anchored", seq=1)
    w = RingWriter(cfg, ghz=1.98)
    _write_pairs(w, 0, 0, 0, 10**6, [1500] * 3, gap_ns=50)  # anchors ~3 us apart: > 640 ns, < 6.4 us
    trace = decode(w.bytes(), cfg)
    assert trace.incomplete
    assert any(p.startswith("approximate") and "may be off by more than 1%" in p for p in trace.problems)


def test_anchors_far_too_close_raise():
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=256, clock="anchored", seq=1)
    w = RingWriter(cfg, ghz=1.98)
    _write_pairs(w, 0, 0, 0, 10**6, [100, 100], gap_ns=20)
    with pytest.raises(ClockConversionError, match=f"below the {MIN_USABLE_SPAN_NS} ns"):
        decode(w.bytes(), cfg)


def test_inverted_anchors_raise():
    a = RingAnchors(4, 1, first_timer=10_000, first_clock=50_000, last_timer=20_000, last_clock=40_000)
    with pytest.raises(ClockConversionError, match="ring 4"):
        fit_rates([a])


def test_anchored_layout_sizes():
    cfg = TraceConfig(ctas=3, threads_per_cta=96, capacity=32, clock="anchored")
    assert cfg.buffer_bytes == 9 * (64 + 16 * 32)
    assert cfg.unit == "ns"
    assert TraceConfig(ctas=3, threads_per_cta=96, capacity=32).buffer_bytes == 9 * (32 + 16 * 32)


class _Module:
    def __init__(self, anchored: bool) -> None:
        self.anchored = anchored

    def global_address(self, name):
        if name == "argus_ts_anchored" and self.anchored:
            return (0x1000, 4)
        raise RuntimeError(f"cuModuleGetGlobal({name!r}): named symbol not found")

    def write_global(self, name, data, stream=None, blocking=True):
        pass


def test_session_refuses_clock_the_build_cannot_write():
    with pytest.raises(TraceConfigError, match="ARGUS_TS_ANCHORED"):
        TraceSession(_Module(False), TraceConfig(ctas=1, threads_per_cta=32, clock="anchored"), device="cpu")
    with pytest.raises(TraceConfigError, match="clock must be 'anchored'"):
        TraceSession(_Module(True), TraceConfig(ctas=1, threads_per_cta=32), device="cpu")
    sess = TraceSession(_Module(True), TraceConfig(ctas=1, threads_per_cta=32, clock="anchored"), device="cpu")
    with pytest.raises(TraceConfigError, match="cannot change clock"):
        sess.arm(clock="clock64")


def _anchors(w: RingWriter, cfg: TraceConfig, ring: int) -> tuple[int, int, int, int]:
    off = ring * layout.ring_stride(cfg.capacity, cfg.clock_mode) + layout.ANCHOR_FIRST_OFFSET
    a = w.raw[off : off + 32].view(layout.ANCHORS_DTYPE)[0]
    return int(a["first_timer"]), int(a["first_clock"]), int(a["last_timer"]), int(a["last_clock"])


# ---- nvcc: the variant builds; the default build ignores the macro --------------------------------
@needs_nvcc
@pytest.mark.parametrize("warp_state", ["0", "1"])
def test_anchored_variant_builds_with_predicated_timer_reads(warp_state):
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    res = build(CudaBuildSpec(f"refexec.anchored{warp_state}", [SOURCES["reference_execution"]], argus_mode=2,
                              defines={"REFEXEC_WARP_STATE": warp_state, "ARGUS_TIMESTAMP": "ARGUS_TS_ANCHORED"}))
    assert b"argus_ts_anchored" in res.cubin.read_bytes()
    lines = sass_lines(disassemble(res.cubin, "refexec_compute"))
    timer = [i for i, ln in enumerate(lines) if "SR_GLOBALTIMER" in ln]
    # Per marker: a clock read, the timer only for anchor records: under a predicate, or in a block that a
    # predicated branch right before it skips. Other timer reads are the claim's anchor: directly after its
    # clock read.
    predicated = [i for i in timer if "@" in lines[i].split("SR_GLOBALTIMER")[0]
                  or any(re.search(r"@!?U?P\d BRA", lines[j]) for j in range(max(0, i - 3), i))]
    assert predicated, timer
    for i in set(timer) - set(predicated):
        assert "SR_CLOCK" in lines[i - 1], lines[i - 1 : i + 1]
    # Records start after the 64-byte anchored header (visible in the shared-cursor build, whose anchored markers all
    # take the slow path: it adds 0x40 to the ring header's address, a 64-bit add with carry out).
    assert warp_state == "1" or any(re.search(r"IADD3 R\d+, P\d, R\d+, 0x40, RZ", ln) for ln in lines)


@needs_nvcc
def test_default_build_is_unchanged_by_explicit_default_timestamp():
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble
    from tests.test_cuda_build import SOURCES

    src = [SOURCES["reference_execution"]]
    plain = build(CudaBuildSpec("refexec.ts.default", src, argus_mode=2))
    explicit = build(CudaBuildSpec("refexec.ts.explicit", src, argus_mode=2,
                                   defines={"ARGUS_TIMESTAMP": "ARGUS_TS_GLOBALTIMER"}))
    anchored = build(CudaBuildSpec("refexec.ts.anchored", src, argus_mode=2,
                                   defines={"ARGUS_TIMESTAMP": "ARGUS_TS_ANCHORED"}))
    assert disassemble(plain.cubin, "refexec_compute") == disassemble(explicit.cubin, "refexec_compute")
    assert disassemble(plain.cubin, "refexec_compute") != disassemble(anchored.cubin, "refexec_compute")
    assert b"argus_ts_anchored" not in plain.cubin.read_bytes()


@needs_nvcc
def test_bad_timestamp_macro_is_rejected():
    from argus_rt.kinds.cuda.build import CompileError, CudaBuildError, CudaBuildSpec, build
    from tests.test_cuda_build import SOURCES

    with pytest.raises((CompileError, CudaBuildError), match="ARGUS_TIMESTAMP must be"):
        build(CudaBuildSpec("refexec.ts.bad", [SOURCES["reference_execution"]], argus_mode=2,
                            defines={"ARGUS_TIMESTAMP": "7"}))


def test_appended_ring_from_another_sm_is_flagged_not_fatal():
    cfg = TraceConfig(ctas=2, threads_per_cta=32, capacity=256, clock="anchored", seq=5)
    w = RingWriter(cfg, ghz=1.5, clock_offsets={0: 10**9, 1: 10})  # SM 1's counter is far behind SM 0's
    truth0 = _write_pairs(w, 0, 0, 0, 10**6, [800] * 40)
    _write_pairs(w, 1, 0, 0, 10**6, [800] * 40)
    w.claim(1, 0, 1, time=2 * 10**6)  # a second launch runs CTA 1 on SM 1 and appends
    _write_pairs(w, 1, 0, 1, 2 * 10**6, [800] * 40)
    trace = decode(w.bytes(), cfg)
    assert any(p.startswith("approximate") and "appended by 2 CTA instances" in p for p in trace.problems)
    _check_close(trace, 0, truth0)
