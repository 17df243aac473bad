"""The optimisation client's wall-time guard and the merge of runs from separate device calls (CPU).

* ``run_search`` with a deadline on a fake clock: it stops before a trial that would end past it,
  names the trials not run, and still measures the held-out shapes;
* ``tune`` (the CLI's loop) over fake MCP tools whose queries take real (short) time: each search
  gets a share of the time, a query still running at the deadline is cut off, and trials.json is
  whole JSON that names every trial not run;
* a diagnosis asks the region signals in the rules' order and stops once one decides;
* ``--merge``: the combined rows, table and record; runs that differ are refused in one line.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

anyio = pytest.importorskip("anyio")

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(ROOT))

from examples.agent_client import __main__ as cli  # noqa: E402
from examples.agent_client.evaluator import McpEvaluator  # noqa: E402
from examples.agent_client.kernels import KERNELS, split_shapes  # noqa: E402
from examples.agent_client.output import result_rows  # noqa: E402
from examples.agent_client.search import Measurement, run_search  # noqa: E402
from test_agent_client import ModelEvaluator  # noqa: E402

MATMUL, LAYERNORM = KERNELS["tma_matmul"], KERNELS["layernorm"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedModel(ModelEvaluator):
    """The cost model, each measurement taking ``seconds`` on ``clock`` (a repeated one is free, as the
    real evaluator's memo makes it)."""

    def __init__(self, spec, clock: Clock, seconds: float) -> None:
        super().__init__(spec)
        self.clock, self.seconds, self.memo = clock, seconds, {}

    async def measure(self, config, shape) -> Measurement:
        key = (tuple(sorted(config.items())), tuple(shape.items()))
        if key not in self.memo:
            self.clock.now += self.seconds
            self.memo[key] = await super().measure(config, shape)
        return self.memo[key]


def test_a_search_stops_before_a_trial_that_would_end_past_its_deadline():
    tuning, held = split_shapes(MATMUL, 4)
    clock = Clock()
    ev = TimedModel(MATMUL, clock, seconds=10.0)
    result = anyio.run(lambda: run_search(MATMUL, ev, tuning, held, budget=25, policy="time", log=lambda s: None,
                                          stop_at=205.0, clock=clock))
    ran = len(result.trials)
    assert 2 <= ran < 25 and result.not_run == list(range(ran + 1, 26))
    assert result.stopped == f"deadline: trials {ran + 1}-25 not run"
    assert clock.now <= 205.0  # the held-out measurements were reserved for, and fit
    assert [s["held_out"] for s in result.shape_speedups] == [False, False, True, True]
    assert all(s["speedup"] is not None for s in result.shape_speedups)
    assert {r["trials_run"] for r in result_rows([result.to_dict()])} == {ran}


def test_without_a_deadline_nothing_is_left_out():
    tuning, held = split_shapes(MATMUL, 2)
    clock = Clock()
    result = anyio.run(lambda: run_search(MATMUL, TimedModel(MATMUL, clock, 10.0), tuning, held, budget=25,
                                          policy="regions", log=lambda s: None, clock=clock))
    assert len(result.trials) == 25 and result.not_run == [] and result.stopped == "budget spent"


# ---- the CLI's loop over fake MCP tools ----------------------------------------------------------------
class FakeTools:
    """fork and query as ArgusTools answers them; every query sleeps ``delay`` s of real time, the
    ``slow_at``-th sleeps ``slow`` s (a query still running at the deadline)."""

    def __init__(self, delay=0.02, slow_at=None, slow=30.0, region_values=None) -> None:
        self.delay, self.slow_at, self.slow = delay, slow_at, slow
        self.versions, self.queries = {}, []
        self.region_values = region_values or {}

    async def fork(self, program, edits, launch):
        vid = f"pv-{len(self.versions):04d}"
        self.versions[vid] = launch
        return {"id": vid}

    async def query(self, program, region, signals, scope=None):
        self.queries.append((program, tuple(signals)))
        await anyio.sleep(self.slow if len(self.queries) == self.slow_at else self.delay)
        if signals == ["latency", "kernel_time"]:
            launch = json.dumps(self.versions[program], sort_keys=True)
            ns = 1000.0 + sum(map(ord, launch)) % 397
            return {"values": [{"signal": "kernel_time", "region": None, "metric": "untraced_median", "value": ns}],
                    "unanswered": []}
        (signal,) = signals
        return {"values": self.region_values.get(signal, []), "unanswered": []}


def _args(tmp_path, *extra):
    args = cli.parse_args(["--kernels", "tma_matmul,layernorm", "--shapes", "2", "--budget", "25",
                           "--out", str(tmp_path / "out"), *extra])
    args.provenance = {"gpu": "test"}
    return args


def _read_trials(tmp_path) -> dict:
    return json.loads((tmp_path / "out" / "trials.json").read_text())  # whole JSON, or this raises


def test_tune_shares_the_time_left_and_names_the_trials_not_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "DEADLINE_MARGIN_S", 0.2)
    args = _args(tmp_path)
    args.deadline = time.monotonic() + 0.2 + 2.0
    results, errors = anyio.run(lambda: cli.tune(args, FakeTools()))
    doc = _read_trials(tmp_path)
    assert errors == [] and [(r["kernel"], r["policy"]) for r in doc["results"]] == [
        (k, p) for k in ("tma_matmul", "layernorm") for p in ("time", "regions")]
    assert time.monotonic() <= args.deadline
    cut = [r for r in doc["results"] if r["not_run"]]
    assert cut, "2 s cannot hold 4 x 25 trials of a 20 ms query each"
    assert doc["not_run"] == [{"kernel": r["kernel"], "policy": r["policy"],
                               "trials": "25" if r["not_run"] == [25] else f"{r['not_run'][0]}-25"} for r in cut]
    for r in doc["results"]:
        assert len(r["trials"]) + len(r["not_run"]) == 25 and len(r["shape_speedups"]) == 2
    out = capsys.readouterr().out
    assert all(f"not run: {g['kernel']} {g['policy']} trials {g['trials']} (deadline)" in out for g in doc["not_run"])


