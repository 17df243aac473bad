"""Fuzzing the decoder: arbitrary bytes and mutated valid traces give a result or a TraceError,
never another exception, and a decoded trace always pairs or fails cleanly.

Properties of "no silent numbers" (see test_mutating_* below): one field of a valid buffer set to
any other value gives a TraceError, a flagged (incomplete) trace, or statistics bit-identical to
the unmutated buffer's. Record timestamps and anchor values have no redundant copy in the layout,
so a plausible other value there describes a different run; for those the property is that no
occurrence is lost and no duration exceeds the decoder's plausibility bound unflagged.

Examples per property: a small number by default (CI); ARGUS_HYPOTHESIS_PROFILE=thorough runs
10,000 of each.
"""
from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus_rt.trace import TraceConfig, TraceError, decode, layout, pair_intervals, region_stats
from argus_rt.trace.decode import MAX_PLAUSIBLE_SPAN
from tests.ring_writer import RingWriter

PROFILES = {"ci": None, "thorough": 10_000}  # None: each property's own CI count


def examples(ci: int) -> int:
    """Examples to run for a property whose CI count is ``ci`` (ARGUS_HYPOTHESIS_PROFILE picks)."""
    name = os.environ.get("ARGUS_HYPOTHESIS_PROFILE", "ci")
    if name not in PROFILES:
        raise ValueError(f"ARGUS_HYPOTHESIS_PROFILE={name!r}; valid: {', '.join(PROFILES)}")
    return PROFILES[name] or ci


def fuzz_settings(ci: int):
    return settings(max_examples=examples(ci), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

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


@fuzz_settings(300)
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


@fuzz_settings(400)
@given(valid_then_mutated(), st.booleans())
def test_mutated_traces(raw, with_ids):
    _decode_and_pair(raw, IDS if with_ids else None)


@fuzz_settings(200)
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


@fuzz_settings(300)
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


@fuzz_settings(200)
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


# ---- no silent numbers: one mutated field of a valid buffer -----------------------------------
CLOCKS = ("globaltimer", "clock64", "anchored")
PROP_CAP = 64  # no ring wraps: the unmutated buffers decode with nothing flagged


def prop_config(clock: str) -> TraceConfig:
    return TraceConfig(ctas=2, threads_per_cta=64, capacity=PROP_CAP, clock=clock, seq=9)


@st.composite
def valid_buffers(draw, clock: str):
    """(config, RingWriter, claimed rings) of a valid, unflagged trace: well-nested occurrences in
    1-4 rings. Anchored rings get anchors over >= 6.4 us, so each converts with its own rate."""
    cfg = prop_config(clock)
    w = RingWriter(cfg, ghz=draw(st.sampled_from([1.98, 1.41, 0.75])),
                   clock_offsets={sm: draw(st.integers(0, 2**40)) for sm in range(4)})
    anchored = clock == "anchored"
    rings = draw(st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True))
    for ring in rings:
        cta, warp = divmod(ring, 2)
        sm = draw(st.integers(0, 3))
        t = draw(st.integers(0, 10**12))
        stack: list[tuple[int, int]] = []
        pairs = draw(st.integers(4 if anchored else 1, 10))
        opened = 0
        while opened < pairs or stack:
            t += draw(st.integers(2000, 5000) if anchored else st.integers(1, 400))
            if opened < pairs and (not stack or draw(st.booleans())) and len(stack) < 3:
                rid, coord = draw(st.sampled_from(IDS)), draw(st.integers(0, 3))
                stack.append((rid, coord))
                w.emit(cta, warp, sm, "begin", rid, t, coord=coord)
                opened += 1
            else:
                rid, coord = stack.pop()
                w.emit(cta, warp, sm, "end", rid, t, coord=coord)
    return cfg, w, sorted(rings)


def duration_stats(iv) -> list[tuple]:
    """Per region: count, total, mean, p50, p99, min, max (the numbers a report shows)."""
    return [(s.region_id, s.count, s.total, s.mean, s.p50, s.p99, s.min, s.max) for s in
            sorted(region_stats(iv), key=lambda s: s.region_id)]


