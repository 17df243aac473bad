"""Forced-wait probes and the traced reference on loops whose trip count differs per CTA (causal
attention: the key loop below the diagonal runs a number of trips that depends on the program id, the
diagonal loop two in every CTA).

The device buffers are built here with NumPy from the record dtypes (``ITERATION_WAIT_DTYPE``,
``PROBE_RECORD_DTYPE``), not with the decoders' helpers: CTA c runs c trips of loop 0 and 2 of loop 1.
Checked: the documents keep exactly each CTA's trips, medians are over the CTAs that ran the
iteration and say how many; a hole in a CTA's trips is a recording failure naming the CTA and
iteration; at join time a probe must be recorded by exactly the CTAs whose loop runs its iteration,
an iteration no CTA runs is "not reached", and each probe joins its own loop's wait."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from argus_rt.kinds.triton import probes as P
from argus_rt.kinds.triton.layout import ITERATION_WAIT_DTYPE, PROBE_RECORD_DTYPE
from argus_rt.synthesis import EvidenceError
from argus_rt.tasks import Task
from tests.test_synthesis import program, run_rule

N_CTAS, ITERS = 8, 16
WAIT_LINES = (112, 209)  # loop 0: below the diagonal (CTA c runs c trips); loop 1: the diagonal (2 trips)


def trips(cta: int, loop: int) -> int:
    return cta if loop == 0 else 2


def wait_ns(loop: int, cta: int, it: int) -> int:
    return 1000 + 100 * it + 10 * cta + 5000 * loop


def probe_ns(op: str, cta: int, it: int) -> int:
    return 300 + 7 * cta + it + (50 if op == "k1" else 0)


def traced_buffer(n_trips=trips) -> np.ndarray:
    """The traced reference's buffer: per CTA, per loop, ITERS records; CTA c writes trips 0 .. t-1."""
    rec = np.zeros((N_CTAS, len(WAIT_LINES), ITERS), dtype=ITERATION_WAIT_DTYPE)
    for c in range(N_CTAS):
        for j in range(len(WAIT_LINES)):
            for t in range(n_trips(c, j)):
                begin = 10**12 + 10**6 * c + 10**4 * t + 10**3 * j
                rec[c, j, t] = (begin, begin + wait_ns(j, c, t))
    words = rec.view(np.int64).ravel()
    # the layout make_iteration_trace writes: CTA slice, then loop block, then trip record
    c, j, t = 5, 1, 1
    at = c * len(WAIT_LINES) * ITERS * 2 + j * ITERS * 2 + t * 2
    assert words[at + 1] - words[at] == wait_ns(j, c, t)
    return words


def probe_buffer(op: str, it: int, ctas) -> np.ndarray:
    rec = np.zeros(N_CTAS, dtype=PROBE_RECORD_DTYPE)
    for c in ctas:
        issue = 2 * 10**12 + 10**5 * c
        rec[c] = (issue, issue + probe_ns(op, c, it), 40 + c, 40 + c + 2 * probe_ns(op, c, it), c % 2)
    return rec.view(np.int64).ravel()


def test_traced_reference_document_keeps_each_cta_s_trips():
    buf = traced_buffer()
    doc = P.iteration_waits_document(buf, N_CTAS, ITERS, wait="w", launch=0, wait_lines=WAIT_LINES)
    cols = {k: np.asarray(v) for k, v in doc["columns"].items()}
    assert len(cols["cta"]) == sum(trips(c, j) for c in range(N_CTAS) for j in (0, 1)) == 28 + 16
    assert doc["ctas"] == N_CTAS and doc["loops"] == [{"loop": 0, "wait_line": 112}, {"loop": 1, "wait_line": 209}]
    for c in range(N_CTAS):
        for j in (0, 1):
            mine = (cols["cta"] == c) & (cols["loop"] == j)
            assert cols["iteration"][mine].tolist() == list(range(trips(c, j)))  # a prefix, nothing else
            assert set(cols["trips"][mine].tolist()) <= {trips(c, j)}
    assert doc["trips"]["trips"] == [trips(c, j) for c in range(N_CTAS) for j in (0, 1)]  # CTA 0's zero too
    assert (P.observed_trips(buf, N_CTAS, ITERS, loops=2) == [[c, 2] for c in range(N_CTAS)]).all()
    stats = P.iteration_wait_stats(buf, N_CTAS, ITERS, loops=2, loop=0)
    assert sorted(stats) == list(range(N_CTAS - 1))  # iterations 7..15 of loop 0: no CTA runs them
    for it, s in stats.items():
        ran = [c for c in range(N_CTAS) if c > it]
        assert s == {"median_ns": float(np.median([wait_ns(0, c, it) for c in ran])), "ctas": len(ran),
                     "of_ctas": N_CTAS}
    assert P.iteration_waits(buf, N_CTAS, ITERS, loops=2, loop=1) == {
        it: float(np.median([wait_ns(1, c, it) for c in range(N_CTAS)])) for it in (0, 1)}


