"""CPU tasks (Transform / Synthesize / Control): timeouts count from the start, hung tasks are killed and
free their slot, a crashing handler fails alone, a killed scheduler leaves no process behind.

The ``standin_cpu_work`` handler is registered at import: CPU pool processes import this module by name.
Scenarios that could take the test process down with them (an abort under the thread pool, SIGKILL of
the scheduler) run in a child interpreter.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import argus_rt
from argus_rt.recipes import Recipe, register_recipe, unregister_recipe
from argus_rt.runtime.handlers import register_synthesis
from argus_rt.runtime.scheduler import Runtime
from argus_rt.tasks import Plan, Task
from argus_rt.workspace import Workspace
from test_runtime_standins import demo_program, standins  # noqa: F401  (fixture)

TESTS = Path(__file__).resolve().parent


@register_synthesis("standin_cpu_work")
def _work(ctx):
    """``config``: n, sleep_s, crash ("abort" | "segfault"), pid_dir (write our pid and a grandchild's there)."""
    cfg = ctx.config
    if cfg.get("pid_dir"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        for pid in (os.getpid(), child.pid):
            Path(cfg["pid_dir"], f"{pid}.pid").write_text(str(pid))
    if cfg.get("crash") == "abort":
        os.abort()
    if cfg.get("crash") == "segfault":
        ctypes.string_at(0)
    time.sleep(cfg.get("sleep_s", 0))
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": "work", "values": [],
                                              "extra": {"n": cfg.get("n"), "pid": os.getpid()}})}


def cpu_plan(specs: list[dict], timeout_s: float | None) -> Plan:
    pv = demo_program()
    tasks = [Task(kind="synthesize", op="standin_cpu_work", program=pv.id, config={"n": i, **spec},
                  outputs=("facts",), timeout_s=timeout_s, label=f"work {i}") for i, spec in enumerate(specs)]
    return Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={t.id: t for t in tasks}, targets={})


def by_n(plan: Plan, res) -> dict[int, object]:
    return {t.config["n"]: res.results[tid] for tid, t in plan.tasks.items()}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie nobody reaped is dead


def children_of(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_queue_time_does_not_count_against_the_timeout(tmp_path, pool):
    # 100 tasks of 0.05 s on 2 workers take >= 2.5 s in all; each one's own 1 s budget is plenty
    plan = cpu_plan([{"sleep_s": 0.05}] * 100, timeout_s=1.0)
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_workers=2, cpu_pool=pool) as rt:
        res = rt.run(plan)
    assert res.ok, sorted({r.error for r in res.failed()})[:3]
    assert all(r.seconds < 1.0 for r in res.results.values())  # run time, not time since queued


def test_a_hung_task_is_killed_frees_its_slot_and_the_queue_behind_it_runs(tmp_path):
    plan = cpu_plan([{"sleep_s": 600, "pid_dir": str(tmp_path)}] + [{"sleep_s": 0.01}] * 5, timeout_s=2.0)
    start = time.monotonic()
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_workers=1) as rt:
        res = rt.run(plan)
        elapsed = time.monotonic() - start
        results = by_n(plan, res)
        assert results[0].status == "failed" and results[0].error.startswith("timeout: ")
        assert ws.outputs(results[0].task_id) is None
    assert all(results[i].status == "done" for i in range(1, 6))  # one slot: it was freed
    assert elapsed < 60
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2 and not any(alive(p) for p in pids)  # the handler and the tool it started


def test_thread_pool_writes_off_a_hung_thread_and_close_does_not_wait(tmp_path):
    plan = cpu_plan([{"sleep_s": 30}] + [{"sleep_s": 0.01}] * 3, timeout_s=0.5)
    start = time.monotonic()
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_workers=1, cpu_pool="thread") as rt:
        res = rt.run(plan)
    assert time.monotonic() - start < 15  # neither run() nor close() waited for the 30 s handler
    results = by_n(plan, res)
    assert results[0].status == "failed" and "cannot be killed" in results[0].error
    assert all(results[i].status == "done" for i in range(1, 4))


