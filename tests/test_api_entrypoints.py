"""``argus_rt.query`` from ordinary code: a script without a main guard, stdin, ``python -c``, a console.

Worker processes must never re-import the caller's ``__main__`` (multiprocessing ``spawn`` did: a
guard-less script ran its top level, nested query included, again in every worker; stdin code could
not start a worker at all). Each entry point below runs the same user code in a fresh interpreter;
its top level appends one line to a log, so a second run of it shows up as a second line.

The stand-in ``standin_chatty`` backend (registered at import: workers import this module by name)
prints on stdout and stderr, writes a fake reply line to fd 1, reports its environment and can
crash its worker once (``os.abort``, a segfault, SIGKILL).
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from argus_rt.backends.base import BackendAdapter, register_backend
from argus_rt.gpu_env import MULTICAST_OFF
from argus_rt.planner import plan_query
from argus_rt.program import ProgramVersion
from argus_rt.recipes import Evidence, Recipe, register_recipe, unregister_recipe
from argus_rt.regions import RegionTree
from argus_rt.runtime.handlers import register_synthesis
from argus_rt.runtime.scheduler import Runtime
from argus_rt.workspace import Workspace

TESTS = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 120

USER_CODE = """\
import json, sys
sys.path.insert(0, {tests!r})
import argus_rt
from test_runtime_standins import demo_program, standin_backends

with open({log!r}, "a") as fh:
    fh.write("top level ran\\n")

with standin_backends():
    report = argus_rt.query(demo_program(), region="gemm", signals=["latency"], workspace={ws!r},
                            devices=[""], cpu_pool={pool!r})

print("REPORT " + json.dumps({{"unanswered": report.unanswered, "collect_runs": report.execution["collect_runs"],
                              "count": report.value("latency", "main/gemm", "count")}}))
"""

# notebook-like: the code is fed line by line to a console; __main__ (``-c``) has no __file__
CONSOLE_DRIVER = """\
import code, sys
console = code.InteractiveConsole()
for line in open(sys.argv[1]).read().splitlines():
    console.push(line)
console.push("")
"""


def run_user_code(code: str, entry: str, tmp_path: Path) -> subprocess.CompletedProcess:
    if entry == "script":
        script = tmp_path / "user_script.py"
        script.write_text(code)
        argv, stdin = [sys.executable, str(script)], None
    elif entry == "stdin":  # python - <<EOF
        argv, stdin = [sys.executable, "-"], code
    elif entry == "dash_c":
        argv, stdin = [sys.executable, "-c", code], None
    elif entry == "console":
        lines = tmp_path / "cells.py"
        lines.write_text(code)
        argv, stdin = [sys.executable, "-c", CONSOLE_DRIVER, str(lines)], None
    else:
        raise ValueError(f"unknown entry point {entry!r}")
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=tmp_path, timeout=RUN_TIMEOUT_S)


def report_of(proc: subprocess.CompletedProcess) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert len(lines) == 1, f"rc {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    return json.loads(lines[0][len("REPORT "):])


@pytest.mark.parametrize("pool", ["thread", "process"])
@pytest.mark.parametrize("entry", ["script", "stdin", "dash_c", "console"])
def test_query_from_user_code_runs_its_top_level_once(entry, pool, tmp_path):
    log = tmp_path / "toplevel.log"
    code = USER_CODE.format(tests=str(TESTS), log=str(log), ws=str(tmp_path / "ws"), pool=pool)
    rep = report_of(run_user_code(code, entry, tmp_path))
    assert rep["unanswered"] == [] and rep["collect_runs"] == 1
    assert rep["count"] == 8  # the stand-in's 4 iterations x 2 SMs
    assert log.read_text().splitlines() == ["top level ran"]


MAIN_BACKEND_CODE = """\
import json, sys
sys.path.insert(0, {tests!r})
import argus_rt
from argus_rt.backends.base import BackendAdapter, register_backend
from argus_rt.gpu_env import MULTICAST_OFF
from argus_rt.recipes import Evidence, Recipe, register_recipe
from test_runtime_standins import demo_program

with open({log!r}, "a") as fh:
    fh.write("top level ran\\n")

class InScript(BackendAdapter):
    name = "standin_in_script"
    outputs = ("done",)
    needs_gpu = False

register_backend(InScript(), replace=True)
register_recipe(Recipe("in_script", synthesis="standin_chatty_facts", qualification="observed",
                       evidence=(Evidence("standin_in_script", outputs=("done",), variant="base"),)), replace=True)
