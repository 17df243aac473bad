"""Measurements for the model: event timing, Kineto timelines of one call, NVML SM clock.

One profiled call gives, on this rank: the duration of each communication chunk (NCCL
send/recv kernels for R > 0; the peer memcpys of each chunk for R = 0), each GEMM launch (local
shard first, then one per peer and step), and the set-up before the local GEMM — all measured
while both streams run. Times are milliseconds unless a name says otherwise.

Optional (off by default; ``overlap.tune --gemm-regions``): :func:`gemm_region_record` adds the
mainloop / epilogue region timings of the Triton region GEMM (:mod:`overlap.gemm_regions`) for a
configuration's GEMM shapes, labelled as the Triton GEMM's, not the cuBLAS GEMMs the op runs.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time

import torch
import torch.distributed as dist

GEMM_NAME_HINTS = ("gemm", "nvjet", "xmma", "cutlass", "gemv", "sm90_", "matmul")


def time_op_ms(fn, iters: int = 20, warmup: int = 5, group=None) -> dict:
    """Median/min/max per-call time (ms) of ``fn`` over ``iters`` calls, slowest rank's median.

    CUDA: events on the current stream around each call. CPU: ``perf_counter``.
    """
    cuda = torch.cuda.is_available() and dist.get_backend(group) == "nccl"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    dist.barrier(group=group)
    times = []
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for s, e in ev:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in ev]
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(times)
    t = torch.tensor([med], dtype=torch.float64, device="cuda" if cuda else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return {"median_ms": float(t.item()), "rank_median_ms": med, "min_ms": min(times), "max_ms": max(times),
            "iters": iters}


def time_interleaved_ms(fns: dict, rounds: int = 3, iters: int = 10, warmup: int = 2, group=None) -> dict:
    """Per-call time (ms) of each function, the calls of all functions taken in turn, one call each.

    Why per call: a sustained GEMM is power-bound and the SM clock drifts by 10-15 % over tens of
    milliseconds (NVML: 1980 -> 1550 MHz), so contenders timed one after the other in bursts are
    measured at different clocks. Taking ``f1, f2, ..., f1, f2, ...`` puts every contender in the
    same thermal and power state. Each call is timed by its own pair of CUDA events on the current
    stream (every function's work joins that stream before returning), after an untimed one-element
    all-reduce that lines the ranks up (two GPUs run the same GEMM at slightly different clocks, and
    without it a synchronising call would be charged the drift left by an unsynchronised one). Result: per function, the
    median over ``rounds * iters`` calls on this rank, then the slowest rank's median (MAX).
    On CPU (gloo) the same order with ``perf_counter``.
    """
    if rounds < 1 or iters < 1:
        raise ValueError(f"rounds and iters must be >= 1, got rounds={rounds}, iters={iters}")
    if not fns:
        raise ValueError("time_interleaved_ms needs at least one function")
    cuda = torch.cuda.is_available() and dist.get_backend(group) == "nccl"
    names = list(fns)
    per = {name: [] for name in names}
    token = torch.zeros(1, device="cuda" if cuda else "cpu")
    multi = dist.get_world_size(group) > 1

    def align():
        # Untimed, on the device: the ranks leave this tiny all-reduce together, so a call's time
        # does not include waiting for a peer that the previous (unsynchronised) call left behind.
        if cuda and multi:
            dist.all_reduce(token, group=group)

    for _ in range(rounds):
        for _ in range(warmup):
            for name in names:
                align()
                fns[name]()
        if cuda:
            torch.cuda.synchronize()
        dist.barrier(group=group)
        if cuda:
            ev = []
            for _ in range(iters):
                for name in names:
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    align()
                    s.record()
                    fns[name]()
                    e.record()
                    ev.append((name, s, e))
            torch.cuda.synchronize()
            for name, s, e in ev:
                per[name].append(s.elapsed_time(e))
        else:
            for _ in range(iters):
                for name in names:
                    t0 = time.perf_counter()
                    fns[name]()
                    per[name].append((time.perf_counter() - t0) * 1e3)
    meds = torch.tensor([statistics.median(per[name]) for name in names], dtype=torch.float64,
                        device="cuda" if cuda else "cpu")
    dist.all_reduce(meds, op=dist.ReduceOp.MAX, group=group)
    return {name: float(v) for name, v in zip(names, meds.tolist())}


CALL_MARK = "argus_overlap_call"


def device_events_of_one_call(fn, align_group=None) -> list[dict]:
    """Run ``fn`` once under torch.profiler (Kineto, CUDA activity) and return its device events,
    sorted by start: dicts with name, cat ("kernel"/"gpu_memcpy"/...), ts_us, dur_us, stream, grid, bytes.

    With ``align_group``, the ranks meet in a barrier inside the profiled window right before the
    call, so a chunk's duration is not inflated by one rank starting its profiler later than
    another; the barrier's all-reduce kernel and everything before its end are dropped.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        if align_group is not None:
            dist.barrier(group=align_group)
            torch.cuda.synchronize()
        with record_function(CALL_MARK):
            fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json", prefix="overlap_trace_")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as fh:
            trace = json.load(fh)
    finally:
        os.unlink(path)
    return device_events_from_trace(trace)


def device_events_from_trace(trace: dict) -> list[dict]:
    """Device events of a Chrome trace (Kineto export), sorted by start. When the window holds an
    all-reduce kernel (the alignment barrier; the overlap op never all-reduces), only events that
    start after its end are kept, on the device clock alone."""
    out = []
    for ev in trace.get("traceEvents", []):
        cat = ev.get("cat", "")
        if ev.get("ph") != "X" or cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        args = ev.get("args", {})
        out.append({"name": ev.get("name", ""), "cat": cat, "ts_us": float(ev["ts"]), "dur_us": float(ev.get("dur", 0.0)),
                    "stream": args.get("stream"), "grid": args.get("grid"), "bytes": args.get("bytes")})
    barrier_ends = [e["ts_us"] + e["dur_us"] for e in out if "allreduce" in e["name"].lower()]
    if barrier_ends:
        cut = max(barrier_ends)
        out = [e for e in out if e["ts_us"] >= cut]
    out.sort(key=lambda e: e["ts_us"])
    return out


def classify(ev: dict) -> str:
    """'comm' (NCCL kernel), 'copy' (memcpy), 'gemm', or 'other' (barriers, memsets...)."""
    name = ev["name"].lower()
    if ev["cat"] == "gpu_memcpy":
        return "copy"
    if "nccl" in name:
        return "comm"
    if ev["cat"] == "kernel" and any(h in name for h in GEMM_NAME_HINTS):
        return "gemm"
    return "other"


def summarize_call(events: list[dict], world: int, S: int, P: int, R: int) -> dict:
    """Split one call's device events into chunks and GEMM launches (ms)."""
    gemms = [e for e in events if classify(e) == "gemm"]
    per = max(world - 1, 1)
    if R == 0:
        copies = [e for e in events if classify(e) == "copy"]
        # Peer pulls show as "Memcpy PtoP"; the local staging copy (absent when staged by a kernel)
        # as "Memcpy DtoD". Without those names, the first copy is taken as the staging one.
        pulls = [e for e in copies if "ptop" in e["name"].lower()]
        if len(pulls) != S * per:
            pulls = copies[1:] if len(copies) == S * per + 1 else copies
        units, n_units = pulls, S * per
    else:
        units, n_units = [e for e in events if classify(e) == "comm"], S
    if units and len(units) % S == 0:
        g = len(units) // S  # == per (copies) or 1 (NCCL) when the split is exact
        chunks = [units[i * g:(i + 1) * g] for i in range(S)]
    else:
        chunks = []
    chunk_ms = [(max(e["ts_us"] + e["dur_us"] for e in c) - min(e["ts_us"] for e in c)) / 1e3 for c in chunks]
    expect = 1 + (world - 1) * (S // P)
    t0 = events[0]["ts_us"] if events else 0.0
    t_end = max((e["ts_us"] + e["dur_us"] for e in events), default=t0)
    summary = {
        "span_ms": (t_end - t0) / 1e3,
        "chunk_ms": chunk_ms,
        "comm_split": "exact" if len(units) == n_units else f"{len(units)} units for {n_units} expected",
        "gemm_ms": [e["dur_us"] / 1e3 for e in gemms],
        "gemm_grids": [e["grid"] for e in gemms[:2]],
        "gemm_names": sorted({e["name"][:80] for e in gemms}),
        "comm_names": sorted({e["name"][:80] for e in events if classify(e) in ("comm", "copy")}),
        "other_names": sorted({e["name"][:80] for e in events if classify(e) == "other"}),
        "matched": bool(chunks) and bool(gemms),
        "n_events": len(events),
    }
    if gemms:
        summary["setup_ms"] = (gemms[0]["ts_us"] - t0) / 1e3
        if len(gemms) == expect:
            summary["gemm_split"] = "exact"
            summary["local_gemm_ms"] = gemms[0]["dur_us"] / 1e3
            steps = gemms[1:]
            summary["step_gemm_ms"] = statistics.median([e["dur_us"] / 1e3 for e in steps]) if steps else 0.0
            summary["step_gap_ms"] = fixed_step_gap_ms(steps, chunks, world - 1, P)
        else:
            # Extra kernels per GEMM (e.g. a split-K reduction): share the total by rows instead.
            total = sum(e["dur_us"] for e in gemms) / 1e3
            summary["gemm_split"] = f"by rows ({len(gemms)} kernels for {expect} launches)"
            summary["local_gemm_ms"] = total / world
            summary["step_gemm_ms"] = total / world * P / S
    if chunk_ms:
        summary["comm_chunk_ms"] = statistics.median(chunk_ms)
        # Time the comm stream was busy while a GEMM ran: the overlap actually achieved.
        busy = [(min(e["ts_us"] for e in c), max(e["ts_us"] + e["dur_us"] for e in c)) for c in chunks]
        ov = 0.0
        for g in gemms:
            gs, ge = g["ts_us"], g["ts_us"] + g["dur_us"]
            ov += sum(max(0.0, min(ge, b1) - max(gs, b0)) for b0, b1 in busy)
        summary["overlapped_comm_ms"] = ov / 1e3
        total_bytes = sum((e["bytes"] or 0) for c in chunks for e in c if e["cat"] == "gpu_memcpy")
        if total_bytes:
            busy_ms = sum(chunk_ms)
            summary["copy_GBps"] = total_bytes / (busy_ms * 1e6)
    return summary


def fixed_step_gap_ms(steps: list[dict], chunks: list[list[dict]], per_step: int, P: int) -> float:
    """Smallest idle gap (ms) before a GEMM step whose data had already arrived: the fixed cost of a
    step (launch, wait bookkeeping), with no waiting for communication in it. 0 when no step
    qualifies (comm-bound profiles: their gaps are data waits, which the simulation already plays).

    ``steps``: the step GEMM kernels in order, ``per_step`` of them per step; ``chunks``: each
    chunk's comm events; step g needs chunks up to (g + 1) * P - 1.
    """
    if per_step < 1 or not chunks or len(steps) % per_step:
        return 0.0
    groups = [steps[i:i + per_step] for i in range(0, len(steps), per_step)]
    arrived = [max(e["ts_us"] + e["dur_us"] for e in c) for c in chunks]
    gaps = []
    for g in range(1, len(groups)):
        prev_end = max(e["ts_us"] + e["dur_us"] for e in groups[g - 1])
        last = min((g + 1) * P - 1, len(arrived) - 1)
        if arrived[last] <= prev_end:
            gaps.append((min(e["ts_us"] for e in groups[g]) - prev_end) / 1e3)
    return max(0.0, min(gaps)) if gaps else 0.0


class SmClockSampler:
    """Context manager sampling this GPU's SM clock (MHz) through NVML every ``period_s``.

    ``median_mhz`` is None when NVML is unavailable (said so, not guessed).
    """

    def __init__(self, index: int, period_s: float = 0.002):
        self.index, self.period_s = index, period_s
        self.samples: list[int] = []
        self.error: str | None = None
        self._stop = threading.Event()

    def __enter__(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._h = pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception as exc:  # noqa: BLE001 - NVML absent is a normal, reported outcome
            self.error = repr(exc)
            return self
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            try:
                self.samples.append(self._nvml.nvmlDeviceGetClockInfo(self._h, self._nvml.NVML_CLOCK_SM))
            except Exception as exc:  # noqa: BLE001
                self.error = repr(exc)
                return
            time.sleep(self.period_s)

    def __exit__(self, *exc):
        self._stop.set()
        if getattr(self, "_thread", None):
            self._thread.join()
        return False

    @property
    def median_mhz(self):
        return statistics.median(self.samples) if self.samples else None


# ---- optional: the Triton GEMM's mainloop / epilogue regions for a configuration's GEMM shapes -------
def gemm_shapes(m_shard: int, k: int, n: int, cfg) -> dict:
    """{"local": (rows, K, N), "step": (rows, K, N)}: the GEMM launches of one call of ``cfg`` (the local
    shard's, then one per peer and step over the rows of P chunks)."""
    from .config import chunk_bounds

    chunk_bounds(m_shard, cfg.S)  # raises when S does not divide M_shard
    return {"local": (m_shard, k, n), "step": (cfg.P * m_shard // cfg.S, k, n)}


def gemm_region_record(a_shard, b, cfg, group=None, comm_group=None, repeats: int = 5, plain_iters: int = 20,
                       measure=None) -> dict:
    """Region timings (mainloop / epilogue) of the *Triton* region GEMM (:mod:`overlap.gemm_regions`)
    for the GEMM shapes of ``cfg``, to sit beside the cuBLAS measurements in a measurement record.

    The overlap op's GEMMs are cuBLAS (no markers), so these numbers are the Triton GEMM's, on fresh
    random bf16 A rows of each shape and the caller's B. With ``comm_group`` (an NCCL group, e.g. the
    R-CTA group of ``cfg``), an all-gather of ``a_shard`` on that group runs on a side stream, started
    right before every timed GEMM launch, so the regions are measured while communication runs (for
    the part of the GEMM the all-gather overlaps); without it the GEMM runs alone. Collective when
    ``comm_group`` or a multi-rank ``group`` is given: call on every rank. Per-rank numbers plus the
    slowest rank's (MAX) means. On CPU tensors: ``{"available": False, "reason": ...}``.
    ``measure(a, b, repeats, plain_iters, concurrent)`` defaults to
    :func:`overlap.gemm_regions.measure_gemm_regions`; tests pass a stand-in.
    """
    import warnings

    from .config import check_operands

    m_shard, k, n = check_operands(a_shard, b, cfg)
    label = "triton overlap_gemm regions (not the cuBLAS GEMMs the op runs)"
    if measure is None:
        if a_shard.device.type != "cuda":
            return {"available": False, "kernel": label, "reason": f"needs CUDA tensors, got device {a_shard.device}"}
        from .gemm_regions import measure_gemm_regions as measure

    concurrent = None
    if comm_group is not None:
        world = dist.get_world_size(comm_group)
        gathered = torch.empty((world * m_shard, k), dtype=a_shard.dtype, device=a_shard.device)
        side = torch.cuda.Stream(device=a_shard.device)

        def all_gather_on_side_stream():
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # renamed in torch 2.13
                dist.all_gather_into_tensor(gathered, a_shard, group=comm_group)

        concurrent = all_gather_on_side_stream

    gen = torch.Generator(device=a_shard.device).manual_seed(4242 + (dist.get_rank() if dist.is_initialized() else 0))
    # fresh random rows per shape (the caller's A may be anything); B is the caller's
    record = {"available": True, "kernel": label, "config": cfg.key(),
              "concurrent": "nccl all_gather on a side stream" if concurrent else "none (GEMM alone)", "shapes": {}}
    for role, (rows, kk, nn) in gemm_shapes(m_shard, k, n, cfg).items():
        a = torch.randn(rows, kk, generator=gen, device=a_shard.device).to(torch.bfloat16)
        record["shapes"][role] = measure(a, b, repeats=repeats, plain_iters=plain_iters, concurrent=concurrent)
    if group is not None and dist.get_world_size(group) > 1:
        keys = [(role, path) for role in record["shapes"] for path in (
            ("regions", "overlap_gemm/mainloop", "mean_ns"), ("regions", "overlap_gemm/epilogue", "mean_ns"),
            ("traced_event_ms", "median"), ("plain_event_ms", "median"))]

        def get(role, path):
            v = record["shapes"][role]
            for p in path:
                v = v[p]
            return float(v)

        t = torch.tensor([get(r, p) for r, p in keys], dtype=torch.float64, device=a_shard.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        for (role, path), v in zip(keys, t.tolist()):
            record["shapes"][role].setdefault("slowest_rank", {})["/".join(path)] = v
    return record
