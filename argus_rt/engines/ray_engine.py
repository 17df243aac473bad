"""The Ray engine: the same plan, its tasks executed on a Ray cluster; scheduling and commits stay here.

:class:`RayRuntime` is the embedded :class:`argus_rt.runtime.scheduler.Runtime` with its two
executors swapped: the scheduler (dependency tracking, reuse, timeouts' bookkeeping, Control
expansion, failed/blocked semantics, :meth:`Workspace.commit`) is the runtime's own and runs on the
driver. What changes is where a dispatched task executes:

===========================  ====================================================================
Collect                      a :class:`~.ray_remote.DeviceActor` per device (``num_gpus=1`` each by
                             default; ``collect_resources`` changes the request, e.g.
                             ``{"num_gpus": 0, "argus_device": 1}`` for CPU stand-ins), each running
                             one collection at a time in the embedded engine's isolated worker child:
                             collections that the planner separated into runs never share a device
                             at the same time, as on the embedded engine
Transform, Synthesize        plain Ray tasks (``num_cpus=1``), :func:`~.ray_remote.run_cpu_task`
Control                      on the driver, in the runtime's CPU process pool; the expander that
                             materialises the branches runs on the driver, as always
===========================  ====================================================================

Evidence comes back to the driver and is committed into the driver's workspace by the same commit
path, so the workspace stays the one source of truth and reuse works across engines (a query
answered on Ray is reused by the embedded engine, and the other way round). A lost Ray worker or
node (``WorkerCrashedError``, ``ActorDiedError``, ``NodeDiedError``...) fails the task it ran,
``killed: Ray worker lost ...``; its dependents are blocked and the rest of the plan finishes, and
running the plan again re-runs only what did not finish (:meth:`Runtime.rerun_failed`). A lost
device actor is replaced before it takes the next collection.

Every Ray worker this engine starts gets a ``runtime_env`` whose ``env_vars`` force multicast off
(:data:`argus_rt.gpu_env.MULTICAST_OFF`) and carry the driver's ``ARGUS_*`` variables (plus
``env_vars=`` from the caller); the worker children get the same through
:func:`argus_rt.gpu_env.child_env`.
"""
from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..gpu_env import MULTICAST_OFF
from ..runtime.cpu_jobs import CpuProcessPool, run_cpu_job
from ..runtime.scheduler import Runtime
from . import EngineError
from .ray_remote import SHIP_MODES, DeviceActor, run_cpu_task

MISSING_RAY = "the ray engine needs Ray, which is not installed here: pip install 'argus-rt[ray]'"
DEFAULT_COLLECT_RESOURCES = {"num_gpus": 1}
DEFAULT_CPU_RESOURCES = {"num_cpus": 1}
START_TIMEOUT_S = 120.0  # a device actor that is not up by then (no node has its resources) gives up