def test_a_hole_in_a_cta_s_trips_is_a_recording_failure():
    buf = traced_buffer().reshape(N_CTAS, 2, ITERS, 2).copy()
    buf[5, 0, 2] = 0  # CTA 5 runs trips 0..4 of loop 0; trip 2 lost
    with pytest.raises(P.ProbeError, match=r"CTA 5 did not record iteration 2 of loop 0 but recorded iteration 3"):
        P.iteration_waits_document(buf.ravel(), N_CTAS, ITERS, wait_lines=WAIT_LINES)
    buf = traced_buffer().reshape(N_CTAS, 2, ITERS, 2).copy()
    buf[3, 1, 0, 0] = 0  # begin lost, end kept
    with pytest.raises(P.ProbeError, match=r"CTA 3, loop 1, iteration 0 has an end but no begin"):
        P.observed_trips(buf.ravel(), N_CTAS, ITERS, loops=2)
    buf = traced_buffer().reshape(N_CTAS, 2, ITERS, 2).copy()
    buf[6, 0, 4, 1] = buf[6, 0, 4, 0] - 1
    with pytest.raises(P.ProbeError, match=r"CTA 6, loop 0, iteration 4: the wait ends before it begins"):
        P.observed_trips(buf.ravel(), N_CTAS, ITERS, loops=2)


def test_probe_document_has_the_ctas_that_ran_the_iteration():
    buf = probe_buffer("k0", 3, range(4, N_CTAS))  # iteration 3 of loop 0: CTAs 4..7
    doc = P.op_events_document(buf, N_CTAS, 0xDF328CD6, 3, launch=1)
    assert doc["ctas"] == N_CTAS and doc["recorded"] == 4
    assert doc["columns"]["cta"] == [4, 5, 6, 7] and doc["columns"]["launch"] == [1] * 4
    assert [e - i for i, e in zip(doc["columns"]["issue"], doc["columns"]["complete"])] == \
        [probe_ns("k0", c, 3) for c in range(4, N_CTAS)]
    lat = P.probe_latencies(buf, N_CTAS)
    assert lat["recorded"] == 4 and lat["latency_ns_median"] == np.median([probe_ns("k0", c, 3) for c in range(4, 8)])
    empty = P.op_events_document(np.zeros(N_CTAS * P.WORDS_PER_CTA, dtype=np.int64), N_CTAS, 1, 14)
    assert empty["recorded"] == 0 and empty["columns"]["cta"] == []  # evidence too: synthesis decides


def test_check_probe_ctas():
    assert P.check_probe_ctas("k0", 3, {4, 5}, {0: {4, 5}, 1: {4, 5}}, 8)
    assert not P.check_probe_ctas("k0", 14, set(), {0: set(), 1: set()}, 8)  # not reached
    with pytest.raises(P.ProbeError, match=r"launch 1 was recorded by 1 of 8 CTAs.*CTA 5 runs iteration 3 but did not"):
        P.check_probe_ctas("k0", 3, {4, 5}, {0: {4, 5}, 1: {4}}, 8)


# ---- the join, through the synthesis rules -------------------------------------------------------------
SITES = [{"op_id": "k0", "kind": "tma_load", "region": "main/load", "completion": {"consumer_wait_line": 112}},
         {"op_id": "k1", "kind": "tma_load", "region": "main/load", "completion": {"consumer_wait_line": 209}},
         {"op_id": "q", "kind": "tma_load", "region": "main/load", "completion": {"consumer_wait_line": None}}]


def _reference_facts(tmp_path, pv, launches=2):
    collect = Task(kind="collect", op="trace", program=pv.variant_of("traced").id, device="gpu",
                   config={"reference": "iteration_waits"})
    docs = [P.iteration_waits_document(traced_buffer(), N_CTAS, ITERS, wait="w", launch=la, wait_lines=WAIT_LINES)
            for la in range(launches)]
    doc = dict(docs[0], columns={k: sum((d["columns"][k] for d in docs), []) for k in docs[0]["columns"]},
               trips={k: sum((d["trips"][k] for d in docs), []) for k in docs[0]["trips"]}, launches=launches)
    task = Task(kind="synthesize", op="iteration_waits", program=pv.id, deps=(collect.id,),
                config={"signal": "iteration_waits"})
    return task, run_rule(tmp_path, "iteration_waits", task, {collect: {"iteration_waits": doc}})


