"""Workspace faults on the CPU: edited, deleted and misplaced blobs, a byte-flipped index, three
concurrent writers and a full disk. After each: the workspace verifies (after `repair` where the
index itself was damaged), reruns complete with the numbers of an undamaged run, and nothing that
was committed intact is lost.

Collect tasks are CPU stand-ins (tests/test_runtime_standins.py) run in real worker processes.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import argus_rt
from argus_rt.cli import main
from argus_rt.workspace import Workspace, WorkspaceError
from argus_rt.workspace_check import repair, verify
from test_runtime_standins import demo_program, standins  # noqa: F401  (fixture)

TESTS = Path(__file__).resolve().parent


ZOOM = "main/gemm/load"  # the zoom-in of the issue: 100 ns in the stand-in program


def means(report) -> dict[str, float]:
    """region -> mean latency (ns) of a report."""
    return {v["region"]: v["value"] for v in json.loads(report.to_json())["values"]
            if v["signal"] == "latency" and v["metric"] == "mean"}


def executed(report) -> dict:
    """{"collect_runs": n, "done": n, "reused": n, "failed": n, "blocked": n} of a report."""
    execution = json.loads(report.to_json())["execution"]
    return {"collect_runs": execution["collect_runs"], **execution["tasks"]}


def only_reused(report) -> bool:
    e = executed(report)
    return e["collect_runs"] == e["done"] == e["failed"] == e["blocked"] == 0 and e["reused"] > 0


def trace_blob(ws: Workspace) -> Path:
    tid = next(t["id"] for t in ws.tasks() if t["op"] == "trace")
    return ws.outputs(tid)["region_intervals"].path


@pytest.fixture
def clean_numbers(standins, tmp_path_factory):  # noqa: F811
    """Latency means of an undamaged run: the numbers every repaired rerun must give again."""
    ws = tmp_path_factory.mktemp("clean") / "ws"
    return {r: means(argus_rt.query(demo_program(), r, ["latency"], workspace=ws)) for r in ("main", ZOOM)}


def test_edited_blob_is_not_reused_and_its_task_rewrites_it(standins, clean_numbers, tmp_path):  # noqa: F811
    ws = tmp_path / "ws"
    argus_rt.query(demo_program(), "main", ["latency"], workspace=ws)
    with Workspace(ws) as w:
        blob = trace_blob(w)
    doc = json.loads(blob.read_text())
    doc["columns"]["end"] = [e + 625 for e in doc["columns"]["end"]]  # every occurrence 625 ns longer
    blob.write_text(json.dumps(doc))
    zoom = argus_rt.query(demo_program(), ZOOM, ["latency"], workspace=ws)
    assert executed(zoom)["collect_runs"] == 1  # the trace ran again: not "reused"
    assert means(zoom) == clean_numbers[ZOOM] == {ZOOM: 100.0}
    with Workspace(ws) as w:
        assert verify(w) == []
        assert json.loads(trace_blob(w).read_text()) != doc  # the blob was rewritten with the true bytes


def test_deleted_blob_reruns_its_task(standins, clean_numbers, tmp_path):  # noqa: F811
    ws = tmp_path / "ws"
    argus_rt.query(demo_program(), "main", ["latency"], workspace=ws)
    with Workspace(ws) as w:
        trace_blob(w).unlink()
        assert any("missing" in p for p in verify(w))
    again = argus_rt.query(demo_program(), "main", ["latency"], workspace=ws)  # no FileNotFoundError
    assert executed(again)["collect_runs"] == 1
    assert means(again) == clean_numbers["main"]
    with Workspace(ws) as w:
        assert verify(w) == []


def _flip(path: Path, n: int, seed: int) -> None:
    data = bytearray(path.read_bytes())
    rng = random.Random(seed)
    for _ in range(n):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("seed", range(4))
def test_byte_flipped_index_repairs_and_reruns(standins, clean_numbers, tmp_path, seed):  # noqa: F811
    ws = tmp_path / "ws"
    argus_rt.query(demo_program(), "main", ["latency"], workspace=ws)
    argus_rt.query(demo_program(), ZOOM, ["latency"], workspace=ws)
    _flip(ws / "index.sqlite", 64, seed)
    try:
        with Workspace.open_existing(ws) as w:
            problems = verify(w)
    except WorkspaceError as exc:  # `argus workspace verify` says this in one line, exit 2
        problems = [str(exc)]
    try:  # before repair a query either works or fails with one clear WorkspaceError
        argus_rt.query(demo_program(), "main", ["latency"], workspace=ws)
    except WorkspaceError as exc:
        assert str(ws) in str(exc)
        assert problems, "verify said consistent, then the query failed"
    done, left = repair(ws)
    assert left == [], done
    for region, numbers in clean_numbers.items():
        assert means(argus_rt.query(demo_program(), region, ["latency"], workspace=ws)) == numbers
    with Workspace(ws) as w:
        assert verify(w) == []
    assert only_reused(argus_rt.query(demo_program(), "main", ["latency"], workspace=ws))  # what reran stays


@pytest.mark.parametrize("seed", range(3))
def test_damage_outside_the_schema_page_keeps_the_intact_records(standins, clean_numbers, tmp_path, seed):  # noqa: F811
    ws = tmp_path / "ws"
    argus_rt.query(demo_program(), "main", ["latency", "instruction_mix"], workspace=ws)
    argus_rt.query(demo_program(), ZOOM, ["latency"], workspace=ws)
    data = bytearray((ws / "index.sqlite").read_bytes())
    rng = random.Random(seed)
    for _ in range(16):  # page 1 (the schema) intact: the rebuild finds every table
        data[rng.randrange(4096, len(data))] ^= 1 << rng.randrange(8)
    (ws / "index.sqlite").write_bytes(bytes(data))
    done, left = repair(ws)
    assert left == [] and done
    again = argus_rt.query(demo_program(), "main", ["latency", "instruction_mix"], workspace=ws)
    assert means(again) == clean_numbers["main"]
    e = executed(again)
    assert e["failed"] == e["blocked"] == 0 and e["reused"] >= e["done"]  # only what was damaged reran


def test_repair_cli_drops_broken_records_and_reports_json(standins, tmp_path, capsys):  # noqa: F811
    ws = tmp_path / "ws"
    argus_rt.query(demo_program(), "main", ["latency"], workspace=ws)
    with Workspace(ws) as w:
        blob = trace_blob(w)
    blob.write_bytes(b"{}")
    (blob.parent / ("f" * 64)).write_bytes(b"foreign")  # a file whose name is not its hash
    assert main(["workspace", "--workspace", str(ws), "verify"]) == 1
    out = tmp_path / "repair.json"
    assert main(["workspace", "--workspace", str(ws), "repair", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["consistent"] is True and doc["problems"] == []
    assert any("does not match its hash" in line for line in doc["repaired"])
    assert not blob.exists() and not (blob.parent / ("f" * 64)).exists()
    assert main(["workspace", "--workspace", str(ws), "verify"]) == 0
    again = argus_rt.query(demo_program(), "main", ["latency"], workspace=ws)
    assert executed(again)["collect_runs"] == 1


# ---- processes: concurrent writers, a full disk -------------------------------------------------
_CHILD = textwrap.dedent("""
    import json, resource, sys
    sys.path.insert(0, {tests!r})
    import argus_rt
    from argus_rt.workspace import WorkspaceError
    from test_runtime_standins import demo_program, standin_backends
    limit, regions = json.loads(sys.argv[1])
    with standin_backends():
        if limit:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        try:
            for region in regions:
                report = argus_rt.query(demo_program(), region, ["latency", "instruction_mix"],
                                        workspace=sys.argv[2])
                print(json.dumps({{"region": region, "mean": {{v["region"]: v["value"] for v in
                                  json.loads(report.to_json())["values"] if v["signal"] == "latency"
                                  and v["metric"] == "mean"}}}}))
        except WorkspaceError as exc:
            print(json.dumps({{"error": str(exc)}}))
