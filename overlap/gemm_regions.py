"""Mainloop / epilogue region timings of a bf16 Triton GEMM, measured through Argus region tracing.

The overlap operator multiplies with cuBLAS (``torch.mm``), whose kernels carry no Argus markers, so
their inner phases cannot be timed. This module holds a Triton GEMM for the same operation
(Y = A @ B, A [M, K] and B [K, N] row-major bf16, fp32 accumulation, bf16 Y) marked with::

    overlap_gemm               the whole kernel
    overlap_gemm/mainloop      the pipelined K loop (loads + WGMMA, up to the loop's exit)
    overlap_gemm/epilogue      convert the accumulator and store the tile of Y

and :func:`measure_gemm_regions`, which runs it once checked against ``torch.mm`` and then in its
region-traced variant (:mod:`argus_rt.kinds.triton.region_trace`: one ``%globaltimer`` read per
marker per CTA), returning per-region statistics (observed, per CTA) next to the kernel's CUDA-event
time, traced and plain, so the trace's own cost is visible. These are the *Triton* GEMM's regions:
they stand in for cuBLAS's phases, they are not cuBLAS's.

Shape rules (checked, with errors naming the bad value): K a multiple of the K tile (64; the loop
has no K mask), N a multiple of 16 and 16-byte aligned data pointers (the kernel is compiled with
Triton's divisibility-by-16 hints on N, K and the pointers, as the JIT would for such arguments).
M is free (rows past M are masked).
"""
from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import triton
import triton.language as tl

from argus_rt import triton_regions as argus

# 128x128x64 tiles, 8 warps (two warp groups, one 64-row WGMMA each), 4 stages: 4 * 32 KiB of
# shared memory for the A/B ring, well inside an H100/H200 SM's 227 KiB.
BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
NUM_WARPS, NUM_STAGES = 8, 4
SPIN_CYCLES = 200_000  # GPU busy-wait before each timed launch (~0.1 ms at H200 clocks)
GROUP_M = 8  # CTAs of GROUP_M row tiles walk N together, so B's tiles are reused from L2
REGIONS = ("overlap_gemm", "overlap_gemm/mainloop", "overlap_gemm/epilogue")
SIGNATURE = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32"}
CONSTEXPRS = {"BM": BLOCK_M, "BN": BLOCK_N, "BK": BLOCK_K, "GROUP": GROUP_M}
# Argument indices given tt.divisibility = 16: the three pointers, N and K (not M: it is masked).
DIVISIBLE_ARGS = (0, 1, 2, 4, 5)
#: output check against torch.mm on fp32 copies of the inputs: bf16 rounding of Y alone gives a
#: relative error up to 2^-9 per element (~2e-3 in norm); fp32 sums in another order add ~1e-6.
REL_TOL = 5e-3          # ||Y - ref|| / ||ref||
MAX_ABS_TOL = 1e-2      # max |Y - ref| / max |ref|


class GemmRegionError(ValueError):
    """Inputs the region GEMM cannot take, or a run that failed its checks; the message names the value."""


