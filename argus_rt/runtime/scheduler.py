"""The central scheduler: dispatch each task as soon as its inputs exist.

:meth:`Runtime.run` walks a plan. A task whose outputs the workspace already holds (same task id,
so same program version, region, scope, configuration and inputs) is *reused* without running.
Otherwise Transform / Synthesize / Control tasks go to the CPU pool — by default worker processes
(:mod:`.cpu_jobs`), so that a task past its timeout is killed and a crashing handler fails alone —
and Collect tasks to the device workers (:mod:`.workers`). A task's timeout counts from when it
starts, not from when it was queued. When a Control task finishes, its expander may add branches
(before the task is committed: a failed expansion is a failed task); their fed tasks become extra
inputs of the Control task's dependents, which are released only when those arrive.

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
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..branches import BranchBuilder
from ..program import ProgramVersion
from ..tasks import Plan, Task, find_cycle
from ..workspace import Workspace
from .cpu_jobs import CpuProcessPool, run_cpu_job
from .handlers import HandlerError, TaskContext, get_handler, handler_module
from .progress import Progress
from .queues import drain
from .staging import StagingRecycler, claim_staging
from .thread_pool import CpuThreadPool
from .workers import DeviceWorker, detect_devices, warm_workers_default

FINAL = ("done", "reused", "failed", "blocked")


class ExpansionError(HandlerError):
    """A Control task's expander failed (or made a cycle): the Control task failed."""


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
    worker processes (``cpu_pool="process"``, default: a task past its timeout is killed, a crash
    fails only its task, handlers use several cores; handlers must live in importable modules) or
    threads of this process (``cpu_pool="thread"``: handlers may live in the calling script, but a
    timed-out handler keeps running detached and a crash kills the caller; about as costly per task
    on the planner benchmark, whose handlers then share the scheduler's GIL).

    ``warm_workers``: start the device workers now, with the Runtime, each importing torch and
    opening its CUDA context in the background (:func:`.workers.warm_up`), so that their start-up
    overlaps the CPU tasks and the first collection does not pay it; default: where this host has
    an NVIDIA driver, or as ``$ARGUS_WARM_WORKERS`` says (:func:`.workers.warm_workers_default`),
    and a device to run on. Otherwise the workers start on the first collection (a plan without one
    never spawns them).
    """

    def __init__(self, workspace: Workspace, *, devices: list[str] | None = None, cpu_workers: int = 2,
                 progress: bool = False, extra_modules: tuple[str, ...] = (), cpu_pool: str = "process",
                 warm_workers: bool | None = None) -> None:
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
        self._staging = StagingRecycler()  # emptied staging dirs of committed tasks, reused by the next ones
        self._pool = self._new_pool()
        self._janitor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="argus-janitor")
        self._workers: list[DeviceWorker] | None = None
        self._lock = threading.Lock()
        if warm_workers is None:
            warm_workers = warm_workers_default() and any(self.devices)
        self.warm_workers = bool(warm_workers)
        if self.warm_workers:
            self.workers  # noqa: B018  (starts them: their children come up while the caller plans)

    # ---- lifecycle ------------------------------------------------------------------------
    def _new_pool(self):
        if self.cpu_pool == "process":  # fresh interpreters: handlers may initialise CUDA-using libraries
            return CpuProcessPool(self.cpu_workers, staging=self._staging)
        return CpuThreadPool(self.cpu_workers)

    @property
    def workers(self) -> list[DeviceWorker]:
        if self._workers is None:  # started on first collect: plans without one never spawn
            self._workers = [DeviceWorker(d, self._jobs, self._report_collect, staging=self._staging,
                                          warm=self.warm_workers) for d in self.devices]
        return self._workers

    def start_workers(self, timeout: float = 60.0) -> None:
        """Start every device worker's process now and wait until they are up."""
        for w in self.workers:
            w.ready.wait(timeout)

    def worker_pids(self) -> list[int]:
        """Process ids of the live worker processes (device workers, then the CPU pool's)."""
        devices = [w.pid for w in self._workers or [] if w.pid is not None]
        return devices + self._pool.pids()

    def close(self) -> None:
        """Stop the workers and pools; a task still running (an interrupted run) is killed, not awaited."""
        drain(self._jobs)  # collections of an interrupted run: not started at all
        if self._workers is not None:
            for w in self._workers:
                w.stop()
            for w in self._workers:
                w.join(timeout=15)
            self._workers = None
        self._pool.shutdown(wait=True)
        self._janitor.shutdown(wait=True)
        self._staging.close()  # the emptied staging directories kept for reuse

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
        self.ready: deque[str] = deque()
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
            self.ready = deque(tid for tid in self.plan.tasks if not self.deps[tid])
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
                if self.rt.cpu_pool == "thread" and time.perf_counter() - last_check > 0.05:
                    self._check_thread_timeouts()  # worker processes enforce their own
                    last_check = time.perf_counter()
                self._drain()
        self._block_undispatched()
        return RunResult(self.plan, self.results, time.perf_counter() - start)

    def _block_undispatched(self) -> None:
        left = {tid: [d for d in self.deps[tid] if d not in self.results] for tid in self.plan.tasks
                if tid not in self.results}
        cycle = find_cycle(left)
        why = ("dependency cycle: " + " -> ".join(self.plan.tasks[t].name() for t in cycle)) if cycle \
            else "dependency did not finish"
        for tid in left:
            task = self.plan.tasks[tid]
            self.results[tid] = TaskResult(tid, task.kind, task.op, "blocked", error=why)

    # ---- dispatch -------------------------------------------------------------------------
    def _drain(self) -> None:
        # iterative, not recursive: a long chain of reused tasks must not hit the recursion limit
        while self.ready:
            tid = self.ready.popleft()
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
            try:
                branches = self._branches(task, {name: rec.path for name, rec in cached.items()})
            except Exception as exc:  # committed by a run whose expander differed: fail it here
                self.results[tid] = TaskResult(tid, task.kind, task.op, "failed",
                                               error=f"expansion failed: {type(exc).__name__}: {exc}")
                self.bar.advance(task, "failed")
                self._block_dependents(tid)
                return
            self.results[tid] = TaskResult(tid, task.kind, task.op, "reused", outputs=cached)
            self.bar.advance(task, "reused")
            self._after_success(task, branches)
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
            self.rt._pool.submit(str(staging), self._run_cpu, task, inputs, staging)
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
        started = time.monotonic()
        try:
            claim_staging(staging, self.rt._staging.take())
            handler = get_handler(task.kind, task.op, self.program(task.program).kind)
            ctx = TaskContext(task=task, program=self.program(task.program), programs=self.program,
                              inputs=inputs, outdir=staging,
                              deps={d: self.plan.tasks[d] for d in self.deps[task.id]})
            files = handler(ctx) or {}
            reply = {"status": "ok", "files": {k: str(v) for k, v in files.items()}}
        except BaseException as exc:
            reply = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        reply["attempt"] = str(staging)
        reply["run_s"] = time.monotonic() - started
        self.rt._events.put((task.id, reply))

    def _check_thread_timeouts(self) -> None:
        now = time.monotonic()
        for tid, (_start, staging, _exact) in list(self.running.items()):
            task = self.plan.tasks[tid]
            began = self.rt._pool.started(str(staging)) if task.kind != "collect" else None
            if began is not None and task.timeout_s and now - began > task.timeout_s:
                # a thread cannot be killed: its slot goes to a fresh thread, its late result is dropped
                self.rt._pool.abandon(str(staging))
                self._finish(tid, {"status": "timeout", "run_s": now - began,
                                   "error": f"task exceeded its timeout of {task.timeout_s} s (its thread "
                                            "cannot be killed and runs on detached; cpu_pool='process' kills it)"})

    # ---- completion -----------------------------------------------------------------------
    def _finish(self, tid: str, reply: dict) -> None:
        task = self.plan.tasks[tid]
        start, staging, exact = self.running.pop(tid)
        seconds = reply.get("run_s", time.perf_counter() - start)  # run time, not queue time
        if reply.get("status") == "ok":
            try:
                files = {name: Path(p) for name, p in reply["files"].items()}
                missing = set(task.outputs) - set(files)
                if missing:
                    raise HandlerError(f"{task.describe()} did not produce declared output(s) {sorted(missing)}")
                self._check_program_output(task, files)
                try:  # before the commit: a Control task whose expansion fails is failed, not done
                    branches = self._branches(task, files)
                except Exception as exc:
                    raise ExpansionError(f"expansion failed: {type(exc).__name__}: {exc}") from exc
                outputs = self.ws.commit(task, files, exact, {"seconds": seconds})
            except ExpansionError as exc:
                reply = {"status": "error", "error": str(exc)}
            except Exception as exc:
                reply = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            else:
                # an emptied directory is kept for the next task (renaming it is cheaper than rmdir + mkdir;
                # looking costs two syscalls); one with undeclared leftovers is removed with them, off the
                # scheduler thread: directory syscalls are slow on some filesystems
                if not self.rt._staging.keep(staging):
                    self.rt._janitor.submit(shutil.rmtree, staging, True)
                self.results[tid] = TaskResult(tid, task.kind, task.op, "done", seconds, outputs=outputs)
                self.bar.advance(task, "done")
                self._after_success(task, branches)
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

    def _after_success(self, task: Task, branches=None) -> None:
        if branches is not None:
            self._add_branches(task, branches)
        for user in sorted(self.users[task.id]):
            if user not in self.results and user not in self.running and self._inputs_ready(user):
                self.ready.append(user)

    def _branches(self, control: Task, files: dict[str, Path]):
        """Run ``control``'s expander on its outputs: a checked :class:`BranchBuilder`, or ``None``."""
        if control.kind != "control" or not control.config.get("expander"):
            return None
        expander = get_handler("expander", control.config["expander"], self.program(control.program).kind)
        builder = BranchBuilder(control, self.plan.programs)
        ctx = TaskContext(task=control, program=self.program(control.program), programs=self.program,
                          inputs=dict(files), outdir=Path("/nonexistent"))
        expander(ctx, builder)
        for t in builder.new_tasks.values():
            for d in t.deps:
                if d not in self.plan.tasks and d not in builder.new_tasks:
                    raise HandlerError(f"branch task {t.describe()} depends on unknown task {d}")
        self._check_branch_cycle(control, builder)
        return builder

    def _check_branch_cycle(self, control: Task, builder) -> None:
        # fed tasks become inputs of the Control's dependents: a branch that needs one of those waits forever
        pending = {tid: {d for d in deps if d not in self.results} for tid, deps in self.deps.items()
                   if tid not in self.results}
        for t in builder.new_tasks.values():
            pending.setdefault(t.id, set()).update(d for d in t.deps if d not in self.results)
        for user in self.users[control.id]:
            if user in pending and user not in builder.new_tasks:
                pending[user].update(builder.fed)
        cycle = find_cycle({tid: sorted(deps) for tid, deps in pending.items()})
        if cycle:
            tasks = {**self.plan.tasks, **builder.new_tasks}
            raise HandlerError("its branches would make a dependency cycle: "
                               + " -> ".join(tasks[t].name() for t in cycle))

    def _add_branches(self, control: Task, builder) -> None:
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
