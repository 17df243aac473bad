"""The central scheduler: dispatch each task as soon as its inputs exist.

:meth:`Runtime.run` walks a plan. A task whose outputs the workspace already holds (same task id,
so same program version, region, scope, configuration and inputs) is *reused* without running.
Otherwise Transform / Synthesize / Control tasks go to a CPU thread pool (their heavy work —
compilers, parsers in native code — runs outside the GIL) and Collect tasks to the device workers
(:mod:`.workers`). When a Control task finishes, its expander may add branches; their fed tasks
become extra inputs of the Control task's dependents, which are released only when those arrive.

A failed, killed or timed-out task marks its transitive dependents ``blocked`` and nothing else:
independent branches finish. Running the same plan again re-executes only what is not done
(:meth:`Runtime.rerun_failed` is the same with a check that only failed/blocked tasks remain).
"""
from __future__ import annotations

import json
import queue
import shutil
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..program import ProgramVersion
from ..tasks import Plan, Task
from ..workspace import Workspace
from .cpu_jobs import CpuProcessPool, run_cpu_job
from .handlers import HandlerError, TaskContext, get_handler, handler_module
from .progress import Progress
from .workers import DeviceWorker, detect_devices

FINAL = ("done", "reused", "failed", "blocked")


@dataclass
class TaskResult:
    task_id: str
    kind: str
    op: str
    status: str  # done | reused | failed | blocked
    seconds: float = 0.0
    error: str | None = None
    outputs: dict = field(default_factory=dict)  # name -> OutputRecord


@dataclass
class RunResult:
    plan: Plan  # including the branches Control tasks added
    results: dict[str, TaskResult]
    wall_s: float

    def count(self, status: str, kind: str | None = None) -> int:
        return sum(1 for r in self.results.values() if r.status == status and (kind is None or r.kind == kind))

    @property
    def executed(self) -> Counter:
        """Tasks that actually ran (done or failed), per kind."""
        return Counter(r.kind for r in self.results.values() if r.status in ("done", "failed"))

    @property
    def ok(self) -> bool:
        return all(r.status in ("done", "reused") for r in self.results.values())

    def failed(self) -> list[TaskResult]:
        return [r for r in self.results.values() if r.status in ("failed", "blocked")]

    def outputs(self, task_id: str) -> dict:
        return self.results[task_id].outputs

    def summary(self) -> str:
        c = Counter(r.status for r in self.results.values())
        return ", ".join(f"{n} {s}" for s, n in sorted(c.items())) + f" in {self.wall_s:.2f} s"


class Runtime:
    """Executes plans against a workspace. Reuse one Runtime for many plans (workers stay warm).

    ``devices``: CUDA device indices for Collect workers (default: detected; ``[""]`` = one
    worker without a GPU). ``cpu_workers``: size of the Transform/Synthesize/Control pool, made of
    threads (``cpu_pool="thread"``, default: cheapest dispatch) or worker processes
    (``cpu_pool="process"``: Python-heavy handlers use several cores).
    """

    def __init__(self, workspace: Workspace, *, devices: list[str] | None = None, cpu_workers: int = 2,
                 progress: bool = False, extra_modules: tuple[str, ...] = (), cpu_pool: str = "thread") -> None:
        self.ws = workspace
        self.devices = list(devices) if devices is not None else detect_devices()
        self.cpu_workers = cpu_workers
        self.progress = progress
        self.extra_modules = tuple(extra_modules)  # imported by workers before each job
        self._events: "queue.Queue" = queue.Queue()
        self._jobs: "queue.Queue" = queue.Queue()
        if cpu_pool not in ("thread", "process"):
            raise ValueError(f"unknown cpu_pool {cpu_pool!r}; valid: 'thread', 'process'")
        self.cpu_pool = cpu_pool
        self._pool = self._new_pool()
        self._janitor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="argus-janitor")
        self._workers: list[DeviceWorker] | None = None
        self._lock = threading.Lock()

    # ---- lifecycle ------------------------------------------------------------------------
    def _new_pool(self):
        if self.cpu_pool == "process":  # fresh interpreters: handlers may initialise CUDA-using libraries
            return CpuProcessPool(self.cpu_workers)
        return ThreadPoolExecutor(max_workers=self.cpu_workers, thread_name_prefix="argus-cpu")

    @property
    def workers(self) -> list[DeviceWorker]:
        if self._workers is None:  # started on first collect: plans without one never spawn
            self._workers = [DeviceWorker(d, self._jobs, self._report_collect) for d in self.devices]
        return self._workers

    def start_workers(self, timeout: float = 60.0) -> None:
        """Start every device worker's process now and wait until they are up."""
        for w in self.workers:
            w.ready.wait(timeout)

    def close(self) -> None:
        if self._workers is not None:
            for w in self._workers:
                w.stop()
            for w in self._workers:
                w.join(timeout=15)
            self._workers = None
        self._pool.shutdown(wait=True)
        self._janitor.shutdown(wait=True)

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _report_collect(self, task_id: str, reply: dict) -> None:
        self._events.put((task_id, reply))

    # ---- running --------------------------------------------------------------------------
    def rerun_failed(self, previous: RunResult) -> RunResult:
        """Run again only what failed or was blocked last time (everything done is reused)."""
        return self.run(previous.plan)

    def run(self, plan: Plan) -> RunResult:
        """Execute ``plan`` (one run at a time per Runtime; the workers and pools are shared)."""
        plan = Plan.from_dict(plan.to_dict())  # our own copy: branches get added to it
        with self._lock:
            return _Execution(self, plan).run()


