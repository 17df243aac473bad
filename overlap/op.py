"""Y = all_gather(A) @ B with the peers' rows exchanged in S chunks while the GEMM runs.

Rows of Y follow the gathered A: rank r's shard lands in rows [r*M_shard, (r+1)*M_shard).
Schedule of one call (compute = the caller's stream, comm = a high-priority stream):

    compute: [local rows @ B] [wait chunks 1..P][peers' rows of chunks 1..P @ B] [wait ..P+P] ...
    comm:    [chunk 1][chunk 2] ... [chunk S]

The local shard needs no communication, so its GEMM starts at once and hides the first chunk;
each later GEMM step multiplies the rows of P freshly arrived chunks, one launch per peer, written
straight into that peer's rows of Y (no reassembly copy).

R > 0: each chunk is a batched NCCL send/recv on the group whose communicator is capped at R CTAs,
and every GEMM of the call runs under the cuBLASLt SM carve-out R (SMs - R for the GEMM).
R = 0: the copy engines carry the data: each rank copies its shard into a symmetric-memory buffer
(double-buffered, so one barrier per call suffices), then pulls the peers' chunks with peer
``cudaMemcpyAsync``; the GEMM keeps every SM. Multicast is never used. ``sync="push"`` skips the
staging and the barrier: chunks are copied straight into the peers' receive buffers and announced
by stream memory operations (:mod:`overlap.push`). With ``sync="stream"`` the
staging copy, the barrier (stream memory operations, :mod:`overlap.streamsync`) and the pulls all
sit on the comm stream and need no SM, so the local GEMM starts at once; ``sync="kernel"`` stages
and runs the symmetric-memory barrier kernel on the compute stream before the local GEMM.
On CPU tensors (gloo, tests) the same chunking and reassembly run synchronously.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import warnings

import torch
import torch.distributed as dist

from .config import OverlapConfig, OverlapShapeError, check_operands, chunk_bounds
from .groups import CommGroupPool
from .streamsync import FlagBarrier, Watchdog, driver_or_none

#: how R = 0 moves and synchronises the shards (see the module docstring); the first usable one is
#: the default, and the benchmark keeps the fastest by measurement
SYNC_METHODS = ("push", "stream", "kernel")


@contextlib.contextmanager
def gemm_sm_limit(r: int):
    """Hold cuBLAS GEMMs to SMs - r while inside (cuBLASLt ``SM_COUNT_TARGET`` via PyTorch's carve-out).

    r = 0 (or no CUDA) leaves the BLAS settings untouched (the GEMM keeps every SM).
    """
    if r <= 0 or not torch.cuda.is_available():
        yield
        return
    prev_lib = torch.backends.cuda.preferred_blas_library()
    prev = torch._C._get_sm_carveout_experimental()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the carve-out warns once that it is experimental
        torch.backends.cuda.preferred_blas_library("cublaslt")
        torch._C._set_sm_carveout_experimental(r)
    try:
        yield
    finally:
        torch._C._set_sm_carveout_experimental(prev)
        torch.backends.cuda.preferred_blas_library(prev_lib)


def serial_all_gather_matmul(a_shard: torch.Tensor, b: torch.Tensor, group=None) -> torch.Tensor:
    """The reference: one all-gather, then one GEMM (no overlap)."""
    check_operands(a_shard, b)
    world = dist.get_world_size(group)
    a_full = torch.empty((world * a_shard.shape[0], a_shard.shape[1]), dtype=a_shard.dtype, device=a_shard.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # renamed in torch 2.13; 2.11 on the GPUs lacks the new name
        dist.all_gather_into_tensor(a_full, a_shard, group=group)
    return torch.mm(a_full, b)


class AllGatherMatmul:
    """The pipelined operator. Build it on every rank with the same ``r_values`` (collective)."""

    def __init__(self, r_values=(0,), group=None, timeout_s: float = 120.0):
        if timeout_s <= 0:
            raise OverlapShapeError(f"timeout_s must be > 0 seconds, got {timeout_s}")
        # Bounded waits: a dead peer ends a CPU exchange or a symmetric-memory barrier with an error.
        self.timeout = _dt.timedelta(seconds=timeout_s)
        self.pool = CommGroupPool(r_values, group)
        self.group = self.pool.parent
        self.world = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        self.global_ranks = self.pool.ranks
        # Peer order rotates with the rank so no link is everybody's first target.
        self.peers = [(self.rank + i) % self.world for i in range(1, self.world)]
        self._comm_stream = None
        #: how R = 0 stages the local shard into symmetric memory: "memcpy" (copy engine) or "kernel"
        #: (an SM copy kernel); chosen by measurement (:meth:`choose_staging`), both exact.
        self.staging = "memcpy"
        #: how R = 0 ranks synchronise: "stream" (needs cuda-python) or "kernel"; see SYNC_METHODS.
        self.sync = "push" if driver_or_none() is not None else "kernel"
        self._sync_disabled: set[str] = set()
        self._push = None  # PushExchange, made on first use (collective)
        self._symm = None  # (handle, slot_elems, dtype) of the symmetric buffer, grown on demand
        self._flags = None  # FlagBarrier of the "stream" sync, made on first use (collective)
        self._watchdog = None
        self._gathered = {}  # (m_shard, k, dtype, device) -> receive buffer, reused across calls
        self._views = {}  # (owner rank, shape, dtype, offset) -> view into the symmetric buffer
        self._calls = 0
        self._seq = 0  # R = 0 calls on CUDA: slot parity and the flag value of the stream barrier

    # -- public -------------------------------------------------------------------------------
    def __call__(self, a_shard: torch.Tensor, b: torch.Tensor, cfg: OverlapConfig,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """Return Y [world*M_shard, N] = all_gather(a_shard) @ b under the knobs ``cfg``."""
        if not isinstance(cfg, OverlapConfig):
            raise OverlapShapeError(f"cfg must be an OverlapConfig, got {type(cfg).__name__}")
        m_shard, k, n = check_operands(a_shard, b, cfg)
        if cfg.R not in self.pool.r_values:
            raise OverlapShapeError(f"R={cfg.R} has no communication group; built with R in {self.pool.r_values}")
        shape = (self.world * m_shard, n)
        if out is None:
            out = torch.empty(shape, dtype=a_shard.dtype, device=a_shard.device)
        elif tuple(out.shape) != shape or out.dtype != a_shard.dtype or not out.is_contiguous():
            raise OverlapShapeError(f"out must be a contiguous {a_shard.dtype} tensor of shape {shape}, "
                                    f"got {out.dtype} {tuple(out.shape)} contiguous={out.is_contiguous()}")
        bounds = chunk_bounds(m_shard, cfg.S)
        if a_shard.device.type == "cuda":
            self._run_cuda(a_shard, b, cfg, bounds, out)
        else:
            self._run_sync(a_shard, b, cfg, bounds, out)
        self._calls += 1
        return out

    # -- the GEMM steps, shared by both paths -------------------------------------------------
    def _local_gemm(self, a_shard, b, out):
        m = a_shard.shape[0]
        torch.mm(a_shard, b, out=out[self.rank * m:(self.rank + 1) * m])

    def _step_gemm(self, gathered, b, out, lo, hi):
        m = gathered.shape[1]
        for peer in self.peers:
            torch.mm(gathered[peer, lo:hi], b, out=out[peer * m + lo:peer * m + hi])

    def _steps(self, cfg, bounds):
        """(index of the last chunk the step waits for, lo, hi) per GEMM step."""
        for g in range(cfg.steps):
            first, last = g * cfg.P, (g + 1) * cfg.P - 1
            yield last, bounds[first][0], bounds[last][1]

    # -- communication ------------------------------------------------------------------------
    def _exchange_chunk(self, a_shard, gathered, lo, hi, group):
        """Send my rows [lo, hi) to every peer and receive theirs; return the works."""
        ops = []
        for peer in self.peers:
            gpeer = self.global_ranks[peer]
            ops.append(dist.P2POp(dist.isend, a_shard[lo:hi], gpeer, group))
            ops.append(dist.P2POp(dist.irecv, gathered[peer, lo:hi], gpeer, group))
        return dist.batch_isend_irecv(ops) if ops else []

    def _run_sync(self, a_shard, b, cfg, bounds, out):
        m_shard, k = a_shard.shape
        gathered = torch.empty((self.world, m_shard, k), dtype=a_shard.dtype, device=a_shard.device)
        group = self.pool.group(cfg.R)
        self._local_gemm(a_shard, b, out)
        arrived = -1
        for last, lo, hi in self._steps(cfg, bounds):
            while arrived < last:
                arrived += 1
                clo, chi = bounds[arrived]
                for w in self._exchange_chunk(a_shard, gathered, clo, chi, group):
                    w.wait(self.timeout)
            self._step_gemm(gathered, b, out, lo, hi)

    def _stream(self, device):
        if self._comm_stream is None:
            lo, hi = torch.cuda.Stream.priority_range()
            self._comm_stream = torch.cuda.Stream(device=device, priority=min(lo, hi))
        return self._comm_stream

    def _symm_slots(self, a_shard):
        """Symmetric buffer with two slots of M_shard*K elements; returns (handle, slot_elems)."""
        import torch.distributed._symmetric_memory as symm_mem

        elems = a_shard.numel()
        if self._symm is None or self._symm[1] < elems or self._symm[2] != a_shard.dtype:
            name = self.group.group_name
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                symm_mem.enable_symm_mem_for_group(name)
            buf = symm_mem.empty(2 * elems, dtype=a_shard.dtype, device=a_shard.device)
            handle = symm_mem.rendezvous(buf, name)
            self._symm = (handle, elems, a_shard.dtype, buf)
            self._views = {}  # views into the old buffer must not outlive it
        return self._symm[0], self._symm[1]

    def sync_methods(self) -> list[str]:
        """R = 0 barrier methods usable here ("stream" needs cuda-python and not to have failed)."""
        return [m for m in SYNC_METHODS if m not in self._sync_disabled
                and (m == "kernel" or driver_or_none() is not None)]

    def disable_sync(self, method: str) -> None:
        """Stop using a barrier method (e.g. it failed a preflight); falls back to the first one left."""
        if method not in SYNC_METHODS:
            raise OverlapShapeError(f"sync method must be one of {SYNC_METHODS}, got {method!r}")
        self._sync_disabled.add(method)
        left = self.sync_methods()
        if not left:
            raise OverlapShapeError(f"no R = 0 barrier method left (disabled: {sorted(self._sync_disabled)})")
        if self.sync == method:
            self.sync = left[0]

    def _view(self, handle, owner, shape, dtype, offset):
        key = (owner, shape, dtype, offset)
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = handle.get_buffer(owner, shape, dtype, storage_offset=offset)
        return v

    def _flag_barrier(self, device):
        """The stream-memory-operation barrier (collective on first use: allocate, zero, meet)."""
        if self._flags is None:
            import torch.distributed._symmetric_memory as symm_mem

            drv = driver_or_none()
            if drv is None:
                raise OverlapShapeError("sync='stream' needs cuda-python (cuda.bindings); use sync='kernel'")
            name = self.group.group_name
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                symm_mem.enable_symm_mem_for_group(name)
            buf = symm_mem.empty(self.world, dtype=torch.int32, device=device)
            handle = symm_mem.rendezvous(buf, name)
            buf.zero_()
            torch.cuda.synchronize(device)
            # Nobody may signal before every rank has zeroed its flags.
            dist.barrier(group=self.group, device_ids=[device.index])
            ptrs = {o: handle.get_buffer(o, (self.world,), torch.int32, storage_offset=0).data_ptr()
                    for o in range(self.world)}
            self._flags = (FlagBarrier(drv, self.rank, self.peers, lambda owner, sender: ptrs[owner] + 4 * sender),
                           buf, handle)
            self._ensure_watchdog(device)
        return self._flags[0]

    def _ensure_watchdog(self, device):
        if self._watchdog is None:
            index = device.index
            self._watchdog = Watchdog(self.timeout.total_seconds(), thread_init=lambda: torch.cuda.set_device(index))

    def _push_exchange(self, device):
        if self._push is None:
            from .push import PushExchange

            drv = driver_or_none()
            if drv is None:
                raise OverlapShapeError("sync='push' needs cuda-python (cuda.bindings); use sync='kernel'")
            self._push = PushExchange(drv, self.group, self.rank, self.world, self.peers, device)
            self._ensure_watchdog(device)
        return self._push

    def _receive_buffer(self, a_shard):
        key = (tuple(a_shard.shape), a_shard.dtype, a_shard.device)
        buf = self._gathered.get(key)
        if buf is None:
            m_shard, k = a_shard.shape
            buf = torch.empty((self.world, m_shard, k), dtype=a_shard.dtype, device=a_shard.device)
            self._gathered = {key: buf}  # keep one shape: a new shape frees the last one
        return buf

    def _stage(self, dst, src):
        if self.staging == "memcpy":
            dst.copy_(src)
        elif self.staging == "kernel":
            torch.mul(src, 1, out=dst)  # x * 1 == x exactly (NaN, inf and -0 included); runs on SMs
        else:
            raise OverlapShapeError(f"staging must be 'memcpy' or 'kernel', got {self.staging!r}")

    def choose_staging(self, a_shard, iters: int = 20) -> dict:
        """Time both ways of staging ``a_shard`` into symmetric memory on this rank; keep the faster
        by the slowest rank's time (every rank decides alike). Returns {method: ms}."""
        handle, _ = self._symm_slots(a_shard)
        dst = handle.get_buffer(self.rank, tuple(a_shard.shape), a_shard.dtype, storage_offset=0)
        times = {}
        for method in ("memcpy", "kernel"):
            self.staging = method
            for _ in range(3):
                self._stage(dst, a_shard)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                self._stage(dst, a_shard)
            end.record()
            torch.cuda.synchronize()
            t = torch.tensor([start.elapsed_time(end) / iters], dtype=torch.float64, device=a_shard.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
            times[method] = float(t.item())
        self.staging = min(times, key=times.get)
        # The slot written here is read by nobody; the next call's barrier orders everything after it.
        return times

    def _run_cuda(self, a_shard, b, cfg, bounds, out):
        compute = torch.cuda.current_stream()
        comm = self._stream(a_shard.device)
        if cfg.R == 0 and self.world > 1 and self.sync == "push":
            def rows(src, peer, lo, hi):
                m = src.shape[0]
                torch.mm(src[lo:hi], b, out=out[peer * m + lo:peer * m + hi])

            self._push_exchange(a_shard.device).run(a_shard, b, out, bounds, list(self._steps(cfg, bounds)),
                                                    compute, comm, self._local_gemm, rows)
            self._track(compute)
            return
        # Reused across calls: every write to it (comm) is ordered after the last call's reads (compute).
        gathered = self._receive_buffer(a_shard)
        arrived = [torch.cuda.Event() for _ in bounds]
        if cfg.R == 0 and self.world > 1:
            if self.sync not in SYNC_METHODS:
                raise OverlapShapeError(f"sync must be one of {SYNC_METHODS}, got {self.sync!r}")
            self._run_copy_engine(a_shard, b, out, bounds, gathered, arrived, compute, comm)
        else:
            comm.wait_stream(compute)
            group = self.pool.group(cfg.R)
            with gemm_sm_limit(cfg.R):
                # Issued before the NCCL kernels so the GEMM takes SMs - R and NCCL the R left.
                self._local_gemm(a_shard, b, out)
            with torch.cuda.stream(comm):
                for s, (lo, hi) in enumerate(bounds):
                    for w in self._exchange_chunk(a_shard, gathered, lo, hi, group):
                        w.wait()  # makes `comm` wait for NCCL's stream, not the host
                    arrived[s].record(comm)
        with gemm_sm_limit(cfg.R):
            for last, lo, hi in self._steps(cfg, bounds):
                compute.wait_event(arrived[last])
                self._step_gemm(gathered, b, out, lo, hi)
        compute.wait_stream(comm)
        if cfg.R == 0 and self.world > 1 and self.sync == "stream":
            self._track(compute)

    def _track(self, compute):
        """Hand the call's completion to the watchdog (device waits of their own never time out)."""
        done = torch.cuda.Event()
        done.record(compute)
        self._watchdog.track(done)

    def _run_copy_engine(self, a_shard, b, out, bounds, gathered, arrived, compute, comm):
        """R = 0: stage my shard into my slot, meet the peers, pull their chunks (copy engines).

        Slots alternate per call. Safe because a rank stages call c into slot c % 2 only after the
        barrier of call c - 1, which every peer reaches after finishing its pulls of call c - 2 (the
        last ones from that slot): pulls, staging and barrier are in one stream order on each rank.
        """
        handle, slot_elems = self._symm_slots(a_shard)
        self._seq += 1
        offset = (self._seq % 2) * slot_elems
        shape, dtype = tuple(a_shard.shape), a_shard.dtype
        mine = self._view(handle, self.rank, shape, dtype, offset)
        remote = {p: self._view(handle, p, shape, dtype, offset) for p in self.peers}
        if self.sync == "stream":
            barrier = self._flag_barrier(a_shard.device)
            comm.wait_stream(compute)  # a_shard is ready, the last call's reads of `gathered` are done
            with torch.cuda.stream(comm):
                mine.copy_(a_shard)  # copy engine: an SM kernel here would queue behind the GEMM
            barrier.arrive_and_wait(comm.cuda_stream, self._seq)
            self._local_gemm(a_shard, b, out)  # starts at once, on every SM
        else:
            self._stage(mine, a_shard)
            # After this barrier every peer's slot holds its shard (see the docstring for reuse).
            handle.barrier(channel=0, timeout_ms=int(self.timeout.total_seconds() * 1000))
            comm.wait_stream(compute)
            self._local_gemm(a_shard, b, out)
        with torch.cuda.stream(comm):
            for s, (lo, hi) in enumerate(bounds):
                for peer in self.peers:
                    gathered[peer, lo:hi].copy_(remote[peer][lo:hi])
                arrived[s].record(comm)
