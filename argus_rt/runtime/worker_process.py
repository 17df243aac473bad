"""Worker child processes that never import the caller's ``__main__``.

``multiprocessing``'s ``spawn`` re-imports the parent's main module in every child: a script
without an ``if __name__ == "__main__":`` guard runs its top level again (its own query included),
and code read from stdin or typed into a notebook cannot be re-imported at all. So a worker is
``python -m argus_rt.runtime.worker_process <role> <job fd> <reply fd>``: it imports argus_rt and
the modules a job names, nothing else.

Protocol: one JSON object per line (no pickle). The parent writes ``{"job": ..., "sys_path": [...],
"cwd": ...}`` or ``{"stop": true}`` on the job pipe; the child answers each job with one reply
line on the reply pipe, and says ``{"ready": true}`` once it is up. Both pipes are dedicated file
descriptors, and the child's fd 1 and fd 2 share a third pipe whose tail the parent keeps for
error messages, so whatever user or library code prints cannot corrupt a reply.

Lifetime: each child leads its own process group, which the tools a backend starts inherit. The
parent kills the whole group (timeout, close, exit), and a thread in the child kills it when the
parent dies, even by SIGKILL mid-task, so a killed scheduler leaves no processes behind. A child told
to stop (or whose job pipe closes) leaves with ``os._exit(0)``: its replies are flushed and its
outputs on disk, and finalising torch, CUDA and Triton would hold up ``Runtime.close`` for a second.

Roles (:data:`ROLES`): ``collect`` runs :func:`argus_rt.runtime.workers.run_collect_job`, ``cpu``
runs :func:`argus_rt.runtime.cpu_jobs.run_cpu_job`. Each takes the job dict and returns the reply.
"""
from __future__ import annotations

import atexit
import collections
import faulthandler
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
import weakref

from ..gpu_env import child_env

MODULE = "argus_rt.runtime.worker_process"  # what ``python -m`` runs; __name__ is "__main__" there
ROLES = {"collect": ("argus_rt.runtime.workers", "run_collect_job"),
         "cpu": ("argus_rt.runtime.cpu_jobs", "run_cpu_job")}
# $ARGUS_WORKER_WARM=1: a child of this role calls this function in a background thread as it starts
# (a device worker imports torch and opens its CUDA context while the scheduler is still planning)
WARM = {"collect": ("argus_rt.runtime.workers", "warm_up")}
WARM_ENV = "ARGUS_WORKER_WARM"
OUTPUT_TAIL_LINES = 40  # lines of the child's stdout+stderr kept for the error of a dead child
READY_TIMEOUT_S = 300.0  # importing argus_rt on a loaded host; a child that dies is noticed at once
PARENT_PID_ENV = "ARGUS_WORKER_PARENT_PID"  # the child compares its parent with this to notice its death
PARENT_CHECK_S = 0.2

_LIVE: "weakref.WeakSet[WorkerProcess]" = weakref.WeakSet()


class WorkerDied(RuntimeError):
    """The child exited (or its pipes broke) before answering. ``output``: the tail it printed."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


class WorkerTimeout(RuntimeError):
    """No answer within the request's timeout; the child has been killed."""


def describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"exit code {code}, {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"


def last_words(lines: list[str]) -> str:
    """One line that says why a child died: faulthandler's error with the innermost frame, else its last line."""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Fatal Python error:"):
            frame = next((f.strip() for f in lines[i + 1:] if f.strip().startswith("File ")), "")
            return lines[i].strip() + (f" in {frame}" if frame else "")
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


