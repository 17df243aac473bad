"""Device workers: one isolated process per device runs Collect tasks one at a time.

Each :class:`DeviceWorker` owns a child process (``python -m argus_rt.runtime.worker_process
collect``, see :mod:`.worker_process`: it never re-imports the caller's script) whose
``CUDA_VISIBLE_DEVICES`` is the worker's device, so the adapter sees exactly one GPU as ``cuda:0``.
A thread in the parent feeds it jobs from a shared queue, so a device never runs two collections at
once (runs are serialised per device) while devices work in parallel. The child speaks JSON over
dedicated pipes (no pickled data). A child that dies (SIGKILL, segfault, abort) or passes its
task's timeout fails that task only; the thread starts a fresh child for the next job.
"""
from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from .staging import StagingRecycler, claim_staging
from .worker_process import WARM_ENV, WorkerSlot, import_job_modules

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


WARM_WORKERS_ENV = "ARGUS_WARM_WORKERS"  # "1" / "0": warm device workers (or not) whatever the host has


def gpu_driver_present() -> bool:
    """Whether this host has an NVIDIA driver loaded (``/proc/driver/nvidia/version``)."""
    return os.path.exists("/proc/driver/nvidia/version")


def warm_workers_default() -> bool:
    """Whether device workers start with the :class:`~argus_rt.runtime.scheduler.Runtime` and warm
    up: ``$ARGUS_WARM_WORKERS`` (1 or 0) if set, else where this host has an NVIDIA driver."""
    value = os.environ.get(WARM_WORKERS_ENV, "").strip()
    return value == "1" if value in ("0", "1") else gpu_driver_present()


def warm_up() -> dict:
    """In a device worker child, in a background thread as it starts (``$ARGUS_WORKER_WARM=1``,
    :mod:`.worker_process`): import torch, open this device's CUDA context (torch's primary
    context, which :mod:`argus_rt.launch` shares) and call each registered kind's ``warm_up`` hook
    (:mod:`argus_rt.kinds.registry`; the Triton kind's imports Triton), so that the first collection
    does not pay seconds for them (a task that needs torch meanwhile waits for the import to finish).
    Prints one line with the seconds of each step (a kind's step is its name); returns them."""
    from ..kinds.registry import kinds

    seconds, last = {}, time.perf_counter()

    def lap(step: str, done: bool = True) -> None:
        nonlocal last
        now = time.perf_counter()
        if done:
            seconds[step] = round(now - last, 3)
        last = now

    import torch

    lap("torch")
    if os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1") and torch.cuda.is_available():
        torch.empty(1, device="cuda")  # creates and binds the primary context
        lap("cuda_context")
    for kind in kinds():
        if kind.warm_up:
            lap(kind.name, bool(kind.call("warm_up")))  # False: not installed, nothing to time
    print("argus worker: warmed up (" + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()) + ")",
          file=sys.stderr, flush=True)
    return seconds


def run_collect_job(job: dict) -> dict:
    """In the worker child: run one Collect job, ``{"status": "ok", "files": {...}}``; raises when the
    task fails (the child's loop replies with the error)."""
    return {"status": "ok", "files": _run_collect(job)}


def _run_collect(job: dict) -> dict[str, str]:
    from ..backends.base import BackendError, BackendUnavailableError, CollectContext, EffectMismatchError, get_backend
    from ..program import ProgramVersion
    from ..scope import Scope
    from ..tasks import Task

    import_job_modules(job.get("modules", []))
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
    claim_staging(outdir, job.get("recycle"), exist_ok=True)
    ctx = CollectContext(task=task, program=program, config=task.config,
                         scope=Scope.from_dict(task.scope), sampling=task.sampling,
                         inputs={k: Path(v) for k, v in job["inputs"].items()}, outdir=outdir,
                         device=os.environ.get("CUDA_VISIBLE_DEVICES"))
    files = adapter.collect(ctx) or {}
    out = {}
    real_outdir = outdir.resolve()  # once per job, not per output
    for name, path in files.items():
        path = Path(path).resolve()
        if not path.is_relative_to(real_outdir) or not path.is_file():
            raise ValueError(f"backend {task.op!r} output {name!r} = {path} is not a file under its outdir {outdir}")
        out[name] = str(path)
    return out


class DeviceWorker:
    """A parent-side thread that owns one device's child process and feeds it jobs."""

    def __init__(self, device: str, jobs: "queue.Queue", report: Callable[[str, dict], None],
                 staging: StagingRecycler | None = None, warm: bool = False) -> None:
        self.device = device
        self.staging = staging  # emptied staging directories: the child renames one instead of mkdir
        self.jobs = jobs
        self.report = report  # report(task_id, reply) from this thread
        env = {"CUDA_VISIBLE_DEVICES": device}
        if warm:  # each child (a replacement too) imports torch and opens its context as it starts
            env[WARM_ENV] = "1"
        self._slot = WorkerSlot("collect", name=f"worker process for device {device!r}", env=env)
        self.current: str | None = None
        self.ready = threading.Event()  # set once the first child process is up
        self._thread = threading.Thread(target=self._loop, name=f"argus-device-{device or 'none'}", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int | None:
        return self._slot.pid

    @property
    def started_processes(self) -> int:
        return self._slot.started_processes

    def _loop(self) -> None:
        try:
            self._slot.ensure()  # start the child now: the first collection should not pay for it
        except Exception:
            pass  # the first job retries and reports the problem
        self.ready.set()
        while True:
            job = self.jobs.get()
            if job is _STOP:
                self._slot.close()
                return
            task_id = job["task"]["id"]
            if self.staging is not None:
                job["recycle"] = self.staging.take()
            self.current = task_id
            reply = self._slot.run(job, job["task"].get("timeout_s"))
            self.current = None
            reply["attempt"] = job["outdir"]  # lets the scheduler drop answers of abandoned attempts
            self.report(task_id, reply)

    def stop(self) -> None:
        """Stop after the current job; a job still running is killed (close must not wait for a hung one)."""
        self.jobs.put(_STOP)
        if self.current is not None:
            self._slot.interrupt()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