def _join(tmp_path, recorded: dict[tuple[str, int], list[int]], scope=None, launches=2):
    pv = program()
    ref, ref_facts = _reference_facts(tmp_path, pv)
    deps, lookup = {ref: {"facts": ref_facts}}, {pv.id: pv}
    for (op, it), ctas in recorded.items():
        ppv = pv.variant_of("probe", op_id=op, iteration=it)
        lookup[ppv.id] = ppv
        t = Task(kind="collect", op="trace", program=ppv.id, device="gpu", config={"probe": {"op_id": op, "iteration": it}})
        docs = [P.op_events_document(probe_buffer(op, it, ctas), N_CTAS, 1, it, launch=la) for la in range(launches)]
        cols = {k: sum((d["columns"][k] for d in docs), []) for k in docs[0]["columns"]}
        cols["op_id"] = [op] * len(cols["cta"])
        deps[t] = {"op_events": {"format": "argus.op_events/1", "clock": "ns", "columns": cols,
                                 "launches": launches, "ctas": N_CTAS, "recorded": len(ctas)}}
    sites = Task(kind="control", op="async_discovery", program=pv.id, region="main")
    deps[sites] = {"async_sites": {"format": "argus.async_sites/1", "sites": SITES}}
    task = Task(kind="synthesize", op="async_completion_latency", program=pv.id, region="main", scope=scope or {},
                deps=tuple(t.id for t in deps), config={"signal": "async_completion_latency", "qualification": "derived"})
    facts = run_rule(tmp_path, "async_completion_latency", task, deps, programs=lookup)
    return ref_facts, {(v["join"]["op_id"], v["join"]["iteration"]): v for v in facts["values"]}


def test_iteration_wait_facts_are_medians_over_the_ctas_that_ran(tmp_path):
    _, facts = _reference_facts(tmp_path, program())
    by = {v["metric"]: v for v in facts["values"]}
    assert "line112:wait@7" not in by and "line209:wait@2" not in by  # no CTA runs them: no value
    v = by["line112:wait@3"]
    assert v["value"] == np.median([wait_ns(0, c, 3) for c in range(4, 8)]) and v["samples"] == 4 * 2
    assert "over 4 of 8 CTAs (the others do not run this iteration)" in v["notes"]
    assert by["line209:wait@1"]["join"]["ctas"] == 8
    loops = facts["extra"]["loops"]
    assert [lp["wait_line"] for lp in loops] == [112, 209]
    assert loops[0]["trips_by_cta"] == {str(c): c for c in range(N_CTAS)}
    assert loops[0]["ctas_by_iteration"]["0"] == 7 and facts["extra"]["ctas"] == N_CTAS


def test_each_probe_joins_its_own_loop_and_unreached_iterations_are_reported(tmp_path):
    recorded = {("k0", 3): list(range(4, 8)), ("k0", 14): [], ("k0", 0): list(range(1, 8)),
                ("k1", 1): list(range(8)), ("q", 0): list(range(8))}
    _, got = _join(tmp_path, recorded)
    v = got[("k0", 3)]
    assert v["value"] == pytest.approx(np.mean([probe_ns("k0", c, 3) for c in range(4, 8)]))
    assert v["join"]["reference_wait_ns"] == np.median([wait_ns(0, c, 3) for c in range(4, 8)])
    assert v["join"]["ctas"] == 4 and v["join"]["of_ctas"] == 8 and v["join"]["reached"]
    assert "over 4 of 8 CTAs (the CTAs whose loop runs iteration 3)" in v["notes"]
    assert got[("k0", 0)]["join"]["ctas"] == 7  # CTA 0 runs no trip below the diagonal
    # the diagonal loop's probe joins the diagonal loop's wait, not the other loop's iteration 1
    assert got[("k1", 1)]["join"]["reference_wait_ns"] == np.median([wait_ns(1, c, 1) for c in range(8)])
    unreached = got[("k0", 14)]
    assert unreached["value"] is None and unreached["samples"] == 0 and unreached["join"]["reached"] is False
    assert unreached["notes"][0].startswith("not reached: no CTA runs iteration 14 of the loop waiting at TTGIR line 112")
    assert got[("q", 0)]["join"]["reference_wait_ns"] is None  # a load before the loops: no traced wait


