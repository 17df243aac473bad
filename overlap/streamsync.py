"""A cross-GPU barrier made of stream memory operations, plus the watchdog that bounds its waits.

Why: the symmetric-memory barrier is a kernel. Issued while the local shard's GEMM runs, it needs an
SM, and cuBLAS's persistent GEMM holds every SM (one CTA each) until it ends, so the barrier, and the
peer copies queued behind it, would wait for the whole local GEMM. The usual way out (barrier
before the GEMM, on the GEMM's stream) puts the staging copy and the barrier on the critical path.
``cuStreamWriteValue32`` / ``cuStreamWaitValue32`` run in the stream's front end and need no SM,
so staging (copy engine), barrier and peer pulls all proceed while the GEMM keeps every SM.

Protocol (one int32 flag per (receiver, sender) in a symmetric buffer): in call number ``v`` a rank
writes ``v`` into each peer's flag for it (default write: a system-scope fence first, so the staged
shard is visible before the flag) and waits until its own flag of every peer is >= v (cyclic
compare, so wrapping at 2**32 is harmless). Waits have no timeout on the device; :class:`Watchdog`
ends the process with an error when a call stays unfinished past the timeout (a dead peer), so no
rank hangs.
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time


def driver_or_none():
    """cuda-python's driver module, or None when cuda-python is not installed."""
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python
        except ImportError:
            return None
    return driver


class StreamSyncError(RuntimeError):
    """A stream memory operation was refused by the driver."""


def _check(drv, result, what):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != int(drv.CUresult.CUDA_SUCCESS):
        raise StreamSyncError(f"{what} failed with {err!r}")


def write32(drv, stream_handle: int, addr: int, value: int) -> None:
    """Enqueue ``*addr = value`` on the stream, after a system-scope fence (the driver's default)."""
    _check(drv, drv.cuStreamWriteValue32(drv.CUstream(stream_handle), drv.CUdeviceptr(addr), value & 0xFFFFFFFF,
                                         drv.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT),
           "cuStreamWriteValue32")


def wait32(drv, stream_handle: int, addr: int, value: int) -> None:
    """Enqueue a wait until ``(int32)(*addr - value) >= 0`` (cyclic greater-or-equal) on the stream."""
    _check(drv, drv.cuStreamWaitValue32(drv.CUstream(stream_handle), drv.CUdeviceptr(addr), value & 0xFFFFFFFF,
                                        drv.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ),
           "cuStreamWaitValue32")


class FlagBarrier:
    """The flag protocol above over a symmetric int32 buffer ``flags`` of ``world`` elements.

    ``flag_ptr(owner, sender)``: the address, in this process, of ``owner``'s flag for ``sender``.
    """

    def __init__(self, drv, rank: int, peers, flag_ptr):
        self.drv, self.rank, self.peers, self.flag_ptr = drv, rank, list(peers), flag_ptr
        self.seq = 0

    def arrive_and_wait(self, stream_handle: int, seq: int) -> None:
        """Enqueue on ``stream_handle``: tell every peer we reached ``seq``, then wait for all of them."""
        for p in self.peers:
            write32(self.drv, stream_handle, self.flag_ptr(p, self.rank), seq)
        for p in self.peers:
            wait32(self.drv, stream_handle, self.flag_ptr(self.rank, p), seq)


class Watchdog:
    """Bounds device-side waits that have no timeout of their own.

    ``track(done)`` registers a call by an object with ``query() -> bool`` (a CUDA event recorded
    after the call). A daemon thread checks the oldest unfinished call; if it stays unfinished for
    ``timeout_s`` after becoming the oldest, ``on_timeout(message)`` runs; by default it prints the
    message and ends the process with exit code 1 (a peer died mid-protocol: nothing on this rank
    can release the wait safely, and torchrun then stops the other ranks).
    """

    def __init__(self, timeout_s: float, poll_s: float = 0.05, on_timeout=None, clock=time.monotonic,
                 thread_init=None):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
        self.timeout_s, self.poll_s, self.clock = timeout_s, poll_s, clock
        self.thread_init = thread_init  # e.g. select the CUDA device in the polling thread
        self.on_timeout = on_timeout or _exit_with
        self._pending = collections.deque()
        self._head_since = None
        self._lock = threading.Lock()
        self._thread = None
        self.fired = None

    def track(self, done) -> None:
        with self._lock:
            self._pending.append(done)
            if len(self._pending) > 4096:  # bounded memory: only the oldest matters
                self._pending.popleft()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="overlap-watchdog")
            self._thread.start()

    def check(self) -> bool:
        """One poll (also what the thread runs); returns True when the timeout fired."""
        with self._lock:
            while self._pending and self._pending[0].query():
                self._pending.popleft()
                self._head_since = None
            if not self._pending:
                return False
            now = self.clock()
            if self._head_since is None:
                self._head_since = now
                return False
            waited = now - self._head_since
        if waited > self.timeout_s and self.fired is None:
            self.fired = (f"overlap: a call has not finished {waited:.1f} s after becoming the oldest pending one "
                          f"(timeout {self.timeout_s} s): a peer rank stopped taking part in the stream barrier")
            self.on_timeout(self.fired)
            return True
        return False

    def _run(self):
        if self.thread_init is not None:
            self.thread_init()
        while self.fired is None:
            time.sleep(self.poll_s)
            self.check()


def _exit_with(message: str) -> None:
    print(f"[rank {os.environ.get('RANK', '?')}] {message}", file=sys.stderr, flush=True)
    os._exit(1)
