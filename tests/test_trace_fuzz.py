"""Fuzzing the decoder: arbitrary bytes and mutated valid traces give a result or a TraceError,
never another exception, and a decoded trace always pairs or fails cleanly."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus_rt.trace import TraceConfig, TraceError, decode, layout, pair_intervals, region_stats
from argus_rt.trace.synth import RingWriter

CFG = TraceConfig(ctas=2, threads_per_cta=64, capacity=8, seq=5)
IDS = [0x0A0A0A0A, 0x0B0B0B0B]


def _decode_and_pair(raw, known=None) -> None:
    try:
        trace = decode(raw, CFG, known_ids=known)
    except TraceError:
        return
    for strict in (True, False):
        try:
            iv = pair_intervals(trace, strict=strict)
        except TraceError:
            assert strict
            continue
        assert np.all(iv.rows["end"] >= iv.rows["start"])
        region_stats(iv)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=0, max_size=CFG.buffer_bytes + 64))
def test_random_bytes(data):
    _decode_and_pair(data)


@st.composite
def valid_then_mutated(draw):
    w = RingWriter(CFG)
    t = 0
    for _ in range(draw(st.integers(0, 30))):
        cta, warp = draw(st.integers(0, 1)), draw(st.integers(0, 1))
        kind = draw(st.sampled_from(["begin", "end"]))
        t += draw(st.integers(0, 50))
        w.emit(cta, warp, draw(st.integers(0, 3)), kind, draw(st.sampled_from(IDS)), t, coord=draw(st.integers(0, 3)))
    raw = np.frombuffer(w.bytes(), dtype=np.uint8).copy()
    for _ in range(draw(st.integers(0, 6))):
        pos = draw(st.integers(0, raw.size - 1))
        raw[pos] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, 3))
    return raw[: raw.size - cut * 17]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_then_mutated(), st.booleans())
def test_mutated_traces(raw, with_ids):
    _decode_and_pair(raw, IDS if with_ids else None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 40)), min_size=1, max_size=40))
def test_well_nested_sequences_pair_exactly(spans):
    """Any properly nested sequence (built from a random walk) pairs into exactly its occurrences."""
    w = RingWriter(TraceConfig(ctas=1, threads_per_cta=32, capacity=128, seq=1))
    t, stack, expected = 0, [], 0
    for push, dt in spans:
        t += dt
        if push or not stack:
            rid = IDS[len(stack) % 2]
            stack.append(rid)
            w.emit(0, 0, 0, "begin", rid, t, coord=len(stack))
        else:
            w.emit(0, 0, 0, "end", stack[-1], t, coord=len(stack))
            stack.pop()
            expected += 1
    while stack:
        t += 1
        w.emit(0, 0, 0, "end", stack[-1], t, coord=len(stack))
        stack.pop()
        expected += 1
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=128, seq=1)
    iv = pair_intervals(decode(w.bytes(), cfg))
    assert len(iv) == expected and not iv.incomplete
    assert layout.KIND_BEGIN == 1


def _slow_rows(trace):
    from argus_rt.trace import intervals as iv_mod

    saved = iv_mod._pair_fast
    iv_mod._pair_fast = lambda events: None  # force the event-by-event loop
    try:
        return pair_intervals(trace, strict=False).rows
    finally:
        iv_mod._pair_fast = saved


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.integers(0, 2), st.integers(0, 1)), max_size=60))
def test_fast_pairing_equals_the_loop(steps):
    """Where the vectorised path accepts a trace, its rows equal the loop's, field for field."""
    cfg = TraceConfig(ctas=2, threads_per_cta=64, capacity=64, seq=3)
    w = RingWriter(cfg)
    stacks = {r: [] for r in range(4)}
    t = 0
    for ring, push, coord, rid in steps:
        t += 1
        cta, warp = divmod(ring, 2)
        stack = stacks[ring]
        if push or not stack:
            stack.append((IDS[rid], coord))
            w.emit(cta, warp, ring, "begin", IDS[rid], t, coord=coord)
        else:
            r_id, c = stack.pop()
            w.emit(cta, warp, ring, "end", r_id, t, coord=c)
    for ring, stack in stacks.items():  # close what is open: a well-formed trace
        cta, warp = divmod(ring, 2)
        while stack:
            t += 1
            r_id, c = stack.pop()
            w.emit(cta, warp, ring, "end", r_id, t, coord=c)
    trace = decode(w.bytes(), cfg)
    from argus_rt.trace.intervals import _pair_fast

    fast = _pair_fast(trace.events)
    assert fast is not None  # well-formed traces take the vectorised path
    assert np.array_equal(fast, _slow_rows(trace))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_then_mutated())
def test_fast_pairing_rejects_or_agrees_on_mutated_traces(raw):
    from argus_rt.trace.intervals import _pair_fast

    try:
        trace = decode(raw, CFG)
    except TraceError:
        return
    fast = _pair_fast(trace.events)
    if fast is not None:
        assert np.array_equal(fast, _slow_rows(trace))
