"""Device workers: one isolated process per device runs Collect tasks one at a time.

Each :class:`DeviceWorker` owns a child process started with the ``spawn`` context (CUDA is not
fork-safe) whose ``CUDA_VISIBLE_DEVICES`` is the worker's device, so the adapter sees exactly one
GPU as ``cuda:0``. A thread in the parent feeds it jobs from a shared queue, so a device never runs
two collections at once (runs are serialised per device) while devices work in parallel. The
child speaks JSON over a pipe (no pickled data). A child that dies (SIGKILL, segfault) or passes
its task's timeout fails that task only; the thread starts a fresh child for the next job.
"""
from __future__ import annotations

import importlib
import json
import multiprocessing as mp
import os
import queue
import shutil
import subprocess
import threading
import time
import traceback
from multiprocessing.connection import wait as mp_wait
from pathlib import Path
from typing import Callable

_STOP = None


def detect_devices() -> list[str]:
    """GPU indices to run workers on: ``CUDA_VISIBLE_DEVICES`` if set, else ``nvidia-smi -L``;
    ``[""]`` (one worker, no GPU) when there is none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        devs = [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
        return devs or [""]
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
        if count:
            return [str(i) for i in range(count)]
    return [""]


def _worker_main(conn, device: str) -> None:
    """Child process: receive a JSON job, run the adapter, reply with JSON."""
    os.environ["CUDA_VISIBLE_DEVICES"] = device
    while True:
        try:
            raw = conn.recv_bytes()
        except EOFError:
            return
        job = json.loads(raw)
        if job.get("stop"):
            return
        try:
            reply = {"status": "ok", "files": _run_collect(job)}
        except BaseException as exc:  # report every failure; the parent decides what it means
            reply = {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()}
        conn.send_bytes(json.dumps(reply).encode())


def _run_collect(job: dict) -> dict[str, str]:
    from ..backends.base import (BackendError, BackendUnavailableError, CollectContext, EffectMismatchError,
                                 get_backend)
    from ..program import ProgramVersion
    from ..scope import Scope
    from ..tasks import Task

    for module in job.get("modules", []):
        importlib.import_module(module)
    task = Task.from_dict(job["task"])
    program = ProgramVersion.from_dict(job["program"])
    adapter = get_backend(task.op, program.kind)
    undeclared = set(adapter.effects_for(task.config)) - set(task.effects)
    if undeclared:
        raise EffectMismatchError(f"backend {task.op!r} has effects {sorted(undeclared)} that the plan did not "
                                  f"declare for run {task.id} (declared: {list(task.effects)})")
    unsupported = set(task.scope) - set(adapter.collect_filters)
    if unsupported:
        raise BackendError(f"backend {task.op!r} cannot restrict a collection to scope field(s) {sorted(unsupported)}; "
                           f"it applies: {', '.join(sorted(adapter.collect_filters)) or 'none'}")
    ok, why = adapter.available()
    if not ok:
        raise BackendUnavailableError(f"backend {task.op!r} cannot run here: {why}")
    adapter.validate_config(task.config)
    outdir = Path(job["outdir"])
    outdir.mkdir(exist_ok=True)
    ctx = CollectContext(task=task, program=program, config=task.config,
                         scope=Scope.from_dict(task.scope), sampling=task.sampling,
                         inputs={k: Path(v) for k, v in job["inputs"].items()}, outdir=outdir,
                         device=os.environ.get("CUDA_VISIBLE_DEVICES"))
    files = adapter.collect(ctx) or {}
    out = {}
    for name, path in files.items():
        path = Path(path).resolve()
        if not path.is_relative_to(outdir.resolve()) or not path.is_file():
            raise ValueError(f"backend {task.op!r} output {name!r} = {path} is not a file under its outdir {outdir}")
        out[name] = str(path)
    return out


class DeviceWorker:
    """A parent-side thread that owns one device's child process and feeds it jobs."""

    def __init__(self, device: str, jobs: "queue.Queue", report: Callable[[str, dict], None]) -> None:
        self.device = device
        self.jobs = jobs
        self.report = report  # report(task_id, reply) from this thread
        self._ctx = mp.get_context("spawn")
        self._proc = None
        self._conn = None
        self.current: str | None = None
        self.started_processes = 0
        self.ready = threading.Event()  # set once the first child process is up
        self._thread = threading.Thread(target=self._loop, name=f"argus-device-{device or 'none'}", daemon=True)
        self._thread.start()

    # ---- child process --------------------------------------------------------------------
    def _ensure_child(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            return
        parent_conn, child_conn = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child_conn, self.device), daemon=True,
                                 name=f"argus-worker-{self.device or 'none'}")
        proc.start()
        child_conn.close()
        self._proc, self._conn = proc, parent_conn
        self.started_processes += 1

    def _kill_child(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=10)
            self._conn.close()
        self._proc = self._conn = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # ---- loop -----------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._ensure_child()  # start the child now: the first collection should not pay for it
        except Exception:
            pass  # the first job retries and reports the problem
        self.ready.set()
        while True:
            job = self.jobs.get()
            if job is _STOP:
                self._shutdown()
                return
            task_id = job["task"]["id"]
            self.current = task_id
            try:
                reply = self._run(job)
            except Exception as exc:  # pipe trouble: treat like a dead worker
                self._kill_child()
                reply = {"status": "killed", "error": f"worker failed: {type(exc).__name__}: {exc}"}
            self.current = None
            reply["attempt"] = job["outdir"]  # lets the scheduler drop answers of abandoned attempts
            self.report(task_id, reply)

    def _run(self, job: dict) -> dict:
        self._ensure_child()
        self._conn.send_bytes(json.dumps(job).encode())
        timeout = job["task"].get("timeout_s")
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = mp_wait([self._conn, self._proc.sentinel], timeout=left)
            if self._conn in ready:
                try:
                    return json.loads(self._conn.recv_bytes())
                except EOFError:
                    pass  # died while answering: fall through to the death report
            if ready:  # sentinel: the child died without answering
                self._proc.join(timeout=5)
                code = self._proc.exitcode
                self._kill_child()
                return {"status": "killed", "error": f"worker process for device {self.device!r} died "
                        f"(exit code {code}) while running the task"}
            if deadline is not None and time.monotonic() >= deadline:
                self._kill_child()
                return {"status": "timeout", "error": f"task exceeded its timeout of {timeout} s; worker killed"}

    def _shutdown(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send_bytes(json.dumps({"stop": True}).encode())
                self._proc.join(timeout=5)
            except (OSError, ValueError):
                pass
        self._kill_child()

    def stop(self) -> None:
        self.jobs.put(_STOP)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