def outcome(raw: bytes, cfg: TraceConfig):
    """("error" | "flagged" | "clean", intervals when clean)."""
    try:
        trace = decode(raw, cfg, known_ids=IDS)
        iv = pair_intervals(trace)
    except TraceError:
        return "error", None
    if trace.incomplete or iv.incomplete:
        return "flagged", None
    return "clean", iv


def _baseline(cfg, w):
    kind, iv = outcome(w.bytes(), cfg)
    assert kind == "clean", decode(w.bytes(), cfg).problems
    return iv


def _header(w, ring: int) -> np.ndarray:
    off = ring * layout.ring_stride(w.config.capacity, w.config.clock_mode)
    return w.raw[off: off + layout.RING_HEADER_DTYPE.itemsize].view(layout.RING_HEADER_DTYPE)


@fuzz_settings(300)
@given(st.sampled_from(CLOCKS).flatmap(lambda c: valid_buffers(c)), st.data())
def test_mutating_a_ring_header_field_is_flagged_or_changes_nothing(buf, data):
    cfg, w, rings = buf
    before = duration_stats(_baseline(cfg, w))
    ring = data.draw(st.sampled_from(rings))
    name = data.draw(st.sampled_from(layout.RING_HEADER_DTYPE.names))
    header = _header(w, ring)
    old = int(header[name][0])
    header[name] = data.draw(st.integers(0, 2**32 - 1).filter(lambda v: v != old))
    kind, iv = outcome(w.bytes(), cfg)
    assert kind != "clean" or duration_stats(iv) == before, (name, old, int(header[name][0]))


RECORD_FIELDS = ("region_id", "coord", "stamp", "time", "kind")


@fuzz_settings(300)
@given(st.sampled_from(CLOCKS).flatmap(lambda c: valid_buffers(c)), st.data())
def test_mutating_a_record_is_flagged_or_loses_nothing(buf, data):
    cfg, w, rings = buf
    base = _baseline(cfg, w)
    before = duration_stats(base)
    ring = data.draw(st.sampled_from(rings))
    written = int(_header(w, ring)["written"][0])
    slot = data.draw(st.integers(0, PROP_CAP - 1))  # slots past written too: they must stay empty
    off = ring * layout.ring_stride(cfg.capacity, cfg.clock_mode) + layout.header_bytes(cfg.clock_mode)
    rec = w.raw[off: off + PROP_CAP * layout.RECORD_DTYPE.itemsize].view(layout.RECORD_DTYPE)[slot: slot + 1]
    field = data.draw(st.sampled_from(RECORD_FIELDS))
    stamp = int(rec["stamp"][0])
    if field in ("region_id", "coord"):
        rec[field] = data.draw(st.integers(0, 2**32 - 1).filter(lambda v: v != int(rec[field][0])))
    elif field == "stamp":
        rec["stamp"] = data.draw(st.integers(0, 2**64 - 1).filter(lambda v: v != stamp))
    elif field == "time":  # the kind bits stay: a timestamp of another run, or a damaged one
        new = data.draw(st.integers(0, layout.TIME_MASK).filter(lambda v: v != stamp & layout.TIME_MASK))
        rec["stamp"] = (stamp & ~layout.TIME_MASK) | new
    else:
        new = data.draw(st.integers(0, 3).filter(lambda k: k != stamp >> layout.KIND_SHIFT))
        rec["stamp"] = (stamp & layout.TIME_MASK) | (new << layout.KIND_SHIFT)
    kind, iv = outcome(w.bytes(), cfg)
    if kind != "clean":
        return
    assert slot < written, "a record past written went unflagged"
    after = duration_stats(iv)
    if field != "time":
        assert after == before, (field, slot)
    else:  # same occurrences; their durations are what the (other) stamps say, and plausible
        assert [a[:2] for a in after] == [b[:2] for b in before]
        assert int(iv.rows["duration"].max()) <= MAX_PLAUSIBLE_SPAN[iv.unit]


