"""R = 0 without staging or barrier: each rank pushes its chunks into the peers' receive buffers.

Why: the pull schedule must stage the shard into symmetric memory and meet the peers before the
first pull; both sit before the local GEMM (a barrier kernel issued later would wait for a free SM,
and the persistent GEMM holds them all). Here the copy engines write my chunks straight into each
peer's symmetric receive buffer and a stream memory operation bumps the peer's arrival counter, so
nothing precedes the local GEMM, and no SM is used for communication.

Flags (int32, symmetric, per rank): ``arrive[sender]`` counts the chunks that sender has delivered
here, over the runtime's life; ``free[receiver]`` is the last push call whose data that receiver has
finished multiplying. Receive slots alternate per call, so a sender only waits for the receiver to
be done with the call before last (normally long done, so the wait does not block):

    comm (sender):    wait free[p] >= c-2 | for chunk s: copy -> p.slot[c%2][me]; p.arrive[me] = base+s+1
    compute (recv.):  local GEMM | per step: wait arrive[p] >= base+last+1; GEMM | p.free[me] = c

Every rank must issue the same sequence of calls (same S), which the operator already requires.
A device wait has no timeout: the runtime's :class:`overlap.streamsync.Watchdog` bounds it.
"""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from .streamsync import wait32, write32


class PushExchange:
    """Receive buffers, flags and counters of the push schedule for one process group."""

    def __init__(self, drv, group, rank: int, world: int, peers, device):
        import torch.distributed._symmetric_memory as symm_mem

        self.drv, self.group, self.rank, self.world, self.peers = drv, group, rank, world, list(peers)
        self.device = device
        self._symm = symm_mem
        name = group.group_name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            symm_mem.enable_symm_mem_for_group(name)
        self._flag_buf = symm_mem.empty(2 * world, dtype=torch.int32, device=device)
        handle = symm_mem.rendezvous(self._flag_buf, name)
        self._flag_buf.zero_()
        torch.cuda.synchronize(device)
        dist.barrier(group=group, device_ids=[device.index])  # nobody signals before all are zeroed
        self._flag_base = {o: handle.get_buffer(o, (2 * world,), torch.int32, storage_offset=0).data_ptr()
                           for o in range(world)}
        self._flag_handle = handle
        self._recv = None  # (handle, elems per sender, dtype, tensor)
        self._views = {}
        self.calls = 0   # push calls so far (the value of `free`)
        self.chunks = 0  # chunks each sender has pushed to each peer so far (the value of `arrive`)

    def arrive_ptr(self, owner: int, sender: int) -> int:
        return self._flag_base[owner] + 4 * sender

    def free_ptr(self, owner: int, receiver: int) -> int:
        return self._flag_base[owner] + 4 * (self.world + receiver)

    def _recv_view(self, owner: int, slot: int, sender: int, shape, dtype):
        elems = shape[0] * shape[1]
        if self._recv is None or self._recv[1] < elems or self._recv[2] != dtype:
            # Collective (every rank reaches the same call with the same shape). Two slots x world senders.
            torch.cuda.synchronize(self.device)
            buf = self._symm.empty(2 * self.world * elems, dtype=dtype, device=self.device)
            handle = self._symm.rendezvous(buf, self.group.group_name)
            self._recv, self._views = (handle, elems, dtype, buf), {}
        handle, per = self._recv[0], self._recv[1]
        key = (owner, slot, sender, tuple(shape), dtype)
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = handle.get_buffer(owner, tuple(shape), dtype,
                                                     storage_offset=(slot * self.world + sender) * per)
        return v

    def run(self, a_shard, b, out, bounds, steps, compute, comm, local_gemm, gemm_rows):
        """One call: local GEMM at once; chunks pushed on ``comm``; each step waits for its chunks.

        ``steps``: (last chunk index, lo, hi) per GEMM step; ``gemm_rows(src, peer, lo, hi)`` multiplies
        rows [lo, hi) received from ``peer`` (``src``: that peer's receive view) into ``out``.
        """
        shape, dtype = tuple(a_shard.shape), a_shard.dtype
        self.calls += 1
        call, slot, base = self.calls, self.calls % 2, self.chunks
        self.chunks += len(bounds)
        # Views first: growing the buffer is collective and must not sit between stream operations.
        dst = {p: self._recv_view(p, slot, self.rank, shape, dtype) for p in self.peers}
        src = {p: self._recv_view(self.rank, slot, p, shape, dtype) for p in self.peers}
        comm.wait_stream(compute)  # a_shard is ready
        local_gemm(a_shard, b, out)  # nothing before it: no staging, no barrier
        cs = comm.cuda_stream
        for p in self.peers:  # the peer is done reading this slot (call before last)
            wait32(self.drv, cs, self.free_ptr(self.rank, p), call - 2)
        with torch.cuda.stream(comm):
            for s, (lo, hi) in enumerate(bounds):
                for p in self.peers:
                    dst[p][lo:hi].copy_(a_shard[lo:hi])  # copy engine, straight into the peer's slot
                    write32(self.drv, cs, self.arrive_ptr(p, self.rank), base + s + 1)
        ks = compute.cuda_stream
        for last, lo, hi in steps:
            for p in self.peers:
                wait32(self.drv, ks, self.arrive_ptr(self.rank, p), base + last + 1)
            for p in self.peers:
                gemm_rows(src[p], p, lo, hi)
        for p in self.peers:  # tell each sender this slot may be reused
            write32(self.drv, ks, self.free_ptr(p, self.rank), call)
        compute.wait_stream(comm)