def import_ray():
    """The ``ray`` module, or :class:`EngineError` naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise EngineError(MISSING_RAY) from None
    return ray


def resource_options(spec: dict | None, default: dict, what: str) -> dict:
    """``spec`` as Ray ``.options()``: ``num_gpus``/``num_cpus``/``memory`` as given, ``resources`` a dict,
    any other key a custom resource (``{"num_gpus": 0, "argus_device": 1}``)."""
    spec = dict(default if spec is None else spec)
    out: dict = {"resources": {}}
    for key, value in spec.items():
        if key == "resources":
            if not isinstance(value, dict):
                raise EngineError(f"{what} 'resources' must be a dict of custom resources, got {value!r}")
            items = value.items()
        else:
            items = [(key, value)]
        for name, amount in items:
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not amount >= 0:
                raise EngineError(f"{what} {name!r} must be a number >= 0, got {amount!r}")
            if name in ("num_gpus", "num_cpus", "memory"):
                out[name] = amount
            else:
                out["resources"][name] = amount
    if not out["resources"]:
        del out["resources"]
    return out


def runtime_env(extra: dict | None = None) -> dict:
    """The ``runtime_env`` of every Ray worker of this engine: the driver's ``ARGUS_*`` variables,
    ``extra``, and multicast forced off over both."""
    env = {k: v for k, v in os.environ.items() if k.startswith("ARGUS_")}
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    env.update(MULTICAST_OFF)
    return {"env_vars": env}


class RayRuntime(Runtime):
    """Executes plans on a Ray cluster against ``workspace`` (on the driver). See the module doc.

    ``address``: ``None`` (``$RAY_ADDRESS``, else a new local Ray instance), ``"auto"`` (the cluster
    of ``ray start`` on this machine) or ``host:port``; when Ray is already initialised in this
    process (``ray.init`` by the caller) that connection is used and left open at :meth:`close`.
    ``devices``: its length is the number of device actors (default: as many as the cluster's
    resources allow for ``collect_resources``). ``collect_resources`` / ``cpu_resources``: the Ray
    resource request of one device actor / one Transform or Synthesize task. ``env_vars``: more
    variables for every Ray worker. ``ship``: ``"auto"`` (workers on other nodes get inputs and
    return outputs through Ray's object store; workers on the driver's node use its paths),
    ``"always"``, or ``"never"`` (every node sees the workspace at the same path: shared storage).
    ``control_workers``: processes on the driver for Control tasks.
    """

    def __init__(self, workspace, *, address: str | None = None, devices: list[str] | None = None,
                 collect_resources: dict | None = None, cpu_resources: dict | None = None,
                 env_vars: dict | None = None, ship: str = "auto", progress: bool = False,
                 extra_modules: tuple[str, ...] = (), control_workers: int = 1,
                 start_timeout_s: float = START_TIMEOUT_S, init_options: dict | None = None) -> None:
        if ship not in SHIP_MODES:
            raise EngineError(f"unknown ship mode {ship!r}; valid: {', '.join(SHIP_MODES)}")
        self._ray = import_ray()
        self._collect_options = resource_options(collect_resources, DEFAULT_COLLECT_RESOURCES, "collect_resources")
        self._collect_options.setdefault("num_cpus", 0)  # it waits on its worker child
        self._cpu_options = resource_options(cpu_resources, DEFAULT_CPU_RESOURCES, "cpu_resources")
        self._env = runtime_env(env_vars)
        self._device_count = len(devices) if devices is not None else None
        self._ship = "always" if ship == "auto" and str(address or "").startswith("ray://") else ship
        self._start_timeout_s = start_timeout_s
        self._owns_ray = False
        self._connect(address, init_options or {})
        try:
            self._setup(workspace, progress, extra_modules, control_workers)
        except BaseException:
            if self._owns_ray:
                self._ray.shutdown()
            raise

    def _setup(self, workspace, progress, extra_modules, control_workers) -> None:
        self._driver_node = self._ray.get_runtime_context().get_node_id()
        self._put_blobs = self._ship != "never"
        self._blob_refs: dict[str, object] = {}
        self._blob_lock = threading.Lock()
        self._cpu_remote = self._ray.remote(run_cpu_task).options(
            max_retries=0, retry_exceptions=False, runtime_env=self._env, **self._cpu_options)
        self._actor_class = self._ray.remote(DeviceActor).options(
            max_restarts=0, max_task_retries=0, max_concurrency=1, runtime_env=self._env, **self._collect_options)
        super().__init__(workspace, devices=[""], cpu_workers=control_workers, progress=progress,
                         extra_modules=extra_modules, cpu_pool="process")
        self._devices = _RayDevices(self)
        self._jobs = self._devices  # the scheduler queues Collect jobs here (Runtime's device-job queue)

    # ---- connection -----------------------------------------------------------------------
    def _connect(self, address: str | None, init_options: dict) -> None:
        ray = self._ray
        if ray.is_initialized():
            return  # the caller's connection (a test cluster, a notebook): theirs to shut down
        options = {"include_dashboard": False, "logging_level": "WARNING", **init_options}
        try:
            ray.init(address=address, **options)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = address or os.environ.get("RAY_ADDRESS") or "a new local instance"
            raise EngineError(f"cannot connect to the Ray cluster at {where}: {_first_line(exc)}") from None
        self._owns_ray = True

    def _refresh_cluster(self) -> None:
        """Whether inputs must be put into the object store: only when a worker may be off the driver's node."""
        if self._ship == "never":
            self._put_blobs = False
        elif self._ship == "always":
            self._put_blobs = True
        else:
            alive = [n for n in self._ray.nodes() if n.get("Alive")]
            self._put_blobs = any(n.get("NodeID") != self._driver_node for n in alive)

    def payload(self, job: dict) -> dict:
        """What a Ray worker needs beside ``job``: where it is relative to the driver, and the inputs' bytes."""
        cwd = os.getcwd()
        blobs = {}
        if self._put_blobs:
            for path in set(job["inputs"].values()):
                blobs[path] = self._blob_ref(path)
        return {"sys_path": [p or cwd for p in sys.path], "cwd": cwd, "driver_node": self._driver_node,
                "ship": self._ship, "blobs": blobs}

    def _blob_ref(self, path: str):
        with self._blob_lock:
            ref = self._blob_refs.get(path)
        if ref is None:  # workspace blobs are immutable and named by their hash: one put per run
            ref = self._ray.put(Path(path).read_bytes())
            with self._blob_lock:
                self._blob_refs[path] = ref
        return ref

    # ---- the executors the scheduler sees -------------------------------------------------
    def _new_pool(self):
        return _RayCpuPool(self, CpuProcessPool(self.cpu_workers, staging=self._staging))

    @property
    def workers(self):
        """The device actors (started on the first Collect, as the embedded workers are)."""
        devices = getattr(self, "_devices", None)
        if devices is None:  # Runtime.__init__ asking to warm its own workers: the Ray engine has none
            return []
        devices.start()
        return devices

    def start_workers(self, timeout: float = 60.0) -> None:
        self._devices.start()
        self._devices.wait_ready(timeout)

    def worker_pids(self) -> list[int]:
        """Process ids of the live device actors' Ray workers, then the driver's Control pool processes."""
        return self._devices.pids() + self._pool.pids()

    def device_info(self) -> list[dict]:
        """Per live device actor: node id, Ray worker pid, device, its worker child's pid, multicast env."""
        return self._devices.info()

    # ---- running --------------------------------------------------------------------------
    def run(self, plan):
        self._refresh_cluster()
        try:
            return super().run(plan)
        finally:
            with self._blob_lock:
                self._blob_refs.clear()  # the tasks that read them hold their own references

    def close(self) -> None:
        """Kill the device actors and cancel running Ray tasks (a task of an interrupted run is not
        awaited), stop the driver's pools, and disconnect from Ray if this engine connected."""
        try:
            self._devices.close()
            self._pool.shutdown(wait=True)
            self._janitor.shutdown(wait=True)
            self._staging.close()
            with self._blob_lock:
                self._blob_refs.clear()
        finally:
            if self._owns_ray and self._ray.is_initialized():
                self._ray.shutdown()
            self._owns_ray = False

    # ---- replies --------------------------------------------------------------------------
    def reply_of(self, fut, job: dict, submitted: float) -> dict:
        """The scheduler's reply for a finished Ray future: the worker's own reply (its shipped outputs
        written into the job's staging directory), or a ``killed`` / ``timeout`` one when Ray lost it."""
        ray = self._ray
        try:
            reply = fut.result()
        except ray.exceptions.RayTaskError as exc:  # our remote code raised (it should not)
            return {"status": "error", "error": f"Ray task failed: {_first_line(exc)}"}
        except Exception as exc:  # the worker, its node or its object went away
            timeout = job["task"].get("timeout_s")
            if isinstance(exc, ray.exceptions.WorkerCrashedError) and timeout and \
                    time.monotonic() - submitted >= timeout:
                return {"status": "timeout", "error": f"task exceeded its timeout of {timeout} s; its Ray worker "
                                                      "was killed", "run_s": time.monotonic() - submitted}
            return {"status": "killed", "error": f"Ray worker lost ({type(exc).__name__}: {_first_line(exc)})"}
        if reply.get("shipped"):
            try:
                reply["files"] = _materialise(reply["files"], Path(job["outdir"]))
            except OSError as exc:
                return {"status": "error", "error": f"writing the shipped outputs failed: {type(exc).__name__}: {exc}"}
        return reply


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _materialise(files: dict, outdir: Path) -> dict[str, str]:
    """Write shipped outputs ``{name: [relative path, bytes]}`` under the staging directory ``outdir``."""
    outdir.mkdir(exist_ok=True)
    root = outdir.resolve()
    out = {}
    for name, (rel, data) in files.items():
        target = (outdir / rel).resolve()
        if not target.is_relative_to(root) or target == root:
            raise OSError(f"shipped output {name!r} names {rel!r}, outside its staging directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        out[name] = str(outdir / rel)
    return out


class _RayCpuPool:
    """The scheduler's CPU pool for the Ray engine: Transform / Synthesize jobs become Ray tasks,
    Control jobs run in a process pool on the driver (:class:`CpuProcessPool`). ``submit`` returns a
    Future of the reply dict, as :class:`CpuProcessPool` does."""

    def __init__(self, rt: RayRuntime, local: CpuProcessPool) -> None:
        self.rt, self.local = rt, local
        self._inflight: dict[int, object] = {}
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn, job: dict) -> Future:
        if fn is not run_cpu_job:
            raise TypeError(f"the Ray engine's CPU pool runs only run_cpu_job, not {getattr(fn, '__qualname__', fn)!r}")
        if job["task"]["kind"] == "control":
            return self.local.submit(fn, job)
        if self._closed:
            raise RuntimeError("the Ray engine is closed")
        future: Future = Future()
        future.set_running_or_notify_cancel()
        submitted = time.monotonic()
        try:
            ref = self.rt._cpu_remote.remote(job, self.rt.payload(job))
        except Exception as exc:
            future.set_result({"status": "killed", "error": f"Ray did not take the task: {_first_line(exc)}"})
            return future
        key = id(future)
        with self._lock:
            self._inflight[key] = ref

        def done(ray_future, key=key) -> None:
            with self._lock:
                self._inflight.pop(key, None)
            future.set_result(self.rt.reply_of(ray_future, job, submitted))

        ref.future().add_done_callback(done)
        return future

    def pids(self) -> list[int]:
        return self.local.pids()

    def shutdown(self, wait: bool = True) -> None:
        self._closed = True
        with self._lock:
            refs = list(self._inflight.values())
        for ref in refs:
            try:
                self.rt._ray.cancel(ref, force=True)
            except Exception:
                pass  # finished meanwhile, or Ray is going away
        self.local.shutdown(wait=wait)