def test_a_query_running_at_the_deadline_is_cut_off_and_the_file_stays_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "DEADLINE_MARGIN_S", 0.2)
    args = _args(tmp_path, "--policies", "time")
    args.deadline = time.monotonic() + 0.2 + 3.0
    # query 3 hangs: tma_matmul's 3rd trial (one tuning shape: a query a trial), long before its share ends
    results, errors = anyio.run(lambda: cli.tune(args, FakeTools(slow_at=3)))
    assert time.monotonic() <= args.deadline + 0.5
    doc = _read_trials(tmp_path)
    assert doc["results"] == [] and results == []
    (line,) = errors
    assert line == ("tma_matmul time: cut off at the deadline during trial 3; trials 3-25 not run, the 2 before it "
                    "only in progress.jsonl")
    assert doc["not_run"] == [{"kernel": "tma_matmul", "policy": "time", "trials": "3-25"},
                              {"kernel": "layernorm", "policy": "time", "trials": "1-25"}]
    progress = (tmp_path / "out" / "progress.jsonl").read_text().splitlines()
    assert [json.loads(x)["index"] for x in progress] == [1, 2]
    assert not list((tmp_path / "out").glob(".*.tmp"))


def test_a_deadline_already_past_runs_nothing_and_says_so(tmp_path, monkeypatch):
    args = _args(tmp_path)
    args.deadline = time.monotonic() + cli.DEADLINE_MARGIN_S - 1.0
    tools = FakeTools()
    results, errors = anyio.run(lambda: cli.tune(args, tools))
    assert results == errors == [] and tools.queries == []
    assert len(_read_trials(tmp_path)["not_run"]) == 4


# ---- a diagnosis asks only what its rules read -----------------------------------------------------------
def _latency(region, mean, count=1.0):
    return [{"signal": "latency", "region": region, "metric": m, "value": v}
            for m, v in (("mean", mean), ("count", count), ("p50", mean))]


def test_a_diagnosis_decided_by_latency_asks_nothing_else():
    values = {"latency": _latency("tma_matmul/kloop", 100.0) + _latency("tma_matmul/epilogue", 900.0)}
    tools = FakeTools(region_values=values)
    found, _ = anyio.run(lambda: McpEvaluator(MATMUL, tools).diagnose(MATMUL.start, MATMUL.shapes[0]))
    assert found.bottleneck == "epilogue" and found.evidence["asked"] == ["latency"]
    assert [s for _, s in tools.queries] == [("latency",)]


def test_a_diagnosis_that_needs_stalls_asks_the_signals_in_the_rules_order():
    values = {"latency": _latency("tma_matmul/kloop/mma", 100.0),
              "stall_reasons": [{"signal": "stall_reasons", "region": "tma_matmul/kloop/load", "metric": "long_sb",
                                 "value": 50.0}]}
    tools = FakeTools(region_values=values)
    found, _ = anyio.run(lambda: McpEvaluator(MATMUL, tools).diagnose(MATMUL.start, MATMUL.shapes[0]))
    assert found.bottleneck == "memory" and found.evidence["reason"] == "long_sb"
    order = ["latency", "async_completion_latency", "stall_reasons"]
    assert [s for _, s in tools.queries] == [(s,) for s in order] and found.evidence["asked"] == order


# ---- --merge --------------------------------------------------------------------------------------------
PROVENANCE = {"gpu": "NVIDIA H200", "commit": "abc123", "commit_source": "$ARGUS_COMMIT", "not_recorded": {},
              "versions": {"torch": "2.11.0", "triton": "3.6.0"}}


