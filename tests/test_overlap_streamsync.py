"""The stream-memory-operation barrier's protocol, its watchdog, and per-call interleaved timing (CPU).

The barrier runs on a recording stand-in for cuda-python's driver (the real one is exercised by
tests/test_overlap_gpu.py on two GPUs); the watchdog on a fake clock and fake events.
"""
from __future__ import annotations

import os

import pytest
import torch.distributed as dist

from overlap.streamsync import FlagBarrier, StreamSyncError, Watchdog
from tests.rank_procs import free_port


class _Enum:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _FakeDriver:
    """Records (op, stream, address, value, flags) instead of touching a GPU."""

    def __init__(self, fail_on=None):
        self.calls, self.fail_on = [], fail_on
        self.CUresult = _Enum(CUDA_SUCCESS=0)
        self.CUstreamWriteValue_flags = _Enum(CU_STREAM_WRITE_VALUE_DEFAULT=0)
        self.CUstreamWaitValue_flags = _Enum(CU_STREAM_WAIT_VALUE_GEQ=0)

    def CUstream(self, h):
        return ("stream", h)

    def CUdeviceptr(self, p):
        return p

    def _op(self, name, stream, addr, value, flags):
        self.calls.append((name, stream[1], addr, value, flags))
        return (1,) if name == self.fail_on else (0,)

    def cuStreamWriteValue32(self, stream, addr, value, flags):
        return self._op("write", stream, addr, value, flags)

    def cuStreamWaitValue32(self, stream, addr, value, flags):
        return self._op("wait", stream, addr, value, flags)


def _ptr(owner, sender):
    return 1000 * owner + sender


def test_barrier_signals_every_peer_then_waits_on_its_own_flags():
    drv = _FakeDriver()
    FlagBarrier(drv, rank=1, peers=[2, 0], flag_ptr=_ptr).arrive_and_wait(77, seq=5)
    # Writes go to each peer's flag for rank 1, then waits on rank 1's flags of each peer, in order.
    assert drv.calls == [("write", 77, 2001, 5, 0), ("write", 77, 1, 5, 0),
                         ("wait", 77, 1002, 5, 0), ("wait", 77, 1000, 5, 0)]


def test_barrier_value_wraps_at_32_bits_and_errors_are_named():
    drv = _FakeDriver()
    FlagBarrier(drv, 0, [1], _ptr).arrive_and_wait(1, seq=2**32 + 3)
    assert {c[3] for c in drv.calls} == {3}  # the device compares cyclically, so wrapping is harmless
    with pytest.raises(StreamSyncError, match="cuStreamWaitValue32"):
        FlagBarrier(_FakeDriver(fail_on="wait"), 0, [1], _ptr).arrive_and_wait(1, seq=1)


class _Done:
    def __init__(self):
        self.done = False

    def query(self):
        return self.done


def test_watchdog_fires_only_when_the_oldest_call_stays_unfinished_past_the_timeout():
    now = [0.0]
    fired = []
    wd = Watchdog(10.0, on_timeout=fired.append, clock=lambda: now[0])
    a, b = _Done(), _Done()
    wd._pending.extend([a, b])  # no thread: polled by hand
    assert not wd.check()          # a becomes the oldest at t = 0
    now[0] = 9.0
    assert not wd.check()
    a.done = True
    now[0] = 15.0
    assert not wd.check()          # a finished; b only became the oldest now
    now[0] = 24.0
    assert not wd.check()
    now[0] = 25.5
    assert wd.check() and len(fired) == 1 and "timeout 10.0 s" in fired[0]
    b.done = True
    assert not wd.check() and len(fired) == 1  # fires once
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        Watchdog(0)


def test_interleaved_timing_takes_one_call_of_each_function_in_turn():
    from overlap.measure import time_interleaved_ms

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        order = []
        fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b"), "c": lambda: order.append("c")}
        t = time_interleaved_ms(fns, rounds=2, iters=3, warmup=1)
        assert set(t) == {"a", "b", "c"} and all(v >= 0 for v in t.values())
        # per round: one warm-up pass, then 3 timed passes, always a, b, c
        assert order == ["a", "b", "c"] * 8
        with pytest.raises(ValueError, match="rounds and iters"):
            time_interleaved_ms(fns, rounds=0)
    finally:
        dist.destroy_process_group()


class _Stream:
    def __init__(self, handle, log):
        self.cuda_stream, self.log = handle, log

    def wait_stream(self, other):
        self.log.append(("join", self.cuda_stream, other.cuda_stream))


def _push_exchange(log, world=2, rank=0):
    """A PushExchange on CPU tensors: the flag writes/waits go to a recording driver."""
    import torch

    from overlap.push import PushExchange

    px = object.__new__(PushExchange)  # skip the symmetric-memory set-up
    px.drv, px.rank, px.world = _FakeDriver(), rank, world
    px.peers = [(rank + i) % world for i in range(1, world)]
    px._flag_base = {o: 1000 * (o + 1) for o in range(world)}
    px.calls = px.chunks = 0
    recv = {}

    def view(owner, slot, sender, shape, dtype):
        return recv.setdefault((owner, slot, sender), torch.zeros(shape, dtype=dtype))

    px._recv_view = view
    return px, recv


def test_push_orders_waits_copies_and_signals_per_call():
    import torch

    log = []
    px, recv = _push_exchange(log)
    compute, comm = _Stream(1, log), _Stream(2, log)
    a = torch.arange(8.0).reshape(4, 2)
    b = torch.eye(2)
    out = torch.zeros(8, 2)
    bounds = [(0, 2), (2, 4)]
    gemms = []
    for call in (1, 2, 3):
        px.drv.calls.clear()
        px.run(a, b, out, bounds, [(0, 0, 2), (1, 2, 4)], compute, comm,
               lambda a_, b_, o: gemms.append("local"), lambda src, p, lo, hi: gemms.append((p, lo, hi)))
        base = 2 * (call - 1)
        arrive_at_peer, arrive_here = 2000 + 4 * 0, 1000 + 4 * 1     # peer 1's counter for me; mine for peer 1
        free_here, free_at_peer = 1000 + 4 * (2 + 1), 2000 + 4 * (2 + 0)
        assert px.drv.calls == [
            ("wait", 2, free_here, (call - 2) & 0xFFFFFFFF, 0),       # peer done with this slot (call before last)
            ("write", 2, arrive_at_peer, base + 1, 0),                 # chunk 0 pushed
            ("write", 2, arrive_at_peer, base + 2, 0),                 # chunk 1 pushed
            ("wait", 1, arrive_here, base + 1, 0),                     # step 0 needs the peer's chunk 0
            ("wait", 1, arrive_here, base + 2, 0),                     # step 1 needs chunk 1
            ("write", 1, free_at_peer, call, 0),                       # this slot may be reused by the peer
        ]
    # My chunks landed in the peer's slot for me, alternating slots per call.
    assert torch.equal(recv[(1, 1, 0)], a) and torch.equal(recv[(1, 0, 0)], a)
    assert gemms == ["local", (1, 0, 2), (1, 2, 4)] * 3