report = argus_rt.query(demo_program(), region="gemm", signals=["in_script"], workspace={ws!r}, devices=[""])
print("REPORT " + json.dumps({{"unanswered": report.unanswered}}))
"""


def test_a_backend_defined_in_the_script_is_refused_with_a_clear_reason(tmp_path):
    log = tmp_path / "toplevel.log"
    code = MAIN_BACKEND_CODE.format(tests=str(TESTS), log=str(log), ws=str(tmp_path / "ws"))
    rep = report_of(run_user_code(code, "script", tmp_path))
    [miss] = rep["unanswered"]
    assert miss["signal"] == "in_script" and "calling script (__main__)" in miss["reason"]
    assert log.read_text().splitlines() == ["top level ran"]


# ---- the chatty stand-in: stdout noise, environment, crashes --------------------------------
CRASHES = {
    "abort": os.abort,
    "segfault": lambda: ctypes.string_at(0),
    "sigkill": lambda: os.kill(os.getpid(), signal.SIGKILL),
}


def _crash_once(spec: dict, key: str) -> None:
    crash = spec.get(key)
    if crash and not os.path.exists(crash["marker"]):
        Path(crash["marker"]).write_text("crashed once")
        print(f"chatty: crashing with {crash['how']}", flush=True)
        CRASHES[crash["how"]]()


class StandinChatty(BackendAdapter):
    name = "standin_chatty"
    outputs = ("done",)
    needs_gpu = False

    def collect(self, ctx):
        print("chatty: a line on stdout", flush=True)
        os.write(1, b'{"status": "ok", "files": {}}\n')  # looks like a reply: must not be taken for one
        print("chatty: a line on stderr", file=sys.stderr, flush=True)
        _crash_once(ctx.program.launch["standin"], "crash_collect_once")
        env = {k: os.environ.get(k) for k in (*MULTICAST_OFF, "CUDA_VISIBLE_DEVICES")}
        return {"done": ctx.write_json("done", {"env": env, "pid": os.getpid()})}


register_backend(StandinChatty(), replace=True)


@register_synthesis("standin_chatty_facts")
def _chatty_facts(ctx):
    print("chatty synthesis: a line on stdout", flush=True)
    _crash_once(ctx.program.launch["standin"], "crash_synth_once")
    runs = [json.loads(p.read_text()) for _dep, p in ctx.input_list("done")]
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": "chatty", "values": [],
                                              "extra": {"runs": runs}})}


def chatty_program(**standin) -> ProgramVersion:
    tree = RegionTree("chatty")
    tree.add("main/gemm")
    return ProgramVersion.from_sources("chatty", {"chatty.cu": "// synthetic"}, kind="standin",
                                       launch={"standin": standin}, regions=tree, compiler="none")


@pytest.fixture
def chatty():
    register_recipe(Recipe("chatty", synthesis="standin_chatty_facts", qualification="observed",
                           evidence=(Evidence("standin_chatty", outputs=("done",), variant="base"),)), replace=True)
    yield
    unregister_recipe("chatty")


def test_worker_output_cannot_corrupt_replies_and_multicast_stays_off(chatty, tmp_path, monkeypatch, capfd):
    for name in MULTICAST_OFF:
        monkeypatch.setenv(name, "unsafe")  # the parent's value must not reach a worker
    plan = plan_query(chatty_program(), "gemm", ["chatty"])
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=["7"], cpu_pool="process") as rt:
        res = rt.run(plan)
    assert res.ok, [r.error for r in res.failed()]
    [run] = res.outputs(plan.targets["chatty"])["facts"].read_json()["extra"]["runs"]
    assert run["env"] == {**MULTICAST_OFF, "CUDA_VISIBLE_DEVICES": "7"}
    err = capfd.readouterr().err  # what workers print reaches the user, labelled, on stderr
    assert "[worker process for device '7'] chatty: a line on stdout" in err
    assert "[worker process for device '7'] chatty: a line on stderr" in err
    assert "chatty synthesis: a line on stdout" in err


@pytest.mark.parametrize("how, signame, last_words", [
    ("abort", "SIGABRT", "Fatal Python error: Aborted in File"),
    ("segfault", "SIGSEGV", "Fatal Python error: Segmentation fault in File"),
    ("sigkill", "SIGKILL", "chatty: crashing with sigkill"),
])
def test_a_crashing_worker_fails_its_task_and_a_fresh_one_runs_the_next(chatty, tmp_path, how, signame, last_words):
    marker = tmp_path / "crashed"
    plan = plan_query(chatty_program(crash_collect_once={"marker": str(marker), "how": how}), "gemm", ["chatty"])
    collect = next(t.id for t in plan.tasks.values() if t.op == "standin_chatty")
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""]) as rt:
        first = rt.run(plan)
        assert marker.exists()
        error = first.results[collect].error
        assert first.results[collect].status == "failed"
        assert error.startswith("killed: worker process for device '' died") and signame in error
        assert "; last output: " + last_words in error
        assert "\n" not in error  # one line; the worker's last output goes to the failure record
        assert "chatty: crashing with " + how in ws.task_status(collect)["error"]
        again = rt.rerun_failed(first)
        assert again.ok and again.executed["collect"] == 1
        assert rt.workers[0].started_processes == 2


def test_a_crashing_cpu_pool_process_fails_its_task_and_the_pool_recovers(chatty, tmp_path):
    marker = tmp_path / "crashed"
    plan = plan_query(chatty_program(crash_synth_once={"marker": str(marker), "how": "sigkill"}), "gemm", ["chatty"])
    target = plan.targets["chatty"]
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_pool="process", cpu_workers=1) as rt:
        first = rt.run(plan)
        assert marker.exists() and first.results[target].status == "failed"
        assert first.results[target].error.startswith("killed: CPU pool process 0 died") and "SIGKILL" in \
            first.results[target].error
        again = rt.rerun_failed(first)
        assert again.ok and again.executed == {"synthesize": 1}