def _run_doc(spec, budget=6, **over) -> dict:
    tuning, held = split_shapes(spec, 2)
    results = [anyio.run(lambda p=p: run_search(spec, ModelEvaluator(spec), tuning, held, budget=budget, policy=p,
                                                log=lambda s: None)).to_dict() for p in ("time", "regions")]
    doc = {"format": "agent_client.trials/1", "budget": budget, "min_gain": 0.02, "seed": 0, "shapes": 2,
           "region_signals": ["latency", "stall_reasons", "async_completion_latency"], "standin": None,
           "command": f"python -m examples.agent_client --kernels {spec.name}", "deadline_s": 500.0,
           "provenance": json.loads(json.dumps(PROVENANCE)), "results": results, "errors": [], "not_run": []}
    for key, value in over.items():
        (doc["provenance"] if key in PROVENANCE else doc)[key] = value
    return doc


def _write(tmp_path, name, doc) -> str:
    path = tmp_path / name / "trials.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    return str(path)


def test_merge_combines_the_kernels_runs(tmp_path):
    a = _write(tmp_path, "a", _run_doc(MATMUL))
    b = _write(tmp_path, "b", _run_doc(LAYERNORM))
    assert cli.main(["--merge", a, b, "--out", str(tmp_path / "m")]) == 0
    doc = json.loads((tmp_path / "m" / "trials.json").read_text())
    assert [(r["kernel"], r["policy"]) for r in doc["results"]] == [
        ("tma_matmul", "time"), ("tma_matmul", "regions"), ("layernorm", "time"), ("layernorm", "regions")]
    assert doc["merged_from"] == [a, b] and doc["provenance"]["gpu"] == "NVIDIA H200"
    rows = result_rows(doc["results"])
    assert len(rows) == 8 and {r["kernel"] for r in rows} == {"tma_matmul", "layernorm"}
    table = (tmp_path / "m" / "table.md").read_text()
    assert "| tma_matmul | M4096xN4096xK512 | yes |" in table and "| layernorm | N_ROWS4096xN_COLS4096 | yes |" in table


@pytest.mark.parametrize("over, message", [
    ({"budget": 8}, "budget differs: 6 in {a}, 8 in {b}"),
    ({"gpu": "NVIDIA A100"}, "gpu differs: 'NVIDIA H200' in {a}, 'NVIDIA A100' in {b}"),
    ({"commit": "def456"}, "commit differs: 'abc123' in {a}, 'def456' in {b}"),
])
def test_merge_refuses_runs_that_differ_in_one_line(tmp_path, capsys, over, message):
    a = _write(tmp_path, "a", _run_doc(MATMUL))
    b = _write(tmp_path, "b", _run_doc(LAYERNORM, budget=over.pop("budget", 6), **over))
    assert cli.main(["--merge", a, b, "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["agent_client: --merge refused: " + message.format(a=a, b=b)]
    assert not (tmp_path / "m").exists()


def test_merge_refuses_one_kernel_and_policy_twice(tmp_path, capsys):
    a = _write(tmp_path, "a", _run_doc(MATMUL))
    b = _write(tmp_path, "b", _run_doc(MATMUL))
    assert cli.main(["--merge", a, b, "--out", str(tmp_path / "m")]) == 2
    assert capsys.readouterr().err.strip() == f"agent_client: --merge refused: tma_matmul time is in both {a} and {b}"


def test_a_merged_record_carries_the_device_runs_provenance(tmp_path, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    doc = cli.merge_trials([_write(tmp_path, "a", _run_doc(MATMUL)), _write(tmp_path, "b", _run_doc(LAYERNORM))])
    args = type("Args", (), {"budget": 6, "min_gain": 0.02})()
    payload = cli.record_results(args, doc["results"], root=tmp_path, command=doc["command"],
                                 run_provenance=doc["provenance"])
    written = json.loads((tmp_path / "benchmarks" / "results" / "agent_client.json").read_text())
    assert written == payload and written["gpu"] == "NVIDIA H200" and written["commit"] == "abc123"
    assert written["versions"] == PROVENANCE["versions"] and len(written["rows"]) == 8
    assert "agent_client" in (tmp_path / "docs" / "benchmarks.md").read_text()


def test_a_cut_off_run_is_compared_at_the_trial_count_both_policies_reached():
    from examples.agent_client.output import verdict

    tuning, held = split_shapes(MATMUL, 2)
    clock = Clock()
    a = anyio.run(lambda: run_search(MATMUL, TimedModel(MATMUL, clock, 1.0), tuning, held, budget=25, policy="time",
                                     log=lambda s: None, stop_at=6.0, clock=clock)).to_dict()
    b = anyio.run(lambda: run_search(MATMUL, ModelEvaluator(MATMUL), tuning, held, budget=25, policy="regions",
                                     log=lambda s: None)).to_dict()
    n = len(a["trials"])
    assert a["not_run"] and n < 25 and not b["not_run"]
    (line,) = verdict([a, b], 0.02)
    assert line.endswith(f"cut off by the deadline: 25 (regions) and {n} (time) of 25 trials ran, compared at trial {n}")
    assert f"tuning speedup {b['trials'][n - 1]['best_score']:.3f} in " in line