class _Execution:
    """State of one :meth:`Runtime.run`: owned by the calling thread, events come from workers."""

    def __init__(self, rt: Runtime, plan: Plan) -> None:
        self.rt, self.ws, self.plan = rt, rt.ws, plan
        self.deps: dict[str, set[str]] = {tid: set(t.deps) for tid, t in plan.tasks.items()}
        self.users: dict[str, set[str]] = {tid: set() for tid in plan.tasks}
        for tid, deps in self.deps.items():
            for d in deps:
                self.users[d].add(tid)
        self.results: dict[str, TaskResult] = {}
        self.running: dict[str, tuple] = {}  # id -> (start, staging dir, exact inputs)
        self.ready: list[str] = []
        self.timed_out: set[str] = set()
        self._programs: dict[str, ProgramVersion] = {}

    def program(self, pid: str) -> ProgramVersion:
        pv = self._programs.get(pid)
        if pv is None:
            pv = self._programs[pid] = ProgramVersion.from_dict(self.plan.programs[pid])
        return pv

    def run(self) -> RunResult:
        start = time.perf_counter()
        for pdata in self.plan.programs.values():
            self.ws.put_program(pdata)
        with Progress(enabled=self.rt.progress, total=len(self.plan.tasks)) as self.bar:
            self.ready = [tid for tid in self.plan.tasks if not self.deps[tid]]
            self._drain()
            last_check = time.perf_counter()
            while self.running:
                try:
                    tid, reply = self.rt._events.get(timeout=0.05)
                except queue.Empty:
                    tid, reply = None, None
                # drop late answers of attempts that already timed out (maybe in an earlier run)
                if tid in self.running and reply.get("attempt") == str(self.running[tid][1]):
                    self._finish(tid, reply)
                if time.perf_counter() - last_check > 0.05:  # even while events keep arriving
                    self._check_cpu_timeouts()
                    last_check = time.perf_counter()
                self._drain()
        for tid, task in self.plan.tasks.items():  # never dispatched: a dependency did not finish
            if tid not in self.results:
                self.results[tid] = TaskResult(tid, task.kind, task.op, "blocked", error="dependency did not finish")
        return RunResult(self.plan, self.results, time.perf_counter() - start)

    # ---- dispatch -------------------------------------------------------------------------
    def _drain(self) -> None:
        # iterative, not recursive: a long chain of reused tasks must not hit the recursion limit
        while self.ready:
            tid = self.ready.pop(0)
            if tid not in self.results and tid not in self.running:
                self._dispatch(tid)

    def _inputs(self, tid: str) -> tuple[dict[str, Path], list[tuple[str, str, str]]]:
        inputs: dict[str, Path] = {}
        exact: list[tuple[str, str, str]] = []
        seen: Counter = Counter()
        for dep in sorted(self.deps[tid]):
            for name, rec in self.results[dep].outputs.items():
                inputs[f"{dep}/{name}"] = rec.path
                exact.append((dep, name, rec.sha256))
                seen[name] += 1
        for dep in sorted(self.deps[tid]):
            for name, rec in self.results[dep].outputs.items():
                if seen[name] == 1:
                    inputs[name] = rec.path
        return inputs, exact

    def _dispatch(self, tid: str) -> None:
        task = self.plan.tasks[tid]
        cached = self.ws.outputs(tid)
        if cached is not None and set(task.outputs) <= set(cached):
            self.results[tid] = TaskResult(tid, task.kind, task.op, "reused", outputs=cached)
            self.bar.advance(task, "reused")
            self._after_success(task)
            return
        inputs, exact = self._inputs(tid)
        staging = self.ws.new_staging(tid, create=False)  # made by whoever executes the task
        self.running[tid] = (time.perf_counter(), staging, exact)
        if task.kind == "collect":
            modules = [m for m in (_backend_module(task.op, self.program(task.program).kind),
                                   *self.rt.extra_modules) if m]
            job = {"task": task.to_dict(), "program": self.plan.programs[task.program],
                   "inputs": {k: str(v) for k, v in inputs.items()}, "outdir": str(staging), "modules": modules}
            self.rt.workers  # start workers on first use
            self.rt._jobs.put(job)
        elif self.rt.cpu_pool == "process":
            self._submit_process(task, inputs, staging)
        else:
            self.rt._pool.submit(self._run_cpu, task, inputs, staging)
        self.bar.started(task)

    def _submit_process(self, task: Task, inputs: dict[str, Path], staging: Path) -> None:
        deps = {d: self.plan.tasks[d] for d in self.deps[task.id]}
        pids = {task.program} | {t.program for t in deps.values()}
        kind = self.program(task.program).kind
        modules = [m for m in (handler_module(task.kind, task.op, kind), *self.rt.extra_modules) if m]
        job = {"task": task.to_dict(), "programs": {p: self.plan.programs[p] for p in pids if p in self.plan.programs},
               "inputs": {k: str(v) for k, v in inputs.items()}, "outdir": str(staging),
               "deps": {d: t.to_dict() for d, t in deps.items()}, "modules": modules}
        events = self.rt._events

        def done(fut, tid=task.id, attempt=str(staging)):
            exc = fut.exception()
            reply = fut.result() if exc is None else \
                {"status": "killed", "error": f"CPU pool process failed: {type(exc).__name__}: {exc}"}
            reply["attempt"] = attempt
            events.put((tid, reply))

        fut = self.rt._pool.submit(run_cpu_job, job)  # a dead pool process is replaced by the pool itself
        fut.add_done_callback(done)

    def _run_cpu(self, task: Task, inputs: dict[str, Path], staging: Path) -> None:
        try:
            staging.mkdir()
            handler = get_handler(task.kind, task.op, self.program(task.program).kind)
            ctx = TaskContext(task=task, program=self.program(task.program), programs=self.program,
                              inputs=inputs, outdir=staging,
                              deps={d: self.plan.tasks[d] for d in self.deps[task.id]})
            files = handler(ctx) or {}
            reply = {"status": "ok", "files": {k: str(v) for k, v in files.items()}}
        except BaseException as exc:
            reply = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        reply["attempt"] = str(staging)
        self.rt._events.put((task.id, reply))

    def _check_cpu_timeouts(self) -> None:
        now = time.perf_counter()
        for tid, (start, _staging, _exact) in list(self.running.items()):
            task = self.plan.tasks[tid]
            if task.kind != "collect" and task.timeout_s and now - start > task.timeout_s:
                # a thread cannot be killed: its late result is dropped and its outputs never committed
                self._finish(tid, {"status": "timeout", "error": f"task exceeded its timeout of {task.timeout_s} s"})

    # ---- completion -----------------------------------------------------------------------
    def _finish(self, tid: str, reply: dict) -> None:
        task = self.plan.tasks[tid]
        start, staging, exact = self.running.pop(tid)
        seconds = time.perf_counter() - start
        if reply.get("status") == "ok":
            try:
                files = {name: Path(p) for name, p in reply["files"].items()}
                missing = set(task.outputs) - set(files)
                if missing:
                    raise HandlerError(f"{task.describe()} did not produce declared output(s) {sorted(missing)}")
                self._check_program_output(task, files)
                outputs = self.ws.commit(task, files, exact, {"seconds": seconds})
            except Exception as exc:
                reply = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            else:
                # off the scheduler thread: directory syscalls are slow on some filesystems
                self.rt._janitor.submit(shutil.rmtree, staging, True)  # undeclared leftovers go with it
                self.results[tid] = TaskResult(tid, task.kind, task.op, "done", seconds, outputs=outputs)
                self.bar.advance(task, "done")
                try:
                    self._after_success(task)
                except Exception as exc:  # expansion failed: the Control task failed
                    self.results[tid] = TaskResult(tid, task.kind, task.op, "failed", seconds,
                                                   error=f"expansion failed: {type(exc).__name__}: {exc}")
                    self._block_dependents(tid)
                return
        error = reply.get("error", "unknown error")
        if reply.get("status") == "killed":
            error = "killed: " + error
        elif reply.get("status") == "timeout":
            error = "timeout: " + error
        self.ws.record_failure(task, error + ("\n" + reply["traceback"] if reply.get("traceback") else ""))
        self.results[tid] = TaskResult(tid, task.kind, task.op, "failed", seconds, error=error)
        self.bar.advance(task, "failed")
        self._block_dependents(tid)

    def _check_program_output(self, task: Task, files: dict[str, Path]) -> None:
        expected = task.config.get("expect_program")
        if task.kind != "transform" or not expected:
            return
        data = json.loads(files["program"].read_text(encoding="utf-8"))
        pv = ProgramVersion.from_dict(data)
        if pv.id != expected:
            raise HandlerError(f"{task.describe()} produced program {pv.id}, the plan expected {expected}")
        self.ws.put_program(pv)

    def _after_success(self, task: Task) -> None:
        if task.kind == "control" and task.config.get("expander"):
            self._expand(task)
        for user in sorted(self.users[task.id]):
            if user not in self.results and user not in self.running and self._inputs_ready(user):
                self.ready.append(user)

    def _expand(self, control: Task) -> None:
        from ..planner import BranchBuilder

        expander = get_handler("expander", control.config["expander"], self.program(control.program).kind)
        builder = BranchBuilder(control, self.plan.programs)
        outputs = self.results[control.id].outputs
        ctx = TaskContext(task=control, program=self.program(control.program), programs=self.program,
                          inputs={name: rec.path for name, rec in outputs.items()}, outdir=Path("/nonexistent"))
        expander(ctx, builder)
        for pid, pdata in builder.new_programs.items():
            self.plan.programs[pid] = pdata
            self.ws.put_program(pdata)
        new = [t for tid, t in builder.new_tasks.items() if tid not in self.plan.tasks]
        for t in new:
            self.plan.tasks[t.id] = t
            self.deps[t.id] = set(t.deps)
            self.users.setdefault(t.id, set())
        for t in new:
            for d in t.deps:
                if d not in self.plan.tasks:
                    raise HandlerError(f"branch task {t.describe()} depends on unknown task {d}")
                self.users[d].add(t.id)
        for user in self.users[control.id]:
            if user in builder.new_tasks:
                continue
            for fed in builder.fed:
                self.deps[user].add(fed)
                self.users[fed].add(user)
        self.bar.grow(len(new))
        self.ready.extend(t.id for t in new if self._inputs_ready(t.id))

    def _inputs_ready(self, tid: str) -> bool:
        return all(d in self.results and self.results[d].status in ("done", "reused") for d in self.deps[tid])

    def _block_dependents(self, tid: str) -> None:
        stack = list(self.users[tid])
        while stack:
            user = stack.pop()
            if user in self.results or user in self.running:
                continue
            task = self.plan.tasks[user]
            self.results[user] = TaskResult(user, task.kind, task.op, "blocked", error=f"depends on failed {tid}")
            self.bar.advance(task, "blocked")
            stack.extend(self.users[user])


def _backend_module(name: str, kind: str) -> str | None:
    from ..backends.base import backend_module

    return backend_module(name, kind)


__all__ = ["Runtime", "RunResult", "TaskResult", "handler_module"]