class _Slot:
    """One device actor position: its current actor (replaced when it dies) and what it knows of it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.actor = None
        self.info: dict | None = None
        self.ready = False
        self.generation = 0
        self.failed_starts = 0


class _RayDevices:
    """Collect jobs on device actors: a queue here, one job at a time per actor (``put`` is what the
    scheduler calls, as on the embedded engine's device-job queue). Replies go to the scheduler's events.

    Ray runs future callbacks on its own threads, which must not call Ray: they hand their work to
    one dispatcher thread (``_calls``), which starts actors and sends jobs."""

    def __init__(self, rt: RayRuntime) -> None:
        self.rt = rt
        self._pending: deque[dict] = deque()
        self._idle: deque[_Slot] = deque()
        self._slots: list[_Slot] = []
        self._lock = threading.RLock()
        self._ready = threading.Condition(self._lock)
        self._calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="argus-ray-devices")
        self._started = False
        self._closed = False
        self._no_workers: str | None = None  # why no device actor can run: pending jobs fail with it

    def _later(self, fn, *args) -> None:
        """Run ``fn(*args)`` on the dispatcher thread (from a Ray callback or a timer)."""
        try:
            self._calls.submit(self._locked, fn, *args)
        except RuntimeError:
            pass  # closed

    def _locked(self, fn, *args) -> None:
        with self._lock:
            if not self._closed:
                fn(*args)

    # ---- actors ---------------------------------------------------------------------------
    def _count(self) -> int:
        if self.rt._device_count is not None:
            return self.rt._device_count
        total = self.rt._ray.cluster_resources()
        opts = self.rt._collect_options
        wanted = {"GPU": opts.get("num_gpus", 0), "CPU": opts.get("num_cpus", 0), **opts.get("resources", {})}
        counts = [math.floor(total.get(name, 0) / amount + 1e-9) for name, amount in wanted.items() if amount > 0]
        return min(counts) if counts else 1  # nothing requested: one worker, as the embedded [""] device

    def start(self) -> None:
        with self._lock:
            if self._started or self._closed:
                return
            self._started = True
            count = self._count()
            if count < 1:
                have = {k: v for k, v in sorted(self.rt._ray.cluster_resources().items())
                        if not k.startswith("node:") and k not in ("memory", "object_store_memory")}
                self._no_workers = (f"no Ray node offers the resources of a device worker "
                                    f"{_resource_text(self.rt._collect_options)} (the cluster has {have}); "
                                    "set collect_resources (--collect-resources) to what its nodes offer")
                return
            self._slots = [_Slot(i) for i in range(count)]
            for slot in self._slots:
                self._spawn(slot)

    def _spawn(self, slot: _Slot) -> None:
        slot.generation += 1
        slot.ready = False
        slot.info = None
        generation = slot.generation
        slot.actor = self.rt._actor_class.remote(slot.index, self.rt.payload({"inputs": {}}))
        slot.actor.info.remote().future().add_done_callback(lambda f: self._later(self._up, slot, generation, f))
        timer = threading.Timer(self.rt._start_timeout_s, self._later,
                                args=(self._start_timed_out, slot, generation))
        timer.daemon = True
        timer.start()

    def _up(self, slot: _Slot, generation: int, fut) -> None:
        if slot.generation != generation:
            return
        try:
            slot.info = fut.result()
        except Exception as exc:
            self._give_up(slot, f"device worker {slot.index} did not start ({type(exc).__name__}: "
                                f"{_first_line(exc)})", retry=True)
            return
        slot.ready = True
        slot.failed_starts = 0
        self._idle.append(slot)
        self._ready.notify_all()
        self._pump()

    def _start_timed_out(self, slot: _Slot, generation: int) -> None:
        if slot.generation != generation or slot.ready:
            return
        self._give_up(slot, f"device worker {slot.index} was not up after {self.rt._start_timeout_s:.0f} s: no "
                            f"Ray node has {_resource_text(self.rt._collect_options)} free", retry=False)

    def _give_up(self, slot: _Slot, why: str, retry: bool) -> None:
        """A slot whose actor did not start: one more try after a failure; once no slot has an actor,
        the pending jobs fail with ``why``."""
        self._kill(slot)
        slot.failed_starts += 1
        if retry and slot.failed_starts < 2:
            self._spawn(slot)
            return
        slot.actor = None
        slot.generation += 1  # late answers of the given-up actor are ignored
        if all(s.actor is None for s in self._slots):
            self._no_workers = why
            self._ready.notify_all()
            self._pump()

    def _kill(self, slot: _Slot) -> None:
        if slot.actor is not None:
            try:
                self.rt._ray.kill(slot.actor, no_restart=True)
            except Exception:
                pass

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not all(s.ready or s.actor is None for s in self._slots) and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._ready.wait(left)

    def pids(self) -> list[int]:
        with self._lock:
            return [s.info["pid"] for s in self._slots if s.ready and s.info]

    def info(self) -> list[dict]:
        with self._lock:
            return [dict(s.info) for s in self._slots if s.ready and s.info]

    # ---- jobs -----------------------------------------------------------------------------
    def put(self, job: dict) -> None:
        with self._lock:
            self._pending.append(job)
            self._pump()

    def _pump(self) -> None:
        while self._pending and (self._idle or self._no_workers):
            job = self._pending.popleft()
            if not self._idle:  # no actor can ever take it
                self._reply(job, {"status": "killed", "error": self._no_workers})
                continue
            self._send(self._idle.popleft(), job)

    def _send(self, slot: _Slot, job: dict) -> None:
        submitted = time.monotonic()
        try:
            ref = slot.actor.run.remote(job, self.rt.payload(job))
        except Exception as exc:
            self._reply(job, {"status": "killed", "error": f"Ray did not take the collection: {_first_line(exc)}"})
            self._idle.append(slot)
            return
        generation = slot.generation
        ref.future().add_done_callback(lambda f: self._finished(slot, generation, job, submitted, f))

    def _finished(self, slot: _Slot, generation: int, job: dict, submitted: float, fut) -> None:
        # on a Ray thread: the reply goes out now, the actor bookkeeping on the dispatcher thread
        self._reply(job, self.rt.reply_of(fut, job, submitted))
        lost = isinstance(fut.exception(), self.rt._ray.exceptions.RayActorError)
        self._later(self._release, slot, generation, lost)

    def _release(self, slot: _Slot, generation: int, lost: bool) -> None:
        if slot.generation != generation:
            return
        if lost:  # its worker or node went away: a fresh actor (maybe elsewhere) takes the next job
            self._kill(slot)
            self._spawn(slot)
        else:
            self._idle.append(slot)
            self._pump()

    def _reply(self, job: dict, reply: dict) -> None:
        reply["attempt"] = job["outdir"]  # lets the scheduler drop answers of abandoned attempts
        self.rt._events.put((job["task"]["id"], reply))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._pending.clear()
            slots, self._slots = self._slots, []
            self._idle.clear()
            self._ready.notify_all()
        self._calls.shutdown(wait=True, cancel_futures=True)
        for slot in slots:
            self._kill(slot)  # a running collection is killed, not awaited; its worker child dies with it


def _resource_text(options: dict) -> str:
    parts = {k: v for k, v in options.items() if k != "resources" and v}
    parts.update(options.get("resources", {}))
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in parts.items()) + "}"


__all__ = ["RayRuntime", "import_ray", "resource_options", "runtime_env"]
