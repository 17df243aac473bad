"""`argus campaign`: a grid of queries on one workspace; resume after an interruption re-runs nothing
finished; a bad campaign file is one line (exit 2). Embedded engine with the CPU stand-ins (the Ray
engine's campaign: tests/test_ray_engine.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from argus_rt.campaign import CampaignError, load_campaign, run_campaign
from argus_rt.cli import main
from argus_rt.workspace import Workspace
from test_query import write_program_dir
from test_runtime_standins import demo_program, standins  # noqa: F401  (fixture)

TESTS = Path(__file__).resolve().parent


def write_campaign(tmp_path: Path, *, regions, signals, name: str = "c.json", **extra) -> Path:
    """Two program versions of the stand-in demo (v2 differs in its launch spec) and a campaign over them."""
    progs = tmp_path / "progs"
    if not progs.exists():
        progs.mkdir()
        write_program_dir(progs / "v1", demo_program())
        write_program_dir(progs / "v2", demo_program(tag="v2"))
    doc = {"argus_campaign_version": 1, "name": "demo grid",
           "programs": ["progs/v1", {"path": "progs/v2", "label": "v2"}], "regions": regions, "signals": signals,
           **extra}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_campaign_grid_summary_and_reuse(standins, tmp_path, capsys):
    path = write_campaign(tmp_path, regions=["main/gemm", "main/epilogue"], signals=["latency", "latency,instruction_mix"],
                          devices=[""])
    out = tmp_path / "result.json"
    assert main(["campaign", str(path), "--workspace", str(tmp_path / "ws"), "--json", str(out)]) == 0
    text = capsys.readouterr()
    assert "campaign demo grid" in text.out and "8 of 8 queries on embedded" in text.out
    assert "[8/8] v2 / main/epilogue / latency,instruction_mix" in text.err  # one line per query off a terminal
    doc = json.loads(out.read_text())
    assert doc["finished"] == 8 and not doc["interrupted"]
    rows = doc["results"]
    assert [r["program"] for r in rows] == ["progs/v1"] * 4 + ["v2"] * 4
    assert all(r["unanswered"] == [] and r["values"] > 0 for r in rows)
    assert rows[0]["status"] == "ran" and rows[0]["collect_runs"] == 1
    # the zoom-in reuse of one workspace: the epilogue's latency comes from the gemm query's trace
    assert rows[2]["collect_runs"] == 0
    assert main(["campaign", str(path), "--workspace", str(tmp_path / "ws"), "--json", str(out)]) == 0
    assert {r["status"] for r in json.loads(out.read_text())["results"]} == {"reused"}


DRIVER = """\
import sys
sys.path.insert(0, {tests!r})
import test_runtime_standins as S
from argus_rt.cli import main
with S.standin_backends():
    sys.exit(main(["campaign", {path!r}, "--workspace", {ws!r}, "--no-progress"]))
"""


def test_campaign_killed_midway_resumes_without_rerunning_anything_finished(tmp_path, standins):
    # every collection sleeps 0.3 s, so the kill lands while later queries still run
    path = write_campaign(tmp_path, regions=["main/gemm", "main/epilogue", "main"],
                          signals=["latency", "system_timeline"], devices=[""])
    for prog in ("v1", "v2"):  # slow collections: rewrite the launch specs
        spec_file = tmp_path / "progs" / prog / "argus_program.json"
        spec = json.loads(spec_file.read_text())
        spec["launch"]["standin"]["sleep_s"] = 0.3
        spec_file.write_text(json.dumps(spec))
    ws = tmp_path / "ws"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(tests=str(TESTS), path=str(path), ws=str(ws))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            start_new_session=True)
    finished = []
    try:
        for line in proc.stderr:  # "[k/12] ...": query k finished
            if line.startswith("["):
                finished.append(line)
                if len(finished) == 3:
                    break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the campaign and its worker processes, mid-run
        proc.wait()
        proc.stderr.close()
    assert len(finished) == 3, finished
    with Workspace(ws) as w:
        before = {t["id"] for t in w.tasks() if t["status"] == "done"}
    campaign = load_campaign(path)
    resumed = run_campaign(campaign, workspace=ws)
    assert resumed.ok and len(resumed.outcomes) == 12
    for outcome in resumed.outcomes[:3]:
        assert outcome.status == "reused" and outcome.report["execution"]["tasks"]["done"] == 0
    ran = {t["task"] for o in resumed.outcomes for t in o.report["execution"]["task_seconds"]}
    assert ran and not ran & before  # nothing committed before the kill ran again


def test_interrupted_campaign_command_exits_130_and_says_how_to_resume(standins, tmp_path, capsys, monkeypatch):
    import argus_rt.query as Q

    path = write_campaign(tmp_path, regions=["main/gemm"], signals=["latency", "instruction_mix"], devices=[""])
    real_query, calls = Q.query, []

    def query_then_ctrl_c(*args, **kwargs):  # Ctrl-C while the second query runs
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_query(*args, **kwargs)

    monkeypatch.setattr(Q, "query", query_then_ctrl_c)
    assert main(["campaign", str(path), "--workspace", str(tmp_path / "ws")]) == 130
    out = capsys.readouterr().out
    assert "1 of 4 queries" in out and "run the same command again to resume" in out


@pytest.mark.parametrize("doc, message", [
    ("{not json", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    ({"signals": ["latency"]}, "missing required key(s) 'programs'"),
    ({"programs": [], "signals": ["latency"]}, "programs: [] is not a non-empty array of program directories"),
    ({"programs": ["progs/v1"], "signals": ["latency"], "engin": "ray"}, "unknown key(s) 'engin'"),
    ({"programs": ["progs/v1"], "signals": ["lat ency"]}, "signals[0]: 'lat ency' is not a signal name"),
    ({"programs": ["progs/v1"], "signals": ["latency"], "engine": "dask"}, "engine: 'dask' is not an engine"),
    ({"programs": ["progs/v1"], "signals": ["latency"], "timeouts": {"collect": 0}},
     "timeouts.collect: 0 is not a number of seconds > 0"),
    ({"programs": ["progs/nowhere"], "signals": ["latency"]}, "programs[0] (progs/nowhere): "),
    ({"programs": ["progs/v1", "progs/v1"], "signals": ["latency"]}, "label 'progs/v1' is used twice"),
    ({"programs": ["progs/v1"], "regions": ["gemm", "nope"], "signals": ["latency"]},
     "query 2 (progs/v1 / nope / latency): unknown region 'nope'"),
    ({"programs": ["progs/v1"], "signals": ["latency,latncy"]}, "valid signals: "),
    ({"programs": ["progs/v1"], "signals": ["latency"], "scope": {"colour": 1}}, "valid fields"),
])
def test_bad_campaign_file_is_one_line(tmp_path, capsys, doc, message):
    write_campaign(tmp_path, regions=["main"], signals=["latency"])  # the program directories
    path = tmp_path / "bad.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(CampaignError) as exc:
        load_campaign(path)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert main(["campaign", str(path), "--workspace", str(tmp_path / "ws")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"argus campaign: {path}: ") and message in err and err.count("\n") == 1


def test_missing_campaign_file_and_ray_options_without_ray(tmp_path, capsys):
    assert main(["campaign", str(tmp_path / "none.json")]) == 2
    assert "no such campaign file" in capsys.readouterr().err
    path = write_campaign(tmp_path, regions=["main"], signals=["latency"])
    assert main(["campaign", str(path), "--collect-resources", '{"num_gpus": 0}']) == 2
    assert "--collect-resources is a Ray engine option" in capsys.readouterr().err
