"""Fault injection, bounded: random SIGKILLs of the scheduler and of its workers while tasks publish.

After every kill the workspace must verify consistent, nothing it had committed may be lost or
changed, and a rerun must complete. Collections are CPU stand-ins (``standin_publish``, registered at
import: workers import this module by name) that write a few blobs each, so kills land in the middle
of work and of commits. The seed is fixed: a failure reproduces.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from argus_rt.backends.base import BackendAdapter, register_backend
from argus_rt.runtime.handlers import register_synthesis
from argus_rt.runtime.scheduler import Runtime
from argus_rt.tasks import Plan, Task
from argus_rt.workspace import Workspace
from argus_rt.workspace_check import verify
from test_runtime_cpu_tasks import alive, children_of
from test_runtime_standins import demo_program

TESTS = Path(__file__).resolve().parent
SCHEDULER_KILLS = 12
WORKER_KILLS = 40  # 52 in all
KILLS_PER_ROUND = 2
COLLECTS_PER_ROUND = 16
COLLECT_S = 0.02  # a round lasts long enough for a kill to land in it
BLOB_BYTES = 4 << 10


class PublishCollect(BackendAdapter):
    """Writes two blobs whose bytes follow from the task's config (a rerun reproduces them)."""

    name = "standin_publish"
    outputs = ("a", "b")
    needs_gpu = False

    def collect(self, ctx):
        rng = random.Random(f"{ctx.config['round']}/{ctx.config['n']}")
        time.sleep(COLLECT_S)
        out = {}
        for name in self.outputs:
            path = ctx.outdir / f"{name}.bin"
            path.write_bytes(rng.randbytes(BLOB_BYTES))  # opaque bytes (a first "{" is no JSON)
            out[name] = path
        return out


register_backend(PublishCollect(), replace=True)


@register_synthesis("standin_publish_join")
def _join(ctx):
    sizes = sorted(Path(p).stat().st_size for _dep, p in ctx.input_list("a"))
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": "join", "values": [],
                                              "extra": {"sizes": sizes}})}


def publish_plan(round_: int) -> Plan:
    """``COLLECTS_PER_ROUND`` collects and one join per pair of them; new task ids every round."""
    pv = demo_program()
    collects = [Task(kind="collect", op="standin_publish", program=pv.id, config={"round": round_, "n": i},
                     outputs=("a", "b"), timeout_s=60) for i in range(COLLECTS_PER_ROUND)]
    joins = [Task(kind="synthesize", op="standin_publish_join", program=pv.id, config={"round": round_},
                  deps=(collects[i].id, collects[i + 1].id), outputs=("facts",), timeout_s=60)
             for i in range(0, COLLECTS_PER_ROUND, 2)]
    tasks = collects + joins
    return Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={t.id: t for t in tasks}, targets={})


def committed(ws: Workspace, plans: list[Plan]) -> dict[tuple[str, str], str]:
    """(task id, output) -> sha256 of everything the workspace holds as done for ``plans``."""
    out = {}
    for plan in plans:
        for tid in plan.tasks:
            for name, rec in (ws.outputs(tid) or {}).items():
                out[(tid, name)] = rec.sha256
    return out


class Ledger:
    """What the workspace had committed so far: each check must find all of it, unchanged."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.plans: list[Plan] = []
        self.seen: dict[tuple[str, str], str] = {}

    def check(self, what: str) -> None:
        with Workspace(self.root) as ws:
            problems = verify(ws)
            assert problems == [], f"after {what}: {problems[:5]}"
            now = committed(ws, self.plans)
        lost = {k for k in self.seen if now.get(k) != self.seen[k]}
        assert not lost, f"after {what}: {len(lost)} committed outputs lost or changed, e.g. {sorted(lost)[:3]}"
        self.seen = now


DRIVER = """\
import sys
sys.path.insert(0, {tests!r})
import test_runtime_faults as T
from argus_rt.runtime.scheduler import Runtime
from argus_rt.workspace import Workspace

with Workspace({ws!r}) as ws, Runtime(ws, devices=[""], cpu_workers=2) as rt:
    rt.start_workers()
    print("running", flush=True)
    rt.run(T.publish_plan(int(sys.argv[1])))
