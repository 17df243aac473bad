"""`argus compare` / ``argus_rt.compare`` / the MCP ``compare`` tool, on the CPU with stand-in
collections whose latencies vary per repeat (:mod:`noisy_trace`): clearly different versions differ,
identical ones are within noise, two repeats are insufficient, repeats are separate collections
reused from the workspace, incompatible region trees and qualifications are flagged per row, and
bad input is one line naming the value and the valid choices."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import argus_rt
from argus_rt.compare import (
    DIFFERS,
    INSUFFICIENT,
    SUMMARY_CHARS,
    WITHIN_NOISE,
    CompareError,
    compare_reports,
    noise_rule,
    trial_sampling,
)
from argus_rt.errors import ArgusInputError
from argus_rt.program import ProgramVersion
from argus_rt.regions import RegionTree
from argus_rt.report import Report
from argus_rt.tasks import PlanError, check_sampling
from noisy_trace import noisy_trace
from test_query import write_program_dir
from test_runtime_standins import demo_program, standins  # noqa: F401


@pytest.fixture
def noisy(standins):  # noqa: F811
    with noisy_trace():
        yield


def noisy_program(seed: int, shift_ns: int = 0, jitter_ns: int = 10, **standin) -> ProgramVersion:
    return demo_program(noise={"seed": seed, "shift_ns": shift_ns, "jitter_ns": jitter_ns}, **standin)


# ---- the rule itself --------------------------------------------------------------------------
def test_rule_on_plain_numbers():
    same = noise_rule([100, 104, 98, 101, 99], [101, 99, 100, 103, 98])
    assert same["verdict"] == WITHIN_NOISE and same["interval"][0] <= 0 <= same["interval"][1]
    apart = noise_rule([100, 104, 98, 101, 99], [150, 149, 153, 151, 148])
    assert apart["verdict"] == DIFFERS and apart["difference"] == 150 - 100 and apart["ratio"] == 1.5
    assert apart["a"] == {"n": 5, "median": 100.0, "min": 98.0, "max": 104.0, "interval": apart["a"]["interval"]}
    assert apart["a"]["interval"][0] <= 100 <= apart["a"]["interval"][1]
    two = noise_rule([1, 2], [50, 60])
    assert two["verdict"] == INSUFFICIENT and two["interval"] is None and two["difference"] == 55 - 1.5
    assert noise_rule([5, 5, 5], [5, 5, 5])["interval"] == [0.0, 0.0]  # identical values: within noise
    assert noise_rule([8, 8, 8], [4, 4, 4])["verdict"] == DIFFERS  # a deterministic count that changed
    assert noise_rule([0, 0, 0], [1, 1, 1])["ratio"] is None
    assert noise_rule([3, 1, 2], [9, 7, 8], seed=7) == noise_rule([3, 1, 2], [9, 7, 8], seed=7)  # seeded


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(st.lists(finite, min_size=3, max_size=8), st.floats(min_value=1e-3, max_value=1e6))
def test_a_shift_past_the_whole_spread_always_differs(a, extra):
    # every resampled median of B then lies above every resampled median of A
    shift = (max(a) - min(a)) + extra
    assert noise_rule(a, [x + shift for x in a], resamples=500)["verdict"] == DIFFERS


@settings(max_examples=40, deadline=None)
@given(st.lists(finite, min_size=3, max_size=8), st.randoms(use_true_random=False))
def test_the_same_values_in_another_order_are_within_noise(a, rnd):
    b = list(a)
    rnd.shuffle(b)
    result = noise_rule(a, b, resamples=500)
    assert result["verdict"] == WITHIN_NOISE and result["difference"] == 0


def test_trial_is_part_of_task_identity_and_trial_0_is_a_plain_query():
    assert check_sampling({"trial": 0}) == check_sampling({}) and trial_sampling(0) == {}
    assert check_sampling({"trial": 2})["trial"] == 2
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(PlanError, match="'trial' must be an int >= 0"):
            check_sampling({"trial": bad})
    from argus_rt.query import make_plan

    pv = demo_program()
    ids = [{t.id for t in make_plan(pv, "gemm", ["latency"], sampling=trial_sampling(i)).tasks.values()
            if t.kind == "collect"} for i in range(3)]
    assert len(set().union(*ids)) == 3  # three repeats: three distinct collections
    assert ids[0] == {t.id for t in make_plan(pv, "gemm", ["latency"]).tasks.values() if t.kind == "collect"}


# ---- runs through the query path ----------------------------------------------------------------
def test_clearly_different_versions_differ_and_repeats_are_separate_reused_runs(noisy, tmp_path):
    a, b = noisy_program(seed=1), noisy_program(seed=2, shift_ns=200)
    ws = tmp_path / "ws"
    cmp = argus_rt.compare(a, b, region="gemm", signals=["latency"], repeats=5, workspace=ws, devices=[""])
    p50 = cmp.row("latency", "main/gemm", "p50")
    assert p50["verdict"] == DIFFERS and 180 <= p50["difference"] <= 220 and p50["ratio"] > 1.3
    assert p50["interval"][0] > 0 and p50["a"]["n"] == p50["b"]["n"] == 5
    assert p50["a"]["min"] < p50["a"]["max"]  # the stand-in's noise: repeats are not copies
    assert len(set(p50["values"]["a"])) > 1
    assert cmp.row("latency", "main/gemm", "count")["verdict"] == WITHIN_NOISE  # 8 occurrences in both
    assert cmp.row("latency", "main/gemm/load", "p50")["verdict"] == DIFFERS
    assert cmp.execution["collect_runs"] == 10 and cmp.execution["reports"] == 10
    for side in ("a", "b"):  # each repeat of a version is its own collection
        runs = [t["collect"] for t in cmp.trials if t["version"] == side]
        assert len(runs) == 5 and len({tuple(r) for r in runs}) == 5
    assert any("one traced launch" in n for n in cmp.notes)
    doc = cmp.to_dict()
    assert doc["argus_compare_version"] == 1 and doc["rule"]["differs_if"] == "the interval excludes 0"
    json.dumps(doc)
    again = argus_rt.compare(a, b, region="gemm", signals=["latency"], repeats=5, workspace=ws, devices=[""])
    assert again.execution["collect_runs"] == 0  # every repeat reused from the workspace
    assert again.row("latency", "main/gemm", "p50") == p50
    more = argus_rt.compare(a, b, region="gemm", signals=["latency"], repeats=6, workspace=ws, devices=[""])
    assert more.execution["collect_runs"] == 2  # only repeat 6 of each version is new


def test_identical_latencies_are_within_noise(noisy, tmp_path):
    a = noisy_program(seed=1)
    b = noisy_program(seed=1, note="another version, the same latencies")
    assert a.id != b.id
    cmp = argus_rt.compare(a, b, region="gemm", signals=["latency", "instruction_mix"], repeats=4,
                           workspace=tmp_path / "ws", devices=[""])
    rows = [r for r in cmp.rows if r["metric"] is not None]
    assert rows and {r["verdict"] for r in rows} == {WITHIN_NOISE}
    assert cmp.row("latency", "main/gemm", "p50")["difference"] == 0
    assert cmp.row("instruction_mix", "main/gemm/mma", "FFMA")["qualification"] == "attributed"
    same = argus_rt.compare(a, a, region="gemm", signals=["latency"], repeats=3, workspace=tmp_path / "ws",
                            devices=[""])
    assert same.execution["collect_runs"] == 0 and any("same program version" in n for n in same.notes)


def test_two_repeats_are_insufficient(noisy, tmp_path):
    cmp = argus_rt.compare(noisy_program(1), noisy_program(2, shift_ns=500), region="gemm", signals="latency",
                           repeats=2, workspace=tmp_path / "ws", devices=[""])
    p50 = cmp.row("latency", "main/gemm", "p50")
    assert p50["verdict"] == INSUFFICIENT and p50["interval"] is None and p50["difference"] > 400
    assert {r["verdict"] for r in cmp.rows} == {INSUFFICIENT}


def _without_load(seed: int) -> ProgramVersion:
    """demo_program without the region main/gemm/load (its occurrences and PCs go elsewhere)."""
    base = noisy_program(seed)
    tree = RegionTree("demo")
    for name in ("main/gemm/mma", "main/epilogue"):
        tree.add(name)
    spec = dict(base.launch["standin"])
    spec["occurrences"] = [o for o in spec["occurrences"] if o[0] != "main/gemm/load"]
    spec["owners"] = [o for o in spec["owners"] if o[1] != "main/gemm/load"]
    return ProgramVersion.from_sources("demo", {"demo.cu": "// synthetic"}, kind="standin", launch={"standin": spec},
                                       regions=tree, compiler="none")


def test_incompatible_region_trees_are_flagged_per_row(noisy, tmp_path):
    a, b = noisy_program(1), _without_load(2)
    ws = tmp_path / "ws"
    cmp = argus_rt.compare(a, b, region="gemm", signals=["latency", "instruction_mix"], repeats=3, workspace=ws,
                           devices=[""])
    load = cmp.row("latency", "main/gemm/load", "p50")
    assert load["verdict"] == "incompatible: region main/gemm/load is only in version A" and "difference" not in load
    assert cmp.row("latency", "main/gemm", "p50")["verdict"] in (DIFFERS, WITHIN_NOISE)  # observed: comparable
    # attributed counts: with main/gemm/load gone, the BAR PC it shared with mma is all mma's; the
    # same quantity no longer, so every attributed row says so (<unmapped> too)
    why = ("incompatible: the region trees differ (only in A: main/gemm/load; only in B: none), so PC "
           "attribution splits differently")
    for region in ("main/gemm", "main/gemm/mma", "<unmapped>"):
        assert {r["verdict"] for r in cmp.rows if r["signal"] == "instruction_mix" and r["region"] == region} == {why}
    assert any("the region trees differ" in n for n in cmp.notes)
    # the asked region itself in one version only: one row per signal, and nothing is run
    only = argus_rt.compare(a, b, region="load", signals=["latency"], repeats=3, workspace=ws, devices=[""])
    assert [(r["signal"], r["verdict"]) for r in only.rows] == [
        ("latency", "incompatible: region 'load' is only in version A")]
    assert only.execution["collect_runs"] == 0
    with pytest.raises(CompareError, match="unknown region 'nope' in program 'demo'; valid regions: main, "):
        argus_rt.compare(a, b, region="nope", workspace=ws)


def test_values_qualified_differently_are_not_compared():
    a, b = noisy_program(1), noisy_program(2)

    def reports(qualification, n=3):
        return [Report(query={"signals": ["latency"]}, values=[
            {"signal": "latency", "region": "main/gemm", "metric": "p50", "value": 500.0 + i, "unit": "ns",
             "qualification": qualification, "scope": {}}]) for i in range(n)]

    cmp = compare_reports(a, b, reports("observed"), reports("attributed"), region="gemm")
    row = cmp.row("latency", "main/gemm", "p50")
    assert row["verdict"] == "incompatible: qualified observed in A but attributed in B" and "difference" not in row
    assert compare_reports(a, b, reports("observed"), reports("observed")).rows[0]["verdict"] == WITHIN_NOISE
    gone = compare_reports(a, b, reports("observed"), [Report(query={}, values=[], unanswered=[
        {"signal": "latency", "reason": "collect:trace failed: no GPU"}])] * 3)
    assert gone.rows[0]["verdict"] == "unanswered: version B: collect:trace failed: no GPU"


def test_bad_input_is_one_line_naming_the_value(tmp_path):
    a = demo_program()
    cases = [({"repeats": 0}, "repeats 0 must be an integer 1..100"),
             ({"repeats": "5"}, "repeats '5' must be an integer"),
             ({"signals": ["latncy"]}, "unknown signal 'latncy'; valid signals: "),
             ({"signals": []}, "needs at least one signal; valid signals: "),
             ({"scope": {"thread": 1}}, "valid fields")]
    for kwargs, message in cases:
        with pytest.raises(ArgusInputError, match=message):
            argus_rt.compare(a, a, **{"region": "gemm", **kwargs}, workspace=tmp_path / "ws")
    with pytest.raises(ArgusInputError, match=r"version 'nope' is not a path, a shipped example \(.*cuda"):
        argus_rt.compare("nope", a, workspace=tmp_path / "ws")
    with pytest.raises(ArgusInputError, match="unknown program version 'pv-0000'"):
        argus_rt.compare("pv-0000", a, workspace=tmp_path / "ws")


# ---- the command line -------------------------------------------------------------------------
def test_cli_compare_writes_json_and_prints_the_table(noisy, tmp_path, capsys):
    from argus_rt.cli import main

    pa = write_program_dir(tmp_path / "a", noisy_program(1))
    pb = write_program_dir(tmp_path / "b", noisy_program(2, shift_ns=300))
    out = tmp_path / "cmp.json"
    rc = main(["compare", str(pa), str(pb), "--region", "gemm", "--signals", "latency", "--repeats", "3",
               "--json", str(out), "--workspace", str(tmp_path / "ws"), "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0 and "differs" in text and "percentile-bootstrap" in text
    doc = json.loads(out.read_text())
    row = next(r for r in doc["rows"] if (r["region"], r["metric"]) == ("main/gemm", "p50"))
    assert row["verdict"] == DIFFERS and doc["query"]["repeats"] == 3
    assert main(["compare", str(pa), str(pb), "--repeats", "0", "--workspace", str(tmp_path / "ws")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["argus compare: repeats 0 must be an integer 1..100 (at least 3 for a verdict)"]
    assert main(["compare", str(pa), str(pb), "--region", "nope", "--workspace", str(tmp_path / "ws")]) == 2
    assert "valid regions: main" in capsys.readouterr().err


# ---- the MCP tool -----------------------------------------------------------------------------
def test_mcp_compare_is_compact_and_refuses_an_unknown_region(noisy, tmp_path):
    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import Client

    from argus_rt.mcp_server import build_server

    spec = noisy_program(1).launch["standin"]
    program = write_program_dir(tmp_path / "prog", noisy_program(1))
    server = build_server(tmp_path / "ws")

    async def session():
        async with Client(server) as client:
            fork = await client.call_tool("fork", {"program": str(program),
                                                   "launch": {"standin": {**spec, "noise": {"seed": 2, "shift_ns": 250,
                                                                                           "jitter_ns": 10}}}})
            child = json.loads(fork.content[0].text)["id"]
            result = await client.call_tool("compare", {"version_a": str(program), "version_b": child,
                                                        "region": "gemm", "signals": ["latency", "instruction_mix"],
                                                        "repeats": 3})
            assert not result.is_error, result.content
            doc = json.loads(result.content[0].text)
            assert doc["detail"] == "summary" and len(json.dumps(doc)) <= SUMMARY_CHARS
            assert doc["versions"]["b"]["id"] == child and doc["query"]["repeats"] == 3
            assert all("values" not in r for r in doc["rows"])  # no per-repeat lists in the summary
            assert all("(inclusive)" not in str(r.get("metric")) for r in doc["rows"])
            p50 = next(r for r in doc["rows"] if (r["signal"], r["region"], r["metric"]) == ("latency", "main/gemm", "p50"))
            assert p50["verdict"] == DIFFERS and doc["rows"][0]["verdict"] == DIFFERS  # what differs comes first
            assert doc["counts"]["differs"] >= 1 and "excludes 0" in doc["rule"]
            full = json.loads((await client.call_tool("compare", {"version_a": str(program), "version_b": child,
                                                                  "region": "gemm", "repeats": 3,
                                                                  "detail": "full"})).content[0].text)
            assert full["execution"]["collect_runs"] == 0 and full["rows"][0]["values"]["a"]
            bad = await client.call_tool("compare", {"version_a": str(program), "version_b": child, "region": "nope"})
            assert bad.is_error and "unknown region 'nope'" in bad.content[0].text
            assert "valid regions: main" in bad.content[0].text
            bad = await client.call_tool("compare", {"version_a": str(program), "version_b": child, "repeats": 0})
            assert bad.is_error and "repeats 0 must be an integer 1..100" in bad.content[0].text

    anyio.run(session)
