"""The optimisation client (examples/agent_client) on the CPU.

* the search and both policies over a synthetic cost model (tests/test_agent_client_standins.py),
  budget 25: trial accounting, failed candidates, held-out shapes never seen by the search, and
  policy (b) turning the knob its diagnosis names;
* candidates as forks: the module's constants and the launch agree, the fork compiles for sm_90;
* the evidence rules and the kernel_time synthesis on hand-written inputs;
* the whole client over stdio (``argus mcp`` with the stand-in backends): trials.json, table, plot,
  the record written through benchmarks/record.py (into a temporary root), and its refusals.

The cost model's numbers are invented: these tests check the client's mechanics, never whether
region evidence helps on a GPU.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

anyio = pytest.importorskip("anyio")

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(ROOT))

from examples.agent_client import evidence, kernel_time  # noqa: E402
from examples.agent_client.__main__ import command_line, record_results  # noqa: E402
from examples.agent_client.kernels import KERNELS, OVERRIDE_HEADER, KernelSpecError, shape_label, split_shapes  # noqa: E402
from examples.agent_client.output import result_rows, speedup_table, verdict  # noqa: E402
from examples.agent_client.search import Measurement, SearchError, config_key, order_moves, run_search  # noqa: E402
from test_agent_client_standins import MODELS  # noqa: E402

MATMUL, LAYERNORM = KERNELS["tma_matmul"], KERNELS["layernorm"]


def _model_values(model: dict, root: str) -> list[dict]:
    """A query summary's values, as the MCP tools give them, from the cost model's regions and stalls
    (a loop region's children occur once per trip, as the stand-in trace records them)."""
    out, times = [], dict(model["regions"])
    for region, ns in model["regions"].items():
        parent = region.rsplit("/", 1)[0]
        if parent != root:
            times[parent] = times.get(parent, 0.0) + ns * model["trips"]
    for region, ns in times.items():
        for metric, value in (("count", 2.0), ("mean", ns), ("p50", ns)):
            out.append({"signal": "latency", "region": region, "metric": metric, "value": value})
    for region, stalls in model["stalls"].items():
        out += [{"signal": "stall_reasons", "region": region, "metric": r.removeprefix("stall:"), "value": v}
                for r, v in stalls.items()]
    return out


class ModelEvaluator:
    """The cost model behind the evaluator interface; records every (config, shape) it is asked."""

    def __init__(self, spec, fail_start: bool = False) -> None:
        self.spec, self.fail_start, self.asked, self.diagnosed = spec, fail_start, [], []

    async def measure(self, config, shape) -> Measurement:
        self.asked.append((config_key(config), shape_label(shape)))
        model = MODELS[self.spec.name](config, shape)
        if "fail" in model or (self.fail_start and config == self.spec.start):
            return Measurement(shape_label(shape), None, model.get("fail", "start fails"))
        return Measurement(shape_label(shape), model["kernel"], seconds=0.0)

    async def diagnose(self, config, shape):
        self.diagnosed.append(config_key(config))
        model = MODELS[self.spec.name](config, shape)
        return evidence.diagnose(_model_values(model, self.spec.root_region), self.spec.root_region, config["num_stages"]), 0.0


def _search(spec, policy, budget=25, shapes=4, **kw):
    tuning, held = split_shapes(spec, shapes)
    ev = ModelEvaluator(spec, **kw)
    result = anyio.run(lambda: run_search(spec, ev, tuning, held, budget=budget, policy=policy, log=lambda s: None))
    return result, ev, tuning, held


@pytest.mark.parametrize("spec", [MATMUL, LAYERNORM], ids=lambda s: s.name)
@pytest.mark.parametrize("policy", ["time", "regions"])
def test_search_spends_the_budget_on_distinct_candidates_and_never_sees_held_out_shapes(spec, policy):
    result, ev, tuning, held = _search(spec, policy)
    assert len(result.trials) == 25 and result.stopped == "budget spent"
    assert len({config_key(t.config) for t in result.trials}) == 25  # no candidate twice
    assert [t.index for t in result.trials] == list(range(1, 26))
    held_labels = {shape_label(s) for s in held}
    during, after = ev.asked[:-2 * len(held)], ev.asked[-2 * len(held):]
    assert not held_labels & {shape for _, shape in during}
    # after the search: the held-out shapes, for the start and the best configuration only
    assert {shape for _, shape in after} == held_labels
    assert {c for c, _ in after} == {config_key(spec.start), config_key(result.best_config)}
    assert [s["held_out"] for s in result.shape_speedups] == [False] * len(tuning) + [True] * len(held)
    best = [t.best_score for t in result.trials]
    assert best == sorted(best) and best[-1] == result.trials[result.best_trial - 1].score
    for t in result.trials:
        assert (t.score is None) == (t.failure is not None)
        assert not (t.accepted and t.score is None)
    assert (len(result.diagnoses) > 0) == (policy == "regions")
    assert set(ev.diagnosed) == ({config_key(d["config"]) for d in result.diagnoses} if policy == "regions" else set())


def test_failed_candidates_are_trials_not_crashes():
    result, *_ = _search(MATMUL, "time")
    failed = [t for t in result.trials if t.score is None]
    assert failed and all("shared memory" in t.failure or "reference" in t.failure for t in failed)
    rows = result_rows([result.to_dict()])
    assert {r["failed_trials"] for r in rows} == {len(failed)}


def test_a_baseline_that_fails_stops_the_search_with_the_reason():
    with pytest.raises(SearchError, match="starting configuration fails.*start fails"):
        _search(MATMUL, "time", fail_start=True)


def test_region_policy_turns_the_knob_its_diagnosis_names():
    # the model's start is memory bound (loads exposed): the first move must be a memory remedy
    result, *_ = _search(MATMUL, "regions", budget=2)
    assert result.diagnoses[0]["bottleneck"] == "memory" and result.diagnoses[0]["evidence"]["reason"] == "long_sb"
    assert result.trials[1].move == "num_stages +1"


def test_without_a_diagnosis_both_policies_order_moves_alike():
    moves = [(((k.name, d),), {}) for k in MATMUL.knobs for d in (1, -1)]
    none = evidence.Diagnosis(None, "no rule applies")
    a = order_moves(MATMUL, moves, MATMUL.start, "time", 0, None)
    assert order_moves(MATMUL, moves, MATMUL.start, "regions", 0, none) == a
    sync = order_moves(MATMUL, moves, MATMUL.start, "regions", 0, evidence.Diagnosis("sync", "test"))
    assert [m[0][0] for m in sync[:3]] == list(MATMUL.remedies["sync"]) and sorted(sync) == sorted(a)


def test_shapes_split_even_tune_odd_held_out_and_bad_counts_say_the_valid_range():
    tuning, held = split_shapes(MATMUL, 4)
    assert tuning == [MATMUL.shapes[0], MATMUL.shapes[2]] and held == [MATMUL.shapes[1], MATMUL.shapes[3]]
    assert split_shapes(MATMUL, 2) == ([MATMUL.shapes[0]], [MATMUL.shapes[1]])
    with pytest.raises(KernelSpecError, match=r"--shapes 5: .* valid: 2\.\.4"):
        split_shapes(MATMUL, 5)


def test_start_is_the_programs_own_launch():
    assert MATMUL.start == {"BM": 128, "BN": 128, "BK": 64, "num_stages": 3, "num_warps": 4, "warp_specialize": False}
    assert LAYERNORM.start == {"BLOCK": 1024, "num_warps": 8, "num_stages": 1}
    assert MATMUL.shapes[0] == MATMUL.base_launch()["shapes"] and LAYERNORM.shapes[0] == LAYERNORM.base_launch()["shapes"]


def _import_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"forked_{path.parent.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_candidate_is_a_fork_whose_module_and_launch_agree(tmp_path):
    pytest.importorskip("triton")
    from argus_rt.kinds.triton.program import check_program, program_compiled
    from argus_rt.program import load_program
    from argus_rt.program_fork import fork_program

    config = {**MATMUL.start, "BN": 64, "BK": 128, "num_stages": 2, "warp_specialize": True}
    shape = MATMUL.shapes[3]
    edits, launch = MATMUL.candidate(config, shape, MATMUL.base_launch())
    child = fork_program(load_program(MATMUL.program_dir), tmp_path / "ws", edits=edits, launch=launch)
    assert child.launch["constexprs"] == {"BM": 128, "BN": 64, "BK": 128} and child.launch["shapes"] == shape
    assert child.launch["args"]["K"] == 1024 and child.launch["iterations"] == 8
    mod = _import_file(Path(child.root) / "tma_matmul.py")
    assert (mod.M, mod.N, mod.K, mod.BLOCK_N, mod.BLOCK_K) == (8192, 1024, 1024, 64, 128)
    assert mod.grid(mod.M, mod.N) == (64, 16, 1)  # the module's grid uses the candidate's tiles
    text = (Path(child.root) / "tma_matmul.py").read_text()
    assert OVERRIDE_HEADER in text and "tl.range(0, K, BK, warp_specialize=True)" in text
    check_program(child, use_cache=False)  # Argus compiles what the launch describes, for sm_90
    compiled = program_compiled(child)  # on sm_90 Triton warp-specialises this loop at num_warps 4 (not 8)
    assert "ttg.warp_specialize" in compiled.asm["ttgir"] and compiled.metadata.num_warps > 4


def test_layernorm_candidate_sets_block_trips_and_row_length(tmp_path):
    config = {"BLOCK": 4096, "num_warps": 16, "num_stages": 2}
    edits, launch = LAYERNORM.candidate(config, {"N_ROWS": 1024, "N_COLS": 16384}, LAYERNORM.base_launch())
    assert launch["iterations"] == 4 and launch["args"]["n_cols"] == launch["args"]["stride"] == 16384
    (tmp_path / "layernorm.py").write_text(edits["layernorm.py"])
    pytest.importorskip("triton")
    mod = _import_file(tmp_path / "layernorm.py")
    assert (mod.N_ROWS, mod.N_COLS, mod.BLOCK) == (1024, 16384, 4096) and mod.grid() == (1024, 1, 1)
    with pytest.raises(KernelSpecError, match=r"value 3000 not in \[256, 512"):
        LAYERNORM.candidate({**config, "BLOCK": 3000}, LAYERNORM.shapes[0], LAYERNORM.base_launch())
    with pytest.raises(KernelSpecError, match="warp specialisation needs"):
        LAYERNORM.candidate({**config, "warp_specialize": True}, LAYERNORM.shapes[0], LAYERNORM.base_launch())


# ---- evidence rules -------------------------------------------------------------------------------
def _lat(region, mean, count=1.0):
    return [{"signal": "latency", "region": region, "metric": m, "value": v}
            for m, v in (("mean", mean), ("p50", mean), ("count", count))]


def test_diagnosis_rules_in_order():
    base = _lat("tma_matmul/kloop", 1000) + _lat("tma_matmul/kloop/mma", 100, 8) + _lat("tma_matmul/epilogue", 200)
    stalls = [{"signal": "stall_reasons", "region": "tma_matmul/kloop/mma", "metric": "math", "value": 50.0},
              {"signal": "stall_reasons", "region": "tma_matmul/kloop/mma", "metric": "gmma_unknown", "value": 90.0},
              {"signal": "stall_reasons", "region": "tma_matmul/kloop", "metric": "barrier", "value": 500.0}]
    d = evidence.diagnose(base + stalls, "tma_matmul", num_stages=3)
    # parents include children: the leaf decides; a reason of no class is skipped
    assert (d.bottleneck, d.evidence["region"], d.evidence["reason"]) == ("compute", "tma_matmul/kloop/mma", "math")
    probes = [{"signal": "async_completion_latency", "region": "tma_matmul/kloop/load", "metric": "0x7e5f@1",
               "value": 450.0}]
    d = evidence.diagnose(base + stalls + probes, "tma_matmul", num_stages=3)
    assert d.bottleneck == "memory" and d.evidence["covered_ns"] == 200.0  # 2 stages x 100 ns of mma
    assert evidence.diagnose(base + stalls + probes, "tma_matmul", num_stages=6).bottleneck == "compute"
    heavy_epilogue = _lat("tma_matmul/kloop", 100) + _lat("tma_matmul/epilogue", 300)
    assert evidence.diagnose(heavy_epilogue + probes, "tma_matmul", 3).bottleneck == "epilogue"
    none = evidence.diagnose([], "tma_matmul", 3, [{"signal": "stall_reasons", "reason": "no ncu"}])
    assert none.bottleneck is None and "stall_reasons: no ncu" in none.rule


# ---- kernel_time ------------------------------------------------------------------------------------
def test_kernel_time_publishes_the_plain_kernel_time_from_the_jit_check():
    doc = {"format": "argus.region_intervals/1", "launches": 2, "reference_check": {"max_rel_err": 0.002},
           "columns": {"region_id": [1] * 4, "start": [10, 12, 500, 520], "end": [100, 90, 610, 580],
                       "launch": [0, 0, 1, 1]},
           "jit_check": {"argus_ms": 0.0125, "jit_ms": 0.0126}}
    from argus_rt.evidence import RegionIntervals

    got = {m: v for m, v, *_ in kernel_time.kernel_time_values(RegionIntervals.from_document(doc))}
    assert got == {"untraced_median": 12500.0, "jit_median": 12600.0, "traced_span": 100.0,
                   "reference_rel_error": 0.002}
    from argus_rt.runtime.handlers import HandlerError

    with pytest.raises(HandlerError, match="no timed JIT check"):
        kernel_time.kernel_time_values(RegionIntervals.from_document({**doc, "jit_check": None}))


def test_kernel_time_reads_the_typed_evidence_a_triton_trace_publishes(tmp_path, monkeypatch):
    """What the GPU run gives the rule (H200, 2026-12-02: the rule refused 'argus.region_intervals/2'): the trace
    adapter's .npy columns + metadata, committed to a workspace, with the JIT check in their details."""
    from argus_rt.program import ProgramVersion
    from tests.test_evidence_types import commit_and_synthesize, publish_triton_trace
    from tests.test_synthesis import program

    pv = ProgramVersion.from_sources("k", {"k.cu": "x"}, kind="triton", regions=program().regions)
    rid = next(iter(pv.regions)).id
    doc = {"format": "argus.region_intervals/1", "clock": "ns", "launches": 2, "reference_check": {"max_rel_err": 0.002},
           "columns": {"region_id": [rid] * 4, "start": [10, 12, 500, 520], "end": [100, 90, 610, 580],
                       "launch": [0, 0, 1, 1]},
           "jit_check": {"argus_ms": 0.0125, "jit_ms": 0.0126}}
    collect, files = publish_triton_trace(tmp_path, monkeypatch, pv, doc)
    facts = commit_and_synthesize(tmp_path, files, collect, pv, rule="kernel_time")
    assert {v["metric"]: v["value"] for v in facts["values"]} == {
        "untraced_median": 12500.0, "jit_median": 12600.0, "traced_span": 100.0, "reference_rel_error": 0.002}
    from argus_rt.recipes import get_recipe

    assert get_recipe("kernel_time").evidence == get_recipe("latency").evidence  # one run serves both


# ---- output -------------------------------------------------------------------------------------------
def test_rows_table_and_verdict_come_from_the_results(tmp_path):
    a, *_ = _search(MATMUL, "time", budget=6, shapes=2)
    b, *_ = _search(MATMUL, "regions", budget=6, shapes=2)
    results = [a.to_dict(), b.to_dict()]
    rows = result_rows(results)
    assert {tuple(sorted(r)) for r in rows} == {tuple(sorted(
        ["kernel", "shape", "policy", "trials_to_best", "best_speedup", "held_out", "start_ns", "best_ns",
         "best_config", "failed_trials", "trials_run"]))}
    assert [(r["policy"], r["held_out"]) for r in rows] == [("time", False), ("time", True), ("regions", False),
                                                            ("regions", True)]
    assert "| tma_matmul | M4096xN4096xK512 | yes |" in speedup_table(results)
    (line,) = verdict(results, 0.02)
    sa, sb = a.trials[a.best_trial - 1].score, b.trials[b.best_trial - 1].score
    assert line.startswith("tma_matmul: region evidence ") and f"{sb:.3f} in {b.best_trial} trials" in line
    assert ("helped" in line) == (sb > sa * 1.02 or (abs(sb / sa - 1) <= 0.02 and b.best_trial < a.best_trial))
    (only,) = verdict(results[:1], 0.02)
    assert "no comparison" in only
    os.environ.pop("OUT", None)
    args = type("Args", (), {"budget": 6, "min_gain": 0.02})()
    payload = record_results(args, results, root=tmp_path,
                             command=command_line(["--kernels", "tma_matmul", "--budget", "6", "--record"]))
    written = json.loads((tmp_path / "benchmarks" / "results" / "agent_client.json").read_text())
    assert written["rows"] == payload["rows"] == rows and "agent_client" in (tmp_path / "docs" / "benchmarks.md").read_text()
    assert written["command"] == "python -m examples.agent_client --kernels tma_matmul --budget 6 --record"


# ---- the whole client over stdio ------------------------------------------------------------------------
def _client(args, tmp_path, extra_env=None, **kw):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           **(extra_env or {})}
    env.pop("OUT", None)
    return subprocess.run([sys.executable, "-m", "examples.agent_client", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.slow
def test_client_over_stdio_with_standins_writes_trials_table_and_plot(tmp_path):
    pytest.importorskip("mcp")
    pytest.importorskip("matplotlib")
    results_file = ROOT / "benchmarks" / "results" / "agent_client.json"
    before = results_file.stat().st_mtime_ns if results_file.exists() else None
    out = tmp_path / "out"
    proc = _client(["--kernels", "tma_matmul,layernorm", "--shapes", "2", "--budget", "4", "--out", str(out),
                    "--standin", "test_agent_client_standins", "--region-signals", "latency,stall_reasons"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "trials.json").read_text())
    assert doc["standin"] == "test_agent_client_standins"
    assert [(r["kernel"], r["policy"]) for r in doc["results"]] == [
        ("tma_matmul", "time"), ("tma_matmul", "regions"), ("layernorm", "time"), ("layernorm", "regions")]
    for r in doc["results"]:
        assert len(r["trials"]) == 4 and r["held_out"] and r["tuning"] != r["held_out"]
        for t in r["trials"]:
            for m in t["measurements"]:
                assert m["shape"] in r["tuning"]
                assert (m["time_ns"] is None) == (m["failure"] is not None)
                assert m["time_ns"] is None or (m["version"].startswith("pv-") and m["rel_error"] == 1e-3)
    failed = [t for r in doc["results"] for t in r["trials"] if t["score"] is None]
    assert failed and all("collect:trace failed" in t["failure"] for t in failed)
    assert all(d["bottleneck"] in ("memory", "sync", "compute", "issue", "epilogue")
               for r in doc["results"] if r["policy"] == "regions" for d in r["diagnoses"])
    progress = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert len(progress) == 16 and progress[0]["move"] == "start" and progress[-1]["policy"] == "regions"
    assert (out / "best_so_far.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "table.md").read_text()
    assert "| layernorm | N_ROWS4096xN_COLS4096 | yes |" in table and "region evidence" in table
    after = results_file.stat().st_mtime_ns if results_file.exists() else None
    assert after == before  # a stand-in run never writes the results file
    again = _client(["--replot", str(out / "trials.json")], tmp_path)
    assert again.returncode == 0 and (out / "table.md").read_text() == table


def test_client_whose_baseline_fails_says_why_in_one_line(tmp_path):
    pytest.importorskip("mcp")
    proc = _client(["--kernels", "layernorm", "--shapes", "2", "--budget", "3", "--out", str(tmp_path / "o"),
                    "--standin", "test_agent_client_standins"], tmp_path,
                   extra_env={"AGENT_STANDIN_FAIL_ALL": "synthetic launch failure"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("agent_client:")]
    assert line.startswith("agent_client: layernorm: the starting configuration fails, so there is no baseline")
    assert "synthetic launch failure" in line
    doc = json.loads((tmp_path / "o" / "trials.json").read_text())
    assert doc["results"] == [] and doc["errors"] == [line.removeprefix("agent_client: ")]


def test_client_dry_run_forks_and_plans_without_measuring(tmp_path):
    pytest.importorskip("mcp")
    pytest.importorskip("triton")
    proc = _client(["--dry-run", "--kernels", "layernorm", "--shapes", "2", "--out", str(tmp_path / "o")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("compiles (0 async sites)") == 2 and "['latency:trace', 'kernel_time:trace']" in proc.stdout
    assert not (tmp_path / "o" / "trials.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--kernels", "nope"], "--kernels 'nope': unknown ['nope']; valid: tma_matmul, layernorm, tma_matmul_untuned"),
    (["--shapes", "5"], "--shapes 5: kernel tma_matmul has 4 shapes; valid: 2..4"),
    (["--budget", "0"], "--budget 0: needs at least 1"),
    (["--standin", "m", "--record"], "--record writes measured results only"),
])
def test_bad_arguments_are_one_line_errors(args, message, tmp_path):
    proc = _client(args, tmp_path)
    assert proc.returncode == 2 and message in proc.stderr