print("finished", flush=True)
"""


def kill_scheduler_mid_run(root: Path, round_: int, rng: random.Random) -> bool:
    """Run ``round_`` in a scheduler process and SIGKILL it at a random moment; whether it was still running.
    Asserts that its worker processes die with it (no orphans)."""
    proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(tests=str(TESTS), ws=str(root)), str(round_)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=root.parent)
    workers: list[int] = []
    try:
        assert proc.stdout.readline().strip() == "running", "the scheduler process did not start"
        # start_workers() has returned: its device worker runs now. Taken again after the sleep for the CPU
        # pool's processes; a single snapshot after the sleep could fall in the Runtime's own shutdown,
        # when no worker is left (a flake seen in CI on 2026-12-02).
        started = children_of(proc.pid)
        time.sleep(rng.uniform(0.0, 0.6))
        was_running = proc.poll() is None
        workers = sorted(set(started) | set(children_of(proc.pid)))
    finally:
        proc.kill()  # SIGKILL
        proc.wait()
        proc.stdout.close()
    assert started, "the scheduler reported running without a worker process"
    deadline = time.monotonic() + 20
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphans = [p for p in workers if alive(p)]
    assert not orphans, f"round {round_}: worker processes {orphans} outlived their SIGKILLed scheduler"
    return was_running


def kill_workers_soon(rt: Runtime, rng: random.Random, killed: list[int]) -> threading.Thread:
    """SIGKILL ``KILLS_PER_ROUND`` random worker processes (device or CPU pool) at random moments."""
    delays = sorted(rng.uniform(0.05, 0.5) for _ in range(KILLS_PER_ROUND))
    choices = [rng.random() for _ in delays]

    def kill() -> None:
        start = time.monotonic()
        for delay, choice in zip(delays, choices):
            time.sleep(max(0.0, start + delay - time.monotonic()))
            pids = rt.worker_pids()
            if pids:
                try:
                    os.kill(pids[int(choice * len(pids))], signal.SIGKILL)
                    killed.append(pids[int(choice * len(pids))])
                except ProcessLookupError:
                    pass  # it had just died: not counted

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_random_sigkills_while_publishing_lose_nothing_and_reruns_complete(tmp_path):
    rng = random.Random(17)
    ledger = Ledger(tmp_path / "ws")
    Workspace(ledger.root).close()
    interrupted = 0
    with Workspace(ledger.root) as ws, Runtime(ws, devices=[""], cpu_workers=2) as rt:
        rt.start_workers()
        for round_ in range(SCHEDULER_KILLS):
            plan = publish_plan(round_)
            ledger.plans.append(plan)
            interrupted += kill_scheduler_mid_run(ledger.root, round_, rng)
            ledger.check(f"SIGKILL of the scheduler in round {round_}")
            rerun = rt.run(plan)
            assert rerun.ok, f"rerun of round {round_}: {[r.error for r in rerun.failed()][:3]}"
            ledger.check(f"the rerun of round {round_}")
        killed: list[int] = []
        failed_runs = 0
        round_ = SCHEDULER_KILLS
        while len(killed) < WORKER_KILLS:
            plan = publish_plan(round_)
            ledger.plans.append(plan)
            killer = kill_workers_soon(rt, rng, killed)
            first = rt.run(plan)
            killer.join()
            failed_runs += not first.ok
            assert all(r.error.startswith("killed: ") or r.status == "blocked" for r in first.failed()), \
                [r.error for r in first.failed()][:3]
            ledger.check(f"SIGKILL of a worker in round {round_}")
            rerun = rt.run(plan)
            assert rerun.ok, f"rerun of round {round_}: {[r.error for r in rerun.failed()][:3]}"
            ledger.check(f"the rerun of round {round_}")
            round_ += 1
    rounds = round_ - SCHEDULER_KILLS
    print(f"fault injection: {SCHEDULER_KILLS} scheduler kills ({interrupted} mid-run), {len(killed)} worker kills "
          f"in {rounds} rounds ({failed_runs} with a killed task), {len(ledger.seen)} outputs kept")
    # the kills hit work in progress, not idle processes only
    assert interrupted >= SCHEDULER_KILLS // 2 and failed_runs >= rounds // 2, (interrupted, failed_runs, rounds)
    assert len(ledger.seen) == round_ * (COLLECTS_PER_ROUND * 2 + COLLECTS_PER_ROUND // 2)