@triton.jit
def overlap_gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    argus.begin("overlap_gemm")
    pid = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    per_group = GROUP * n_n
    first_m = (pid // per_group) * GROUP
    rows = tl.minimum(n_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    # Rows past M wrap onto valid rows for the loads (their results are masked at the store), so
    # the K loop needs no masks; N is a multiple of BN or the wrapped columns are masked likewise.
    a_ptrs = a_ptr + (offs_m % M)[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + (offs_n % N)[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    argus.begin("overlap_gemm/mainloop")
    for _k in range(0, K, BK):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * N
    argus.end("overlap_gemm/mainloop")
    argus.begin("overlap_gemm/epilogue")
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.bfloat16), mask=mask)
    argus.end("overlap_gemm/epilogue")
    argus.end("overlap_gemm")


def compile_plain(capability: int = 90):
    """Compile the marked kernel for ``sm_<capability>`` (no GPU needed); Triton's CompiledKernel.

    Its markers are PMTRIG words only (no memory traffic); its TTGIR is what the traced variant edits.
    """
    from triton.backends.compiler import GPUTarget

    attrs = {(i,): [["tt.divisibility", 16]] for i in DIVISIBLE_ARGS}
    src = triton.compiler.ASTSource(fn=overlap_gemm_kernel, signature=SIGNATURE, constexprs=CONSTEXPRS, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": NUM_WARPS, "num_stages": NUM_STAGES})


@dataclass
class GemmBuild:
    """The plain kernel, its region-traced variant (same TTGIR plus the trace stores) and the slot table."""

    plain: object      # CompiledKernel: markers only
    traced: object     # CompiledKernel: markers + (tag, %globaltimer) stores into one extra int64 argument
    variant: object    # TracedRegionVariant (sites, words_per_cta, descriptor)
    plain_ttgir: str   # the TTGIR both were compiled from (the traced one after the transform)


def build(capability: int = 90, workdir: str | Path | None = None) -> GemmBuild:
    """Compile the plain kernel and its traced variant (works without a GPU).

    The traced variant is made by :func:`argus_rt.kinds.triton.region_trace.make_region_trace` from
    the plain kernel's TTGIR; no marker sits inside a loop, so one slot per marker (iterations=1).
    """
    from argus_rt.kinds.triton.probes import compile_ttgir
    from argus_rt.kinds.triton.region_trace import make_region_trace

    ttgir = compile_plain(capability).asm["ttgir"]
    variant = make_region_trace(ttgir, 1)
    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="overlap_gemm_regions_"))
    # Both launched kernels are compiled from TTGIR text the same way, so the only difference between
    # the plain and the traced timing is the transform's stores.
    plain = compile_ttgir(ttgir, workdir, "overlap_gemm_plain", capability=capability)
    traced = compile_ttgir(variant.ttgir, workdir, "overlap_gemm_region_traced", capability=capability)
    return GemmBuild(plain, traced, variant, ttgir)


_BUILDS: dict[int, GemmBuild] = {}


def cached_build(capability: int) -> GemmBuild:
    """:func:`build` once per capability and process (the kernel takes M, N, K at run time)."""
    if capability not in _BUILDS:
        _BUILDS[capability] = build(capability)
    return _BUILDS[capability]


def check_inputs(a, b, out=None) -> tuple[int, int, int]:
    """Validate A [M, K], B [K, N] (and Y [M, N] when given) for the kernel; return (M, K, N)."""
    import torch

    for name, t in (("A", a), ("B", b)) + ((("out", out),) if out is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise GemmRegionError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.bfloat16:
            raise GemmRegionError(f"{name} has dtype {t.dtype}; the region GEMM takes torch.bfloat16 only")
        if t.dim() != 2:
            raise GemmRegionError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if not t.is_contiguous():
            raise GemmRegionError(f"{name} must be contiguous (row-major), got strides {t.stride()}")
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise GemmRegionError(f"inner dimensions differ: A is [{m}, {k}], B is [{k2}, {n}]")
    if m < 1 or n < 1 or k < 1:
        raise GemmRegionError(f"empty operand: A {tuple(a.shape)}, B {tuple(b.shape)}")
    if k % BLOCK_K:
        raise GemmRegionError(f"K={k} must be a multiple of the K tile {BLOCK_K} (the K loop has no mask); "
                              f"nearest valid: {max(BLOCK_K, k - k % BLOCK_K)}")
    if n % 16:
        raise GemmRegionError(f"N={n} must be a multiple of 16 (compiled with divisibility hints); "
                              f"nearest valid: {max(16, n - n % 16)}")
    for name, count in (("A", m * k), ("B", k * n), ("Y", m * n)):
        if count >= 2**31:  # the kernel's offsets are 32-bit
            raise GemmRegionError(f"{name} has {count} elements; the region GEMM indexes with int32 (< 2**31)")
    if out is not None and tuple(out.shape) != (m, n):
        raise GemmRegionError(f"out has shape {tuple(out.shape)}, expected ({m}, {n})")
    for name, t in (("A", a), ("B", b)) + ((("out", out),) if out is not None else ()):
        if t.device.type == "cuda" and t.data_ptr() % 16:
            raise GemmRegionError(f"{name}'s data pointer 0x{t.data_ptr():x} is not 16-byte aligned")
    devices = {t.device for t in (a, b) + ((out,) if out is not None else ())}
    if len(devices) != 1:
        raise GemmRegionError(f"operands are on different devices: {sorted(str(d) for d in devices)}")
    return m, k, n


def grid(m: int, n: int) -> tuple[int, int, int]:
    return (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N), 1, 1)


def launch(compiled, a, b, out, region_out=None) -> None:
    """Launch a compiled variant on CUDA tensors (the traced one takes ``region_out``, int64)."""
    m, k = a.shape
    n = b.shape[1]
    args = [a, b, out, m, n, k] + ([region_out] if region_out is not None else [])
    compiled[grid(m, n)](*args)


def check_output(y, a, b) -> dict:
    """Compare Y with torch.mm on fp32 copies of A and B; raise :class:`GemmRegionError` past the tolerances."""
    import torch

    ref = torch.mm(a.float(), b.float())
    yf = y.float()
    if not torch.isfinite(yf).all():
        raise GemmRegionError("the region GEMM left non-finite (unwritten or overflowed) elements in Y")
    diff = yf - ref
    rel = float(diff.norm() / ref.norm().clamp_min(1e-30))
    max_abs = float(diff.abs().max() / ref.abs().max().clamp_min(1e-30))
    if rel > REL_TOL or max_abs > MAX_ABS_TOL:
        raise GemmRegionError(f"region GEMM output differs from torch.mm: relative error {rel:.3e} "
                              f"(tolerance {REL_TOL}), max |err| / max |ref| {max_abs:.3e} (tolerance {MAX_ABS_TOL})")
    return {"rel_err": rel, "max_abs_err_rel": max_abs, "rel_tol": REL_TOL, "max_abs_tol": MAX_ABS_TOL}


def region_durations(columns: dict, sites) -> dict[str, list[int]]:
    """{region name: [end - start ns, ...]} from decoded ``argus.region_intervals/1`` columns."""
    names = {s.region_id: s.name for s in sites}
    out: dict[str, list[int]] = {name: [] for name in names.values()}
    for rid, start, end in zip(columns["region_id"], columns["start"], columns["end"]):
        out[names[rid]].append(int(end) - int(start))
    return out


def launch_span_ns(columns: dict, top_region_id: int) -> list[int]:
    """Per traced launch: last CTA's end - first CTA's begin of the whole-kernel region (ns)."""
    spans: dict[int, list[int]] = {}
    for rid, start, end, lau in zip(columns["region_id"], columns["start"], columns["end"], columns["launch"]):
        if rid == top_region_id:
            lo, hi = spans.get(lau, [start, end])
            spans[lau] = [min(lo, start), max(hi, end)]
    return [int(hi - lo) for _, (lo, hi) in sorted(spans.items())]


def summarize(durations: dict[str, list[int]], spans: list[int], traced_ms: list[float], plain_ms: list[float],
              n_ctas: int, sm_count: int | None) -> dict:
    """The record :func:`measure_gemm_regions` returns, from measured numbers (pure; tested on CPU)."""
    import numpy as np

    from argus_rt.trace.stats import duration_summary

    missing = [r for r in REGIONS if not durations.get(r)]
    if missing:
        raise GemmRegionError(f"no intervals for region(s) {missing}; the traced buffer lacks them")
    regions = {}
    for name in REGIONS:
        s = duration_summary(np.asarray(durations[name]))
        regions[name] = {"count": s["count"], "mean_ns": s["mean"], "p50_ns": s["p50"], "p99_ns": s["p99"],
                         "min_ns": s["min"], "max_ns": s["max"], "qualification": "observed",
                         "granularity": "cta", "method": "argus region trace (%globaltimer per marker per CTA)"}
    main, epi = regions["overlap_gemm/mainloop"]["mean_ns"], regions["overlap_gemm/epilogue"]["mean_ns"]
    traced_med, plain_med = statistics.median(traced_ms), statistics.median(plain_ms)
    return {
        "kernel": "triton overlap_gemm (not cuBLAS)",
        "tiles": [BLOCK_M, BLOCK_N, BLOCK_K], "num_warps": NUM_WARPS, "num_stages": NUM_STAGES,
        "ctas": n_ctas, "sm_count": sm_count, "waves": (n_ctas / sm_count) if sm_count else None,
        "regions": regions,
        "epilogue_share": {"value": epi / (main + epi), "qualification": "derived",
                           "method": "mean epilogue / (mean mainloop + mean epilogue), per CTA"},
        "traced_span_ms": {"median": statistics.median(spans) / 1e6, "qualification": "observed",
                           "method": "first CTA begin to last CTA end of overlap_gemm, per traced launch"},
        "traced_event_ms": {"median": traced_med, "min": min(traced_ms), "launches": len(traced_ms),
                            "qualification": "observed", "method": "CUDA events around each traced launch"},
        "plain_event_ms": {"median": plain_med, "min": min(plain_ms), "launches": len(plain_ms),
                           "qualification": "observed", "method": "CUDA events around each plain (markers-only) launch"},
        "trace_cost_ms": {"value": traced_med - plain_med, "qualification": "derived",
                          "method": "median traced event time - median plain event time"},
    }


def require_cuda(t) -> None:
    if t.device.type != "cuda":
        raise GemmRegionError(f"the region GEMM runs on CUDA tensors, got device {t.device}")


def measure_gemm_regions(a, b, *, repeats: int = 5, plain_iters: int = 20, concurrent=None) -> dict:
    """Run the region GEMM on A [M, K] @ B [K, N] (bf16, CUDA): check it, trace it, time it.

    1. plain launch into a NaN-poisoned Y, checked against torch.mm (:func:`check_output`);
    2. one untimed traced + plain pair (module load), then ``repeats`` traced and ``plain_iters``
       plain launches taken in turn, each timed by CUDA events behind a GPU busy-wait; every traced
       output equal to the plain output bit for bit (the trace adds stores, no math), every traced
       buffer decoded by :func:`argus_rt.kinds.triton.region_trace.decode_region_buffer`.

    ``concurrent``: optional callable that enqueues other work (e.g. an all-gather) on its own
    stream and returns at once; it is called right before every timed traced and plain launch (the
    same number of times on every rank, so a collective in it stays matched), so the GEMM's regions
    are measured while that work runs; the device is synchronised after each launch. Returns
    :func:`summarize`'s record plus the output check.
    """
    import torch

    from argus_rt.kinds.triton.region_trace import decode_region_buffer

    if not isinstance(repeats, int) or repeats < 1:
        raise GemmRegionError(f"repeats must be an int >= 1, got {repeats!r}")
    if not isinstance(plain_iters, int) or plain_iters < 1:
        raise GemmRegionError(f"plain_iters must be an int >= 1, got {plain_iters!r}")
    m, k, n = check_inputs(a, b)
    require_cuda(a)
    dev = a.device
    major, minor = torch.cuda.get_device_capability(dev)
    gb = cached_build(10 * major + minor)
    sites = gb.variant.sites
    n_ctas = grid(m, n)[0]
    y = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=dev)
    launch(gb.plain, a, b, y)
    torch.cuda.synchronize(dev)
    check = check_output(y, a, b)
    expected = y.clone()

    # Why a GPU busy-wait before each timed launch: with the GPU idle, the start event would fire at
    # once and the event time would include the host's launch latency; queued behind ~0.1 ms of
    # spinning, the launch is on the GPU before its start event fires.
    spin = getattr(torch.cuda, "_sleep", None)

    def timed(fn) -> float:
        if spin is not None:
            spin(SPIN_CYCLES)
        if concurrent is not None:
            concurrent()  # on its own stream, after the spin; joined by the device-wide synchronize below
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize(dev)
        return s.elapsed_time(e)

    durations: dict[str, list[int]] = {}
    cols_all: dict[str, list] = {}
    traced_ms, plain_ms = [], []
    # Traced and plain launches taken in turn (one untimed pair first: module load), so both are
    # timed in the same power/clock state (see overlap.measure.time_interleaved_ms for why).
    for rep in range(1 + max(repeats, plain_iters)):
        if rep <= repeats:
            buf = torch.zeros(n_ctas * gb.variant.words_per_cta, dtype=torch.int64, device=dev)
            y.fill_(float("nan"))
            ms = timed(lambda: launch(gb.traced, a, b, y, buf))
            if not torch.equal(y, expected):
                raise GemmRegionError(f"the region-traced GEMM changed the output (traced launch {rep})")
            if rep:
                traced_ms.append(ms)
                cols = decode_region_buffer(buf.cpu().numpy(), n_ctas, sites, launch=rep - 1)
                for name, d in region_durations(cols, sites).items():
                    durations.setdefault(name, []).extend(d)
                for key, v in cols.items():
                    cols_all.setdefault(key, []).extend(v)
        if rep <= plain_iters:
            ms = timed(lambda: launch(gb.plain, a, b, y))
            if rep:
                plain_ms.append(ms)
    if not torch.equal(y, expected):
        raise GemmRegionError("the plain GEMM's output changed between launches")
    top = next(s.region_id for s in sites if s.name == "overlap_gemm")
    sm_count = torch.cuda.get_device_properties(dev).multi_processor_count
    record = summarize(durations, launch_span_ns(cols_all, top), traced_ms, plain_ms, n_ctas, sm_count)
    record |= {"shape": [m, k, n], "check": check, "concurrent": concurrent is not None,
               "launch_hidden_by_spin": spin is not None, "device": torch.cuda.get_device_name(dev)}
    return record