def test_a_probe_recorded_by_the_wrong_ctas_is_refused_at_join(tmp_path):
    with pytest.raises(EvidenceError, match=r"probe k0@3: launch 0 was recorded by 5 of 8 CTAs, the traced reference "
                                            r"runs iteration 3 of that loop in 4 \(CTA 3 recorded it but does not run"):
        _join(tmp_path, {("k0", 3): list(range(3, 8))})
    with pytest.raises(EvidenceError, match=r"CTA 4 runs iteration 3 but did not record it"):
        _join(tmp_path, {("k0", 3): list(range(5, 8))})
    with pytest.raises(EvidenceError, match=r"probe k1@0: launch 0 was recorded by 0 of 8 CTAs"):
        _join(tmp_path, {("k1", 0): []})  # every CTA runs it: zero records is a failed probe, not "not reached"
    with pytest.raises(EvidenceError, match=r"probe k0@9: launch 0 was recorded by 1 of 8 CTAs.*in 0"):
        _join(tmp_path, {("k0", 9): [7]})  # no CTA runs iteration 9 below the diagonal


def test_scopes_narrow_the_check_to_the_chosen_ctas_not_the_sms(tmp_path):
    _, got = _join(tmp_path, {("k0", 3): list(range(4, 8))}, scope={"ctas": [0, 1, 2, 3]})
    assert got[("k0", 3)]["join"]["reached"] is False  # in scope, no CTA runs iteration 3
    _, got = _join(tmp_path, {("k0", 3): list(range(4, 8))}, scope={"sms": [0]})  # CTAs 4, 6 ran on SM 0
    assert got[("k0", 3)]["value"] == pytest.approx(np.mean([probe_ns("k0", c, 3) for c in (4, 6)]))


# ---- discovery on the causal corpus program: which iterations are planned ------------------------------
@pytest.fixture(scope="module")
def causal():
    pytest.importorskip("triton")
    from argus_rt.kinds.triton.async_sites import discover
    from argus_rt.kinds.triton.program import program_ttgir
    from argus_rt.program import load_program

    root = Path(__file__).resolve().parent.parent
    ttgir, iterations = program_ttgir(load_program(root / "examples/triton_corpus/attention/argus_program.causal.json"))
    return ttgir, discover(ttgir, None, iterations=iterations)


def test_causal_discovery_plans_the_diagonal_loop_s_two_trips_only(causal):
    ttgir, d = causal
    loads = [s for s in d.sites if s.kind == "tma_load"]
    lines = P.traced_wait_lines(d, kinds=("tma_load",))
    assert len(lines) == 2  # both call sites of the helper: two loops, each traced
    below = [s for s in loads if s.completion.consumer_wait_line == lines[0]]
    diag = [s for s in loads if s.completion.consumer_wait_line == lines[1]]
    assert len(below) == len(diag) == 2
    # below the diagonal the bound depends on the program id: every iteration up to launch.iterations
    assert all(s.completion.loop_trips is None and s.iterations == list(range(d.iterations)) for s in below)
    # on the diagonal [m*BLOCK_M, (m+1)*BLOCK_M) step BLOCK_N: 2 trips in every CTA, so no probe for 2..15
    assert all(s.completion.loop_trips == 2 and s.iterations == [0, 1] for s in diag)
    with pytest.raises(P.ProbeError, match=r"iteration 2 is not served.*valid iterations: \[0, 1\]"):
        P.make_forced_wait_probe(ttgir, d, diag[0].op_id, 2)
    # the dots of the diagonal loop are planned for its two trips too, and joined to its dot wait
    dots = [s for s in d.sites if s.kind == "wgmma"]
    assert len(dots) == 4 and sorted(len(s.iterations) for s in dots) == [2, 2, d.iterations, d.iterations]
    assert all(s.completion.loop_trips == 2 for s in dots if len(s.iterations) == 2)
    every = P.traced_wait_lines(d)  # every family: per loop the TMA consumer's wait and the dots' wait
    assert len(every) == 4 and set(lines) < set(every)
    assert {s.completion.consumer_wait_line for s in dots} == set(every) - set(lines)
    assert P.make_iteration_trace(ttgir, d).count("%globaltimer") == 8
    traced = P.make_iteration_trace(ttgir, d, kinds=("tma_load",))
    assert traced.count("%globaltimer") == 4  # before and after each loop's consumer wait
    per_loop = 2 * d.iterations
    assert f"%argus_words = arith.constant {2 * per_loop} : i32" in traced  # two loop blocks per CTA
    assert f"%argus_l1_offb = arith.constant {per_loop} : i32" in traced  # loop 1's block follows loop 0's
    trips = {"cta": [0, 1, 0, 1], "loop": [0, 0, 1, 1], "trips": [0, 2, 2, 2], "launch": [0] * 4}
    P.check_static_trips(d, lines, trips, d.iterations)
    trips["trips"][3] = 1
    with pytest.raises(P.ProbeError, match=r"CTA 1 ran 1 trip\(s\) of loop 1 .* whose bounds give 2 in every CTA"):
        P.check_static_trips(d, lines, trips, d.iterations)
