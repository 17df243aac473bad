"""What runs inside Ray's worker processes for the Ray engine (:mod:`.ray_engine` is the driver side).

Ray imports this module by name in its workers (the functions and the actor class are pickled by
reference), so it must not need anything the driver's ``__main__`` defined. Two things run here:

:class:`DeviceActor`
    One per device (a Ray actor holding one GPU, ``num_gpus=1`` by default). It owns the same
    isolated worker child as the embedded engine's device workers
    (:class:`argus_rt.runtime.worker_process.WorkerSlot`, role ``collect``, bound with
    ``CUDA_VISIBLE_DEVICES`` to the GPU Ray gave the actor) and runs one Collect job at a time, so
    collections stay serialised per device. A task past its timeout kills that child and fails; a
    child that dies fails its task only; a fresh child takes the next job.

:func:`run_cpu_task`
    A Transform or Synthesize job as a plain Ray task: :func:`argus_rt.runtime.cpu_jobs.run_cpu_job`
    in the Ray worker, under a watchdog that SIGKILLs the worker when the task passes its timeout
    (counted from when the task starts), so a hung handler never keeps its CPU.

Files: a job names driver paths (inputs in the driver's workspace, an ``outdir`` under its
staging). A worker on the driver's node (or anywhere with ``ship="never"``: the workspace on
shared storage) uses them as they are. Any other worker gets the input bytes through Ray's object
store (``payload["blobs"]``: driver path -> ObjectRef), writes its outputs into a private
temporary directory and returns their bytes (``reply["shipped"]``); the driver writes them into
the staging directory and commits them there, as the embedded engine does.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

SHIP_MODES = ("auto", "always", "never")


def adopt(payload: dict) -> None:
    """The driver's module path and working directory, where this node has them (relative program
    roots and handler modules defined beside the caller's script resolve as on the driver)."""
    cwd = payload.get("cwd")
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    front = [p for p in payload.get("sys_path") or [] if isinstance(p, str) and os.path.isdir(p)]
    if front:
        sys.path[:] = front + [p for p in sys.path if p not in front]


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _local(payload: dict) -> bool:
    """Whether this worker reads and writes the driver's paths directly."""
    ship = payload.get("ship", "auto")
    if ship == "never":
        return True
    if ship == "always":
        return False
    return _node_id() == payload.get("driver_node")


def prepare(job: dict, payload: dict) -> tuple[dict, str | None]:
    """``job`` as this worker runs it, and the temporary directory it ships through (``None``: the
    driver's paths are used directly)."""
    adopt(payload)
    job = dict(job)
    job.pop("recycle", None)  # the driver's emptied staging directories are not ours to rename
    if _local(payload):
        return job, None
    import ray

    blobs = payload.get("blobs") or {}
    missing = sorted(set(job["inputs"].values()) - set(blobs))
    if missing:
        raise RuntimeError(f"the driver shipped no bytes for input(s) {missing[:3]}")
    tmp = tempfile.mkdtemp(prefix="argus-ray-")
    try:
        paths = sorted(set(job["inputs"].values()))
        data = ray.get([blobs[p] for p in paths])
        local: dict[str, str] = {}
        for i, (path, content) in enumerate(zip(paths, data)):
            target = Path(tmp) / "in" / str(i) / (Path(path).name or "input")
            target.parent.mkdir(parents=True)
            target.write_bytes(content)
            local[path] = str(target)
        job["inputs"] = {key: local[path] for key, path in job["inputs"].items()}
        job["outdir"] = str(Path(tmp) / "out")  # made by the job itself, as on the driver
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return job, tmp


def pack(reply: dict, job: dict, tmp: str | None) -> dict:
    """A successful reply of a shipped job carries its output files' bytes (paths relative to its
    outdir); the temporary directory goes."""
    if tmp is None:
        return reply
    try:
        if reply.get("status") == "ok":
            outdir = Path(job["outdir"]).resolve()
            files = {}
            for name, path in reply["files"].items():
                real = Path(path).resolve()
                if not real.is_relative_to(outdir) or not real.is_file():
                    return {**reply, "status": "error", "files": {},
                            "error": f"output {name!r} = {path} is not a file under the task's outdir"}
                files[name] = [str(real.relative_to(outdir)), real.read_bytes()]
            reply = {**reply, "files": files, "shipped": True}
        return reply
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _error_reply(exc: BaseException) -> dict:
    return {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def _kill_self() -> None:
    # a handler past its timeout: the whole worker goes (a thread cannot be stopped), its CPU with it
    os.kill(os.getpid(), signal.SIGKILL)


def run_cpu_task(job: dict, payload: dict) -> dict:
    """One Transform / Synthesize job in this Ray worker; the reply the embedded CPU pool gives."""
    started = time.monotonic()
    watchdog = None
    try:
        from ..runtime.cpu_jobs import run_cpu_job

        job, tmp = prepare(job, payload)
        timeout = job["task"].get("timeout_s")
        if timeout:
            watchdog = threading.Timer(float(timeout), _kill_self)
            watchdog.daemon = True
            watchdog.start()
        try:
            reply = run_cpu_job(job)
        except BaseException as exc:  # the task failed, not the worker
            reply = _error_reply(exc)
        finally:
            if watchdog is not None:
                watchdog.cancel()
        reply = pack(reply, job, tmp)
    except BaseException as exc:  # shipping failed
        reply = _error_reply(exc)
    reply["run_s"] = time.monotonic() - started
    return reply


def multicast_env() -> dict:
    """The multicast variables as this process sees them (tests read them back)."""
    from ..gpu_env import MULTICAST_OFF

    return {k: os.environ.get(k) for k in MULTICAST_OFF}


class DeviceActor:
    """A Ray actor that owns one device and runs Collect jobs on it, one at a time (see the module doc)."""

    def __init__(self, index: int, payload: dict) -> None:
        import ray

        from ..runtime.worker_process import WorkerSlot

        adopt(payload)
        self.index = index
        self.node = _node_id()
        self.device = ",".join(str(g) for g in ray.get_gpu_ids())  # "" without a GPU (CPU stand-ins)
        self.slot = WorkerSlot("collect", name=f"Ray device worker {index} (node {self.node[:8]}, "
                                                f"CUDA_VISIBLE_DEVICES={self.device!r})",
                               env={"CUDA_VISIBLE_DEVICES": self.device})
        try:
            self.slot.ensure()  # the first collection should not pay for the child's start
        except Exception:
            pass  # the first job retries and reports the problem

    def info(self) -> dict:
        return {"index": self.index, "node": self.node, "pid": os.getpid(), "device": self.device,
                "child": self.slot.pid, "env": multicast_env()}

    def run(self, job: dict, payload: dict) -> dict:
        started = time.monotonic()
        try:
            job, tmp = prepare(job, payload)
        except BaseException as exc:
            return {**_error_reply(exc), "run_s": time.monotonic() - started}
        reply = self.slot.run(job, job["task"].get("timeout_s"))  # never raises: killed / timeout replies
        try:
            return pack(reply, job, tmp)
        except BaseException as exc:
            return {**_error_reply(exc), "run_s": reply.get("run_s", time.monotonic() - started)}

    def close(self) -> None:
        self.slot.close()