#: the local-GEMM shapes (M_shard, K, N) of the issue's five benchmark cases
DEFAULT_SHAPES = ((2048, 8192, 8192), (4096, 8192, 8192), (8192, 4096, 4096), (1024, 8192, 28672), (4096, 4096, 14336))


def format_table(records: list[dict]) -> str:
    """One line per measured shape: per-CTA region means / p99 (us), event times (ms)."""
    head = (f"{'M,K,N':<18} {'ctas':>5} {'waves':>5} {'main mean':>9} {'main p99':>9} {'epi mean':>8} {'epi p99':>8} "
            f"{'epi %':>5} {'plain ms':>8} {'traced ms':>9} {'rel err':>8}")
    rows = [head]
    for r in records:
        main, epi = r["regions"]["overlap_gemm/mainloop"], r["regions"]["overlap_gemm/epilogue"]
        rows.append(f"{','.join(map(str, r['shape'])):<18} {r['ctas']:>5} {r['waves'] or 0:>5.2f} "
                    f"{main['mean_ns'] / 1e3:>9.2f} {main['p99_ns'] / 1e3:>9.2f} {epi['mean_ns'] / 1e3:>8.2f} "
                    f"{epi['p99_ns'] / 1e3:>8.2f} {100 * r['epilogue_share']['value']:>5.1f} "
                    f"{r['plain_event_ms']['median']:>8.3f} {r['traced_event_ms']['median']:>9.3f} "
                    f"{r['check']['rel_err']:>8.1e}")
    return "\n".join(rows)