@pytest.fixture
def hanging_signal():
    register_recipe(Recipe("t_hang", synthesis="standin_cpu_work", qualification="derived",
                           synthesis_config={"sleep_s": 600}), replace=True)
    yield
    unregister_recipe("t_hang")


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_query_returns_promptly_with_the_rest_of_the_report(standins, hanging_signal, tmp_path, pool):
    start = time.monotonic()
    report = argus_rt.query(demo_program(), "gemm", ["latency", "t_hang"], workspace=tmp_path / "ws",
                            devices=[""], timeouts={"synthesize": 3}, cpu_pool=pool)
    assert time.monotonic() - start < 60
    unanswered = {u["signal"]: u["reason"] for u in report.unanswered}
    assert list(unanswered) == ["t_hang"] and "timeout" in unanswered["t_hang"]
    assert report.value("latency", "main/gemm", "count") == 8


CRASH_SCRIPT = """\
import json, sys
sys.path.insert(0, {tests!r})
import test_runtime_cpu_tasks as T
from argus_rt.runtime.scheduler import Runtime
from argus_rt.workspace import Workspace

plan = T.cpu_plan([{{"crash": "abort", "pid_dir": {pids!r}}}, {{"crash": "segfault"}}] + [{{"sleep_s": 0.3}}] * 6,
                  timeout_s=60)
with Workspace({ws!r}) as ws, Runtime(ws, devices=[""], cpu_workers=2) as rt:
    res = rt.run(plan)
print("RESULTS " + json.dumps({{t.config["n"]: [res.results[tid].status, res.results[tid].error]
                               for tid, t in plan.tasks.items()}}))
"""


def test_a_crashing_handler_fails_alone_and_its_siblings_finish(tmp_path):
    code = CRASH_SCRIPT.format(tests=str(TESTS), ws=str(tmp_path / "ws"), pids=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}: {proc.stderr[-2000:]}"
    results = {int(n): v for n, v in json.loads(lines[0][len("RESULTS "):]).items()}
    assert results[0][0] == "failed" and "SIGABRT" in results[0][1] and results[0][1].startswith("killed: ")
    assert results[1][0] == "failed" and "SIGSEGV" in results[1][1]
    assert all(results[i] == ["done", None] for i in range(2, 8))
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]  # the aborting handler and the tool it had started
    assert len(pids) == 2 and not any(alive(p) for p in pids)


KILLED_SCHEDULER_SCRIPT = """\
import sys
sys.path.insert(0, {tests!r})
import test_runtime_cpu_tasks as T
from test_runtime_standins import demo_program, standin_backends
import argus_rt
from argus_rt.recipes import Recipe, register_recipe

register_recipe(Recipe("t_hang", synthesis="standin_cpu_work", qualification="derived",
                       synthesis_config={{"sleep_s": 600, "pid_dir": {pids!r}}}))
with standin_backends():
    argus_rt.query(demo_program(sleep_s=600, only="trace"), "gemm", ["latency", "t_hang"], workspace={ws!r},
                   devices=[""])
"""


def test_a_sigkilled_scheduler_leaves_no_process_behind(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    code = KILLED_SCHEDULER_SCRIPT.format(tests=str(TESTS), pids=str(pids), ws=str(tmp_path / "ws"))
    scheduler = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(list(pids.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = children_of(scheduler.pid)
        assert len(list(pids.glob("*.pid"))) == 2, "the hanging handler never started"
        assert len(workers) >= 2  # the CPU pool process and the device worker (mid-collect)
    finally:
        os.kill(scheduler.pid, signal.SIGKILL)
        scheduler.wait()
    left = workers + [int(p.stem) for p in pids.glob("*.pid")]
    deadline = time.monotonic() + 20
    while any(alive(p) for p in left) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in left if alive(p)], "processes outlived their scheduler"


def test_a_handler_registered_inside_a_function_gets_an_error_that_says_so(tmp_path):
    @register_synthesis("standin_local_only")
    def _local(ctx):
        return {"facts": ctx.write_json("facts", {})}

    pv = demo_program()
    task = Task(kind="synthesize", op="standin_local_only", program=pv.id, outputs=("facts",), timeout_s=60)
    plan = Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={task.id: task}, targets={})
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""]) as rt:
        error = rt.run(plan).results[task.id].error
    assert "unknown synthesize handler 'standin_local_only'" in error
    assert "imported test_runtime_cpu_tasks: register the handler when its module is imported" in error
    assert "cpu_pool='thread'" in error
    with Workspace(tmp_path / "ws2") as ws, Runtime(ws, devices=[""], cpu_pool="thread") as rt:
        assert rt.run(plan).ok  # in-process threads see it


def test_argus_query_defaults_to_the_process_pool():
    from argus_rt.cli import build_parser

    args = build_parser().parse_args(["query", "some/program", "--region", "r", "--signals", "latency"])
    assert args.cpu_pool == "process"
