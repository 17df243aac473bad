"""The query entry point and the plan/query/workspace commands."""
from __future__ import annotations

import json

import pytest

from argus_rt.cli import main
from argus_rt.planner import QueryError
from argus_rt.query import make_plan, query
from argus_rt.scope import Scope, ScopeError
from argus_rt.workspace import Workspace
from test_runtime_standins import demo_program, standins  # noqa: F401


def write_program_dir(path, pv):
    path.mkdir()
    (path / "demo.cu").write_text("// synthetic")
    (path / "regions.json").write_text(json.dumps(pv.regions.to_manifest()))
    (path / "argus_program.json").write_text(json.dumps({
        "name": "demo", "kind": "standin", "sources": ["demo.cu"], "compiler": "none",
        "regions": "regions.json", "launch": pv.launch}))
    return path


def test_query_validates_region_signal_and_scope():
    pv = demo_program()
    with pytest.raises(QueryError, match="valid regions: main, main/epilogue, main/gemm, main/gemm/load"):
        make_plan(pv, "gem", ["latency"])
    with pytest.raises(KeyError, match="valid signals: async_completion_latency, barrier_count"):
        make_plan(pv, "gemm", ["latncy"])
    with pytest.raises(ScopeError, match="valid fields: warp_role, iterations, sms, ctas, step, layer"):
        make_plan(pv, "gemm", ["latency"], {"thread": 3})
    with pytest.raises(ScopeError, match="valid fields"):
        Scope(blocks=[1])
    with pytest.raises(ScopeError, match="is empty"):
        Scope(iterations=(3, 3))
    assert make_plan(pv, "gemm", "latency,latency").query["signals"] == ["latency"]


def test_query_api_reuses_results(standins, tmp_path):
    pv = demo_program()
    rep = query(pv, region="gemm", signals=["latency"], scope=Scope(iterations=(0, 2)),
                workspace=tmp_path / "ws", devices=[""])
    assert rep.unanswered == [] and rep.execution["collect_runs"] == 1
    assert rep.value("latency", "main/gemm", "count") == 4  # 2 iterations x 2 SMs
    again = query(pv, region="gemm", signals=["latency"], scope={"iterations": [0, 2]},
                  workspace=tmp_path / "ws", devices=[""])
    assert again.execution["collect_runs"] == 0 and again.values == rep.values


