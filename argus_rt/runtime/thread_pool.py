"""The in-process CPU pool (``Runtime(cpu_pool="thread")``): daemon threads that run handlers here.

Cheapest dispatch, and handlers defined in the calling script work, but a thread cannot be killed
and a handler that crashes the interpreter (``os.abort``, a segfault) takes the caller with it: the
default pool is :class:`argus_rt.runtime.cpu_jobs.CpuProcessPool`. What this pool does promise: a
task's clock starts when a thread takes it (:meth:`started`), and a task written off at its timeout
(:meth:`abandon`) no longer holds a slot: a fresh thread takes its place, so queued tasks still
run, and :meth:`shutdown` never waits for a thread that is stuck.
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
from typing import Callable

from .queues import drain

_STOP = None


class CpuThreadPool:
    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"a CPU thread pool needs at least 1 worker, got {workers}")
        self._jobs: "queue.Queue" = queue.Queue()
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}  # task key -> time.monotonic() when a thread took it
        self._abandoned: set[str] = set()  # their threads retire when (if ever) the handler returns
        self._names = itertools.count()
        self._closed = False
        for _ in range(workers):
            self._spawn()

    def submit(self, key: str, fn: Callable, *args) -> None:
        """Run ``fn(*args)`` on a pool thread; ``key`` names the task for :meth:`started`."""
        if self._closed:
            raise RuntimeError("CpuThreadPool is shut down")
        self._jobs.put((key, fn, args))

    def started(self, key: str) -> float | None:
        """``time.monotonic()`` at which a thread began ``key``, or ``None`` while it waits in the queue."""
        return self._started.get(key)

    def pids(self) -> list[int]:
        return []  # no processes: everything runs in this one

    def abandon(self, key: str) -> None:
        """Write off the thread running ``key`` (past its timeout): another thread takes its slot."""
        with self._lock:
            if self._started.pop(key, None) is None:
                return
            self._abandoned.add(key)
        self._spawn()

    def shutdown(self, wait: bool = False) -> None:
        """Drop queued tasks and stop; never waits for a running handler (the threads are daemons)."""
        self._closed = True
        drain(self._jobs)
        self._jobs.put(_STOP)

    def _spawn(self) -> None:
        threading.Thread(target=self._loop, name=f"argus-cpu-{next(self._names)}", daemon=True).start()

    def _loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                self._jobs.put(_STOP)  # wake the next idle thread too
                return
            key, fn, args = item
            self._started[key] = time.monotonic()
            try:
                fn(*args)
            finally:
                with self._lock:
                    self._started.pop(key, None)
                    retire = key in self._abandoned
                    self._abandoned.discard(key)
            if retire:  # a replacement took this slot
                return
