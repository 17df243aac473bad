"""The process CPU pool: Transform / Synthesize / Control handlers run from JSON-able jobs.

Used when the runtime's CPU pool is a process pool (``Runtime(cpu_pool="process")``): Python-heavy
handlers (trace parsing, synthesis) then run on several cores instead of sharing one GIL. The pool
is a few ``python -m argus_rt.runtime.worker_process cpu`` children (:mod:`.worker_process`), never
a multiprocessing pool, whose spawned processes would re-run the caller's script. A job names the
modules to import so that handlers registered outside the built-ins exist in the child too.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from pathlib import Path

from .queues import drain
from .staging import StagingRecycler, claim_staging
from .worker_process import WorkerSlot, import_job_modules

_STOP = None


def run_cpu_job(job: dict) -> dict:
    """``job``: task, programs (id -> ProgramVersion dict), inputs, outdir, deps (id -> task dict),
    modules. Returns ``{"status": "ok", "files": {...}}``; raises when the handler fails."""
    from ..program import ProgramVersion
    from ..tasks import Task
    from .handlers import TaskContext, UnknownHandlerError, get_handler

    import_job_modules(job.get("modules", []))
    task = Task.from_dict(job["task"])
    cache: dict = {}

    def program(pid: str):
        if pid not in cache:
            cache[pid] = ProgramVersion.from_dict(job["programs"][pid])
        return cache[pid]

    outdir = Path(job["outdir"])
    claim_staging(outdir, job.get("recycle"))  # a fresh, empty directory either way
    ctx = TaskContext(task=task, program=program(task.program), programs=program,
                      inputs={k: Path(v) for k, v in job["inputs"].items()}, outdir=outdir,
                      deps={d: Task.from_dict(t) for d, t in job["deps"].items()})
    try:
        handler = get_handler(task.kind, task.op, ctx.program.kind)
    except UnknownHandlerError as exc:  # registered in the parent, but not by importing its module
        imported = ", ".join(job.get("modules", [])) or "no module"
        raise UnknownHandlerError(f"{exc}; this CPU pool process imported {imported}: register the handler when "
                                  "its module is imported (not inside a function), or run with cpu_pool='thread'"
                                  ) from None
    files = handler(ctx) or {}
    return {"status": "ok", "files": {k: str(v) for k, v in files.items()}}


class CpuProcessPool:
    """``workers`` child processes fed from one queue; each child is started on its first job.

    ``submit(run_cpu_job, job)`` returns a Future of the reply dict. A child that dies or passes
    the task's ``timeout_s`` (counted from when the child takes the job, not from the queue) fails
    that job only (reply status ``killed`` / ``timeout``) and is replaced for the next one; the
    Future itself never holds an exception.
    """

    def __init__(self, workers: int, staging: StagingRecycler | None = None) -> None:
        if workers < 1:
            raise ValueError(f"a CPU process pool needs at least 1 worker, got {workers}")
        self._staging = staging  # emptied staging directories: a job's child renames one instead of mkdir
        self._jobs: "queue.Queue" = queue.Queue()
        self._slots = [WorkerSlot("cpu", name=f"CPU pool process {i}") for i in range(workers)]
        self._busy: set[int] = set()  # indices of slots running a job
        self._threads = [threading.Thread(target=self._loop, args=(i,), name=f"argus-cpu-process-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()
        self._closed = False

    def submit(self, fn, job: dict) -> Future:
        # children run jobs by role, not by a pickled callable: only run_cpu_job can be submitted
        if fn is not run_cpu_job:
            raise TypeError(f"CpuProcessPool runs only run_cpu_job, not {getattr(fn, '__qualname__', fn)!r}")
        if self._closed:
            raise RuntimeError("CpuProcessPool is shut down")
        future: Future = Future()
        self._jobs.put((job, future))
        return future

    def pids(self) -> list[int]:
        """Process ids of the live pool processes."""
        return [slot.pid for slot in self._slots if slot.pid is not None]

    def shutdown(self, wait: bool = True, join_s: float = 10.0) -> None:
        """Cancel queued jobs, kill running ones (a hung handler must not hold up the caller), stop."""
        self._closed = True
        for item in drain(self._jobs):
            if item is not _STOP:
                item[1].cancel()
        for _ in self._threads:
            self._jobs.put(_STOP)
        for i in list(self._busy):
            self._slots[i].interrupt()
        if wait:
            for thread in self._threads:
                thread.join(join_s)

    def _loop(self, index: int) -> None:
        slot = self._slots[index]
        while True:
            item = self._jobs.get()
            if item is _STOP:
                slot.close()
                return
            job, future = item
            if future.set_running_or_notify_cancel():
                if self._staging is not None:
                    job["recycle"] = self._staging.take()
                self._busy.add(index)
                try:
                    reply = slot.run(job, job["task"].get("timeout_s"))
                finally:
                    self._busy.discard(index)
                future.set_result(reply)