def test_plan_command_text_dot_json(tmp_path, capsys):
    prog = write_program_dir(tmp_path / "prog", demo_program())
    assert main(["plan", str(prog), "--region", "gemm", "--signals", "latency,instruction_mix"]) == 0
    text = capsys.readouterr().out
    assert "collect:pcmap" in text and "collection runs (partitioned by effects)" in text
    assert main(["plan", str(prog), "--region", "gemm", "--signals", "latency", "--format", "dot"]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith("digraph argus_plan {") and "->" in dot and "shape=box3d" in dot
    out = tmp_path / "plan.json"
    assert main(["plan", str(prog), "--signals", "latency", "--format", "json", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["argus_plan_version"] == 1
    assert main(["plan", str(prog), "--region", "nope"]) == 2
    assert "valid regions" in capsys.readouterr().err
    assert main(["plan", str(prog), "--scope", "colour=red"]) == 2
    assert "valid fields" in capsys.readouterr().err
    assert main(["plan", str(prog), "--timeout", "collect=1.5", "--format", "json", "-o", str(out)]) == 0
    assert {t["timeout_s"] for t in json.loads(out.read_text())["tasks"] if t["kind"] == "collect"} == {1.5}
    assert main(["plan", str(prog), "--timeout", "compile=3"]) == 2
    assert "KIND one of transform, collect, synthesize, control" in capsys.readouterr().err


def test_query_and_workspace_commands(standins, tmp_path, capsys):
    prog = write_program_dir(tmp_path / "prog", demo_program())
    ws = tmp_path / "ws"
    out = tmp_path / "r.json"
    rc = main(["query", str(prog), "--region", "gemm", "--signals", "latency", "--workspace", str(ws),
               "--devices", "", "--json", str(out), "--markdown", str(tmp_path / "r.md"), "--scope", "sms=0"])
    assert rc == 0, capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["query"]["scope"] == {"sms": [0]} and data["execution"]["collect_runs"] == 1
    assert {v["value"] for v in data["values"] if v["metric"] == "count"} == {4.0}  # SM 0 only: 4 of 8
    spent = data["execution"]["task_seconds"]  # where the wall time went: every task that ran, slowest first
    assert sorted(t["kind"] for t in spent) == ["collect", "synthesize", "transform"]
    assert [t["seconds"] for t in spent] == sorted((t["seconds"] for t in spent), reverse=True)
    assert all(t["status"] == "done" and t["seconds"] <= data["execution"]["wall_s"] for t in spent)
    assert "main/gemm" in (tmp_path / "r.md").read_text()
    capsys.readouterr()
    assert main(["workspace", "--workspace", str(ws), "verify"]) == 0
    assert "consistent" in capsys.readouterr().out
    assert main(["workspace", "--workspace", str(ws), "stats"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["tasks_done"] == 3 and stats["tasks_failed"] == 0
    pid = Workspace(ws).programs()[0]["id"]
    assert main(["workspace", "--workspace", str(ws), "fork", pid, "try-2"]) == 0
    assert main(["workspace", "--workspace", str(ws), "branches"]) == 0
    assert f"try-2  {pid}" in capsys.readouterr().out
    assert main(["workspace", "--workspace", str(ws), "fork", pid, "../x"]) == 2


def test_package_level_call_form(standins, tmp_path):
    import argus_rt
    import argus_rt.query  # noqa: F401  (the package __init__ may import it already)

    rep = argus_rt.query(demo_program(), region="main/epilogue", signals=["latency"],
                         scope=Scope(iterations=(0, 2)), workspace=tmp_path / "ws", devices=[""])
    assert rep.value("latency", "main/epilogue", "count") == 2
    assert rep.value("latency", "main/epilogue", "mean") == 300.0


def test_a_narrower_follow_up_reuses_a_covering_merged_run(standins, tmp_path):
    pv = demo_program()
    ws = Workspace(tmp_path / "ws")
    broad = query(pv, "gemm", ["stall_reasons", "instruction_mix"], workspace=ws, devices=[""])
    assert broad.execution["collect_runs"] == 1  # one mapping run: the map and both signals' counters (two sections)
    # alone, barrier_count would plan a mapping run with fewer sections (a different task id) ...
    alone = make_plan(pv, "gemm", ["barrier_count"])
    assert not set(alone.tasks) & {t["id"] for t in ws.tasks() if t["op"] == "pcmap"}
    # ... but against the workspace the merged run covers it: nothing is collected again
    narrow = query(pv, "main/gemm/load", ["barrier_count"], workspace=ws, devices=[""])
    assert narrow.execution["collect_runs"] == 0 and narrow.unanswered == []
    assert narrow.value("barrier_count", "main/gemm/load", "BAR") == 300.0
    assert any(r.get("reused") for r in narrow.runs)
    # a run that perturbs timing never stands in for a timing-sensitive request
    from argus_rt.planner import Request, covers
    from argus_rt.recipes import get_recipe

    map_run = next(t for t in ws.done_tasks("collect", "pcmap", pv.variant_of("marker_only").id))
    from argus_rt.recipes import Evidence

    mix = get_recipe("instruction_mix").evidence[0]
    assert covers(map_run, Request("instruction_mix", mix, map_run.program, (), Scope(), map_run.sampling))
    touchy = Evidence("pcmap", outputs=("pc_counters",), variant="marker_only", config={"sections": ["SourceCounters"]},
                      effects=mix.effects, sensitive_to={"perturbs_timing"})
    assert not covers(map_run, Request("t", touchy, map_run.program, (), Scope(), map_run.sampling))
    wider = Evidence("pcmap", outputs=("pc_counters",), variant="marker_only", effects=mix.effects,
                     config={"sections": ["SourceCounters", "MemoryWorkloadAnalysis"]})
    assert not covers(map_run, Request("t", wider, map_run.program, (), Scope(), map_run.sampling))
    ws.close()