class WorkerProcess:
    """Parent-side handle of one child of ``role``: :meth:`request` sends a job and waits for its reply.

    Any failure of a request (death, broken pipe, timeout) kills the child; make a new one for the
    next job. ``name`` labels its echoed output and its errors.
    """

    def __init__(self, role: str, *, name: str, env: dict[str, str] | None = None) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown worker role {role!r}; valid: {', '.join(ROLES)}")
        if not sys.executable:
            raise RuntimeError("sys.executable is empty: this embedded interpreter cannot start worker processes")
        self.name = name
        job_read, self._job_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", MODULE, role, str(job_read), str(reply_write)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(job_read, reply_write), env=child_env({**(env or {}), PARENT_PID_ENV: str(os.getpid())}),
                start_new_session=True)  # its own process group: killed with whatever it started
        except BaseException:
            for fd in (self._job_write, self._reply_read):
                os.close(fd)
            raise
        finally:  # the child holds its ends now; ours would hide its death from us
            os.close(job_read)
            os.close(reply_write)
        self._buffer = b""
        self._tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
        self._echo = threading.Thread(target=self._echo_output, name=f"{name}-output", daemon=True)
        self._echo.start()
        _LIVE.add(self)
        try:
            self._read_reply(time.monotonic() + READY_TIMEOUT_S, "before it was ready")
        except WorkerTimeout:
            self.kill()
            raise WorkerDied(f"{name} was not ready after {READY_TIMEOUT_S:.0f} s; killed") from None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def request(self, job: dict, timeout: float | None = None) -> dict:
        """Run ``job`` in the child; its reply dict. Raises :class:`WorkerDied` or :class:`WorkerTimeout`."""
        cwd = os.getcwd()
        message = {"job": job, "cwd": cwd, "sys_path": [p or cwd for p in sys.path]}
        try:
            self._send(message)
        except OSError as exc:
            raise self._death(f"while taking the task ({type(exc).__name__}: {exc})") from None
        deadline = None if not timeout else time.monotonic() + timeout
        try:
            return self._read_reply(deadline, "while running the task")
        except WorkerTimeout:
            self.kill()
            raise WorkerTimeout(f"task exceeded its timeout of {timeout} s; worker killed") from None

    def close(self, grace_s: float = 5.0) -> None:
        """Ask the child to stop; kill it if it has not after ``grace_s``."""
        if self.alive():
            try:
                self._send({"stop": True})
                self._proc.wait(timeout=grace_s)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def interrupt(self) -> None:
        """Kill the child's process group from any thread; the thread in :meth:`request` sees it die."""
        _kill_group(self._proc)

    def kill(self) -> None:
        _kill_group(self._proc)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass  # unkillable (uninterruptible sleep in a driver): nothing more we can do
        for fd in (self._job_write, self._reply_read):
            try:
                os.close(fd)
            except OSError:
                pass  # already closed by an earlier kill
        self._job_write = self._reply_read = -1
        _LIVE.discard(self)

    # ---- pipes ----------------------------------------------------------------------------
    def _send(self, message: dict) -> None:
        data = json.dumps(message).encode() + b"\n"
        while data:  # a job larger than the pipe buffer is written as the child reads it
            data = data[os.write(self._job_write, data):]

    def _read_reply(self, deadline: float | None, during: str) -> dict:
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WorkerTimeout(f"{self.name} gave no answer in time")
            # wake up now and then: a grandchild holding the reply pipe would hide the child's death
            ready, _, _ = select.select([self._reply_read], [], [], 0.25 if left is None else min(left, 0.25))
            if ready:
                chunk = os.read(self._reply_read, 1 << 16)
                if not chunk:
                    raise self._death(during)
                self._buffer += chunk
            elif _exited(self._proc) and not select.select([self._reply_read], [], [], 0)[0]:
                raise self._death(during)
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _death(self, during: str) -> WorkerDied:
        _kill_group(self._proc)  # the tools a crashed task started die with it
        try:
            self._proc.wait(timeout=1)  # its pipes close a moment before its exit status exists
        except subprocess.TimeoutExpired:
            pass
        self.kill()
        self._echo.join(timeout=2)  # let the last lines it printed arrive
        summary = last_words(list(self._tail))
        message = f"{self.name} died ({describe_exit(self._proc.returncode)}) {during}"
        return WorkerDied(message + (f"; last output: {summary}" if summary else ""), "\n".join(self._tail))

    def _echo_output(self) -> None:
        # the child's stdout and stderr: shown to the user as before, the tail kept for errors
        for raw in self._proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._tail.append(line)
            try:
                print(f"[{self.name}] {line}", file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass  # our stderr is gone (interpreter shutting down): keep draining the pipe
        self._proc.stdout.close()


class WorkerSlot:
    """One worker of ``role``, started on demand and replaced by a fresh one after any failure.

    :meth:`run` never raises: a dead, unreachable or timed-out child becomes a reply with status
    ``killed`` or ``timeout`` (the child's last output under ``traceback``), failing that job only.
    """

    def __init__(self, role: str, *, name: str, env: dict[str, str] | None = None) -> None:
        self.role, self.name, self.env = role, name, env
        self.worker: WorkerProcess | None = None
        self.started_processes = 0

    @property
    def pid(self) -> int | None:
        return self.worker.pid if self.worker is not None else None

    def ensure(self) -> WorkerProcess:
        """The live child, starting one if there is none. Raises :class:`WorkerDied` if it cannot start."""
        if self.worker is not None and not self.worker.alive():
            self.worker.kill()
            self.worker = None
        if self.worker is None:
            self.worker = WorkerProcess(self.role, name=self.name, env=self.env)
            self.started_processes += 1
        return self.worker

    def run(self, job: dict, timeout: float | None = None) -> dict:
        """The reply, with ``run_s``: seconds from handing the job to the child until its answer (or death)."""
        started = None
        try:
            worker = self.ensure()
            started = time.monotonic()  # the task's clock: not the queue, not the child's start-up
            return _timed(worker.request(job, timeout), started)
        except WorkerTimeout as exc:
            self._drop()
            return _timed({"status": "timeout", "error": str(exc)}, started)
        except WorkerDied as exc:
            self._drop()
            return _timed({"status": "killed", "error": str(exc),
                           "traceback": f"last output of {self.name}:\n{exc.output}" if exc.output else ""}, started)
        except Exception as exc:  # e.g. the interpreter could not be started at all
            self._drop()
            return _timed({"status": "killed", "error": f"{self.name} failed: {type(exc).__name__}: {exc}"}, started)

    def interrupt(self) -> None:
        """Kill the running child (from another thread: close() must not wait for a hung task)."""
        worker = self.worker
        if worker is not None:
            worker.interrupt()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def _drop(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None


def _timed(reply: dict, started: float | None) -> dict:
    if started is not None:
        reply.setdefault("run_s", time.monotonic() - started)
    return reply


def _kill_group(proc: subprocess.Popen) -> None:
    # only while the child is unreaped (alive or a zombie): until then its pid, the group's id, stays ours
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its group (start_new_session)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, without reaping it (so :func:`_kill_group` can still reach its group)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


@atexit.register
def _kill_leftovers() -> None:
    # a parent that exits mid-task (Ctrl-C, an exception past Runtime.close) leaves no child behind
    for worker in list(_LIVE):
        worker.kill()


def import_job_modules(modules: list[str]) -> None:
    """Import the modules a job names (they register backends and handlers at import).

    ``__main__`` is refused: in a worker it is this module, not the caller's script, so what the
    script registered would silently be missing (or a built-in of the same name used instead).
    """
    for module in modules:
        if module == "__main__":
            raise ImportError("a backend or handler of this task is defined in the calling script (__main__), which "
                              "worker processes never re-run; define it in an importable module and import that")
        importlib.import_module(module)


# ---- child side ---------------------------------------------------------------------------
def _adopt(message: dict) -> None:
    # the parent's view of where modules and relative paths are, as spawn would have given us
    if message.get("cwd"):
        os.chdir(message["cwd"])
    parent = [p for p in message.get("sys_path") or [] if isinstance(p, str)]
    if parent:
        sys.path[:] = parent + [p for p in sys.path if p not in parent]


def _watch_parent(parent_pid: int) -> None:
    # reparented (the scheduler died, even by SIGKILL mid-task): take our process group with us
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_S)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _reply(out, doc: dict) -> None:
    out.write(json.dumps(doc).encode() + b"\n")
    out.flush()


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ROLES:
        print(f"usage: python -m {MODULE} {{{','.join(ROLES)}}} JOB_FD REPLY_FD (got {argv})", file=sys.stderr)
        return 2
    role, job_fd, reply_fd = argv[0], int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns our lifetime (Ctrl-C reaches it too)
    faulthandler.enable()  # a segfault leaves a Python stack in the output tail
    parent = os.environ.pop(PARENT_PID_ENV, "")  # popped: tools we start are not workers
    if parent.isdigit():
        threading.Thread(target=_watch_parent, args=(int(parent),), name="argus-parent-watch", daemon=True).start()
    for fd in (job_fd, reply_fd):
        os.set_inheritable(fd, False)  # processes a backend starts must not hold our protocol pipes
    module, func = ROLES[role]
    run = getattr(importlib.import_module(module), func)
    _warm_in_background(role)
    with os.fdopen(job_fd, "rb") as jobs, os.fdopen(reply_fd, "wb") as replies:
        _reply(replies, {"ready": True, "pid": os.getpid()})
        for line in jobs:  # ends when the parent closes the pipe (or dies)
            message = json.loads(line)
            if message.get("stop"):
                break
            try:
                _adopt(message)
                doc = run(message["job"])
            except BaseException as exc:  # the task failed, not the worker
                doc = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            _reply(replies, doc)
    # Every reply is written and flushed, every output is on disk: leave without finalising the
    # interpreter. Finalising torch, its CUDA context and Triton took ~1.4 s of each Runtime.close
    # (measured on the CPU), and under a warm-up thread halfway through importing torch it can crash.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _warm_in_background(role: str) -> threading.Thread | None:
    """Start :data:`WARM`'s function of ``role`` in a daemon thread when ``$ARGUS_WORKER_WARM`` is 1."""
    if os.environ.pop(WARM_ENV, "") != "1" or role not in WARM:  # popped: tools we start are not workers
        return None
    module, func = WARM[role]
    warm = getattr(importlib.import_module(module), func)

    def body() -> None:
        try:
            warm()
        except Exception as exc:  # a failed warm-up only means the first task pays for it (and says why)
            print(f"argus worker: warm-up failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    thread = threading.Thread(target=body, name="argus-worker-warm", daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