@fuzz_settings(300)
@given(valid_buffers("anchored"), st.data())
def test_mutating_an_anchor_is_flagged_or_loses_nothing(buf, data):
    cfg, w, rings = buf
    before = duration_stats(_baseline(cfg, w))
    ring = data.draw(st.sampled_from(rings))
    off = ring * layout.ring_stride(cfg.capacity, cfg.clock_mode) + layout.ANCHOR_FIRST_OFFSET
    anchors = w.raw[off: off + layout.ANCHORS_DTYPE.itemsize].view(layout.ANCHORS_DTYPE)
    name = data.draw(st.sampled_from(layout.ANCHORS_DTYPE.names))
    old = int(anchors[name][0])
    anchors[name] = data.draw(st.one_of(st.integers(0, 2**64 - 1), st.integers(-10**6, 10**6).map(
        lambda d: (old + d) % 2**64)).filter(lambda v: v != old))
    kind, iv = outcome(w.bytes(), cfg)
    if kind == "clean":  # an anchor has no second copy: the rate may differ, within plausible clocks
        after = duration_stats(iv)
        assert [a[:2] for a in after] == [b[:2] for b in before]
        assert int(iv.rows["duration"].max()) <= MAX_PLAUSIBLE_SPAN["ns"]


# ---- raw trace files ----------------------------------------------------------------------------
def _raw_file_bytes(compressed: bool) -> bytes:
    """A valid raw trace as save_raw writes it (np.savez), or deflated (np.savez_compressed)."""
    import io
    import json

    w = RingWriter(CFG)
    w.emit(0, 1, 2, "begin", IDS[0], 10)
    w.emit(0, 1, 2, "end", IDS[0], 30)
    meta = {"layout_version": layout.LAYOUT_VERSION, "config": CFG.to_json(), "unbuffered": 0}
    bio = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(bio, buffer=w.raw, meta=np.array(json.dumps(meta)))
    return bio.getvalue()


RAW_FILES = {c: _raw_file_bytes(c) for c in (False, True)}


@fuzz_settings(300)
@given(st.booleans(), st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_raw_files_raise_only_trace_errors(tmp_path_factory, compressed, flips):
    from argus_rt.trace import load_raw

    data = bytearray(RAW_FILES[compressed])
    for where, value in flips:
        data[min(int(where * len(data)), len(data) - 1)] = value
    path = tmp_path_factory.getbasetemp() / f"fuzz-{os.getpid()}.npz"
    path.write_bytes(bytes(data))
    try:
        trace = load_raw(path, known_ids=IDS)
    except TraceError:
        return
    pair_intervals(trace, strict=False)


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=10)
_CONFIG_KEYS = ("ctas", "threads_per_cta", "capacity", "clock", "sms", "cta_range", "warp_mask", "coord_window",
                "seq", "unknown_key")


@fuzz_settings(200)
@given(st.dictionaries(st.sampled_from(_CONFIG_KEYS), _JSON, max_size=10), _JSON, _JSON, st.booleans())
def test_any_metadata_gives_a_trace_or_a_trace_error(tmp_path_factory, config_changes, unbuffered, version, keep):
    """Bad metadata (any JSON in config fields, unbuffered, layout_version) is a TraceError, never
    a TypeError or AttributeError."""
    import io
    import json

    from argus_rt.trace import load_raw

    config = {**CFG.to_json(), **config_changes}
    meta = {"layout_version": layout.LAYOUT_VERSION if keep else version, "config": config, "unbuffered": unbuffered}
    bio = io.BytesIO()
    np.savez(bio, buffer=RingWriter(CFG).raw, meta=np.array(json.dumps(meta)))
    path = tmp_path_factory.getbasetemp() / f"meta-{os.getpid()}.npz"
    path.write_bytes(bio.getvalue())
    try:
        load_raw(path)
    except TraceError:
        pass