""")


def _child(ws: Path, regions: list[str], limit: int = 0) -> subprocess.Popen:
    code = _CHILD.format(tests=str(TESTS))
    return subprocess.Popen([sys.executable, "-c", code, json.dumps([limit, regions]), str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(proc: subprocess.Popen) -> list[dict]:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_three_concurrent_writers(standins, clean_numbers, tmp_path):  # noqa: F811
    ws = tmp_path / "ws"
    orders = [["main", ZOOM], [ZOOM, "main"], ["main", ZOOM]]
    results = [_lines(p) for p in [_child(ws, order) for order in orders]]
    for lines in results:
        assert {r["region"]: r["mean"] for r in lines} == clean_numbers
    with Workspace(ws) as w:
        assert verify(w) == []
        assert w.stats()["tasks_failed"] == 0
    for region in clean_numbers:  # everything the writers committed is there: a rerun only reuses
        assert only_reused(argus_rt.query(demo_program(), region, ["latency", "instruction_mix"], workspace=ws))


def test_full_disk_gives_one_workspace_error_and_keeps_finished_tasks(standins, clean_numbers, tmp_path):  # noqa: F811
    ws = tmp_path / "ws"
    assert _lines(_child(ws, ["main"]))[0]["mean"] == clean_numbers["main"]
    with Workspace(ws) as w:
        finished = {t["id"] for t in w.tasks() if t["status"] == "done"}
    # no file may grow past 8 KiB: the index (and its write-ahead log) cannot take the next query's writes
    lines = _lines(_child(ws, [ZOOM], limit=8192))
    assert len(lines) == 1 and "no space left to write" in lines[0]["error"], lines
    assert str(ws) in lines[0]["error"]
    with Workspace(ws) as w:
        assert verify(w) == []
        assert finished <= {t["id"] for t in w.tasks() if t["status"] == "done"}
    assert means(argus_rt.query(demo_program(), ZOOM, ["latency"], workspace=ws)) == clean_numbers[ZOOM]
    assert only_reused(argus_rt.query(demo_program(), "main", ["latency", "instruction_mix"], workspace=ws))


def test_full_disk_in_the_cli_is_one_line_and_exit_2(tmp_path):
    ws = tmp_path / "ws"
    with Workspace(ws) as w:
        pv = demo_program()
        w.put_program(pv)
    # 4 KiB per file: not even one page of the write-ahead log fits
    code = ("import resource, sys; from argus_rt.cli import main; "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY)); "
            f"sys.exit(main(['workspace', '--workspace', {str(ws)!r}, 'fork', {pv.id!r}, 'b' * 60]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("argus workspace:") and "no space left to write" in lines[0]