def main(argv=None) -> int:
    """``python -m overlap.gemm_regions [--shape M,K,N ...] [--out FILE]``: one GPU, no communication."""
    import argparse
    import json

    import torch

    from .config import parse_shape

    ap = argparse.ArgumentParser(prog="python -m overlap.gemm_regions", description=__doc__.splitlines()[0])
    def shape(text):
        try:
            return parse_shape(text)
        except ValueError as exc:  # argparse would otherwise hide the message
            raise argparse.ArgumentTypeError(str(exc)) from None

    ap.add_argument("--shape", action="append", type=shape, default=None,
                    help="M,K,N of Y = A[M,K] @ B[K,N] (repeatable; default: the five benchmark cases' local GEMMs)")
    ap.add_argument("--repeats", type=int, default=5, help="traced launches per shape (after one untimed)")
    ap.add_argument("--plain-iters", type=int, default=20, help="plain launches per shape, event-timed")
    ap.add_argument("--out", default=None, help="write the records as JSON here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("python -m overlap.gemm_regions needs a CUDA GPU; none is visible to torch", torch.__version__)
        return 2
    records = []
    for seed, (m, k, n) in enumerate(args.shape or DEFAULT_SHAPES):
        g = torch.Generator(device="cuda").manual_seed(1234 + seed)
        a = torch.randn(m, k, generator=g, device="cuda").to(torch.bfloat16)
        b = torch.randn(k, n, generator=g, device="cuda").to(torch.bfloat16)
        records.append(measure_gemm_regions(a, b, repeats=args.repeats, plain_iters=args.plain_iters))
    print("triton overlap_gemm (not cuBLAS): per-CTA region times in us (observed), event times in ms")
    print(format_table(records))
    if args.out:
        from argus_rt.fsutil import atomic_write_text

        atomic_write_text(Path(args.out), json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
