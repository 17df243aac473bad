"""Benchmark: serial all-gather + GEMM, torch's fused op, ours with the tuner's choice, ideal bound.

    torchrun --nproc_per_node=N -m overlap.bench [--case M_shard,K,N ...] [--out raw.json]

For each case, in one run: every candidate (S, R, P) is first checked against the serial result
on fresh random bf16 inputs (rel. Frobenius error, NaN-poisoned output); then serial, torch's
``fused_all_gather_matmul``, the standalone all-gather and GEMM (ideal = max of the two), the
tuner (profile + model + top-5 validation) and, to judge the model only, every candidate timed.
``benchmarks/overlap.py`` runs this and records the table.
"""
from __future__ import annotations

from .safety import set_safe_env

set_safe_env()  # before torch, NCCL or symmetric memory initialise anything

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from .config import OverlapConfig, candidate_configs, parse_shape  # noqa: E402
from .measure import SmClockSampler, time_interleaved_ms  # noqa: E402
from .model import rank_of  # noqa: E402
from .op import AllGatherMatmul, gemm_sm_limit, serial_all_gather_matmul  # noqa: E402
from .tune import DEFAULT_P, DEFAULT_R, DEFAULT_S, _int_list, tune  # noqa: E402

#: (M_shard, K, N) of the issue's five cases.
CASES = ((2048, 8192, 8192), (4096, 8192, 8192), (8192, 4096, 4096), (1024, 8192, 28672), (4096, 4096, 14336))
#: acceptance: ours equals serial AG+GEMM within this relative Frobenius error.
REL_TOL = 1e-3


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    """||y - ref||_F / ||ref||_F in float32; inf when y holds a NaN (an unwritten poisoned element)."""
    y, ref = y.float(), ref.float()
    if torch.isnan(y).any():
        return math.inf
    return float((y - ref).norm() / ref.norm())


def _max_over_ranks(x: float, group) -> float:
    t = torch.tensor([x], dtype=torch.float64, device="cuda" if torch.cuda.is_available() else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def torch_fused_fn(a, b, group):
    """torch.ops.symm_mem.fused_all_gather_matmul (A not returned: the baseline does the least work)."""
    import torch.distributed._symmetric_memory as symm_mem

    name = group.group_name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        symm_mem.enable_symm_mem_for_group(name)

    def run():
        return torch.ops.symm_mem.fused_all_gather_matmul(a, [b], 0, name, return_A=False)[1][0]

    return run


def back_to_back_errors(rt, m_shard, k, b, configs, group, seed, calls: int = 3) -> dict:
    """Rel. error vs serial of ``calls`` back-to-back calls on distinct fresh inputs, per (config,
    barrier method): {"S2_R0_P1/stream": worst error over the calls, ...}. Leaves ``rt.sync`` as found."""
    device = b.device
    world = rt.world
    xs, refs = [], []
    for i in range(calls):
        g = torch.Generator().manual_seed(seed * 100 + 50 + 10 * i + rt.rank)
        xs.append(torch.randn(m_shard, k, generator=g).to(device, torch.bfloat16))
        refs.append(serial_all_gather_matmul(xs[-1], b, group))
    keep, errs = rt.sync, {}
    try:
        for method in rt.sync_methods():
            rt.sync = method
            for cfg in configs:
                outs = [torch.full((world * m_shard, b.shape[1]), float("nan"), dtype=b.dtype, device=device)
                        for _ in range(calls)]
                for x, out in zip(xs, outs):  # no synchronisation between the calls
                    rt(x, b, cfg, out=out)
                worst = max(rel_err(out, ref) for out, ref in zip(outs, refs))
                errs[f"{cfg.key()}/{method}"] = _max_over_ranks(worst, group)
    finally:
        rt.sync = keep
    return errs


def choose_sync(rt, a, b, group, iters) -> dict:
    """Time S1_R0_P1 under each available R = 0 barrier, calls interleaved; keep the faster (every
    rank alike: the times are already the slowest rank's). Returns {method: ms}."""
    cfg = OverlapConfig(1, 0, 1)

    def under(method):
        def call():
            rt.sync = method
            rt(a, b, cfg)
        return call

    methods = rt.sync_methods()
    t = time_interleaved_ms({m: under(m) for m in methods}, rounds=3, iters=max(5, iters // 2), warmup=2, group=group)
    rt.sync = min(t, key=t.get)
    return t


def run_case(rt, m_shard, k, n, *, s_values=DEFAULT_S, p_values=DEFAULT_P, top=5, iters=20, seed=0,
             exhaustive=True, log=print, r_values=None, rounds=3) -> tuple[dict, dict]:
    """Measure one case on every rank; returns (row, raw) (identical decisions on all ranks)."""
    device = _device()
    world, rank, group = rt.world, rt.rank, rt.group
    g = torch.Generator().manual_seed(seed * 100 + rank + 1)
    a = torch.randn(m_shard, k, generator=g).to(device, torch.bfloat16)
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(seed * 100 + 99)).to(device, torch.bfloat16)
    raw = {"world": world, "m_shard": m_shard, "k": k, "n": n}

    # Plain PyTorch references: serial bf16 (the acceptance reference) and fp32 on the gathered A.
    ref = serial_all_gather_matmul(a, b, group)
    a_full = torch.empty(world * m_shard, k, dtype=a.dtype, device=device)
    dist.all_gather_into_tensor(a_full, a, group=group)
    raw["serial_vs_fp32_rel_err"] = _max_over_ranks(rel_err(ref, a_full.float() @ b.float()), group)
    r_values = list(r_values) if r_values is not None else rt.pool.r_values
    cands = candidate_configs(s_values, r_values, p_values, m_shard)
    errs = {}
    for cfg in cands:
        out = torch.full((world * m_shard, n), float("nan"), dtype=a.dtype, device=device)
        errs[cfg.key()] = _max_over_ranks(rel_err(rt(a, b, cfg, out=out), ref), group)
    raw["rel_err_vs_serial"] = errs
    worst = max(errs.values())
    log(f"  correctness: {len(cands)} configs, worst rel err vs serial {worst:.2e} (tol {REL_TOL}); "
        f"serial vs fp32 {raw['serial_vs_fp32_rel_err']:.2e}")
    if not worst <= REL_TOL:
        bad = {k_: v for k_, v in errs.items() if not v <= REL_TOL}
        raise RuntimeError(f"overlap result differs from serial AG+GEMM beyond {REL_TOL}: {bad}")

    # R = 0 stages the shard into symmetric memory: keep the faster of copy engine and SM kernel
    # (used by the kernel barrier), check every R = 0 schedule under each barrier with calls issued
    # back to back on distinct inputs (a missed wait would read the other slot's stale shard), then
    # keep the faster barrier.
    if 0 in r_values and world > 1 and device.type == "cuda":
        raw["staging_ms"] = rt.choose_staging(a)
        raw["staging"] = rt.staging
        r0 = [c for c in cands if c.R == 0]
        raw["back_to_back_rel_err"] = back_to_back_errors(rt, m_shard, k, b, r0, group, seed)
        worst_b2b = max(raw["back_to_back_rel_err"].values())
        if not worst_b2b <= REL_TOL:
            bad = {k_: v for k_, v in raw["back_to_back_rel_err"].items() if not v <= REL_TOL}
            raise RuntimeError(f"back-to-back calls differ from serial AG+GEMM beyond {REL_TOL}: {bad}")
        raw["sync_ms"] = choose_sync(rt, a, b, group, iters)
        raw["sync"] = rt.sync
        log(f"  staging: {rt.staging} ({', '.join(f'{k} {v * 1e3:.1f} us' for k, v in raw['staging_ms'].items())}); "
            f"back-to-back worst rel err {worst_b2b:.2e} over {len(raw['back_to_back_rel_err'])} (config, barrier); "
            f"barrier: {rt.sync} ({', '.join(f'{k} {v:.3f} ms' for k, v in raw['sync_ms'].items())} at S1_R0_P1)")

    # The tuner: profile (S, R) at P = 1, fit, validate the model's top few.
    dev_index = device.index or 0
    with SmClockSampler(dev_index) as clk_tune:
        result = tune(rt, a, b, s_values, r_values, p_values, top, iters)
    raw["sm_clock_mhz_tuning"] = clk_tune.median_mhz
    raw["nvml_error"] = clk_tune.error
    raw["tune"] = result.to_dict()
    best = result.best

    # Baselines, ours (re-timed after selection: no selection bias) and the ideal bound's two
    # terms, interleaved in rounds so clock and temperature drift hit all alike.
    contenders = {"serial": lambda: serial_all_gather_matmul(a, b, group),
                  "ours": lambda: rt(a, b, best),
                  "allgather": lambda: dist.all_gather_into_tensor(a_full, a, group=group),
                  "gemm": lambda: torch.mm(a_full, b)}
    try:
        fused = torch_fused_fn(a, b, group)
        raw["torch_fused_rel_err"] = _max_over_ranks(rel_err(fused(), ref), group)
        contenders["torch_fused"] = fused
    except Exception as exc:  # noqa: BLE001 - an unavailable baseline is reported as unmeasured
        raw["torch_fused_error"] = repr(exc)[:500]
    for r in r_values:
        def held(r=r):
            with gemm_sm_limit(r):
                return torch.mm(a_full, b)
        contenders[f"gemm_R{r}"] = held
    with SmClockSampler(dev_index) as clk:
        t = time_interleaved_ms(contenders, rounds=rounds, iters=iters, warmup=3, group=group)
    raw["sm_clock_mhz_baselines"] = clk.median_mhz
    raw["timed_ms"] = t
    fused_ms = t.get("torch_fused")
    raw["t_comm_allgather_ms"], raw["t_gemm_ms"] = t["allgather"], t["gemm"]
    raw["allgather_GBps"] = (world - 1) * a.numel() * a.element_size() / (t["allgather"] * 1e6)
    raw["gemm_TFLOPs"] = 2 * world * m_shard * k * n / (t["gemm"] * 1e9)
    raw["gemm_ms_by_R"] = {str(r): t[f"gemm_R{r}"] for r in r_values}
    t0 = time.perf_counter()
    for _ in range(10):
        rt(a, b, best)
    raw["host_issue_ms_per_call"] = (time.perf_counter() - t0) * 1e3 / 10  # host side only, no sync
    _sync()

    # Every candidate timed, only to judge the model's ranking (the tuner did not use these).
    model_rank_of_best = None
    if exhaustive:
        all_ms = time_interleaved_ms({c: (lambda c=c: rt(a, b, c)) for c in cands}, rounds=3,
                                     iters=max(5, iters // 2), warmup=2, group=group)
        raw["all_measured_ms"] = {c.key(): v for c, v in all_ms.items()}
        raw["all_predicted_ms"] = {c.key(): p for c, p in result.ranking}
        measured_best = min(all_ms, key=all_ms.get)
        raw["measured_best"] = measured_best.key()
        ranked = {c for c, _ in result.ranking}
        # A config whose R could not be profiled is outside the model's ranking: say so, no rank.
        model_rank_of_best = rank_of(measured_best, result.ranking) if measured_best in ranked else None
        raw["unranked_configs"] = sorted(c.key() for c in cands if c not in ranked)
    row = {"world": world, "m_shard": m_shard, "k": k, "n": n, "serial_ms": t["serial"],
           "torch_fused_ms": fused_ms, "ours_ms": t["ours"], "ideal_ms": max(t["allgather"], t["gemm"]),
           "S": best.S, "R": best.R, "P": best.P, "model_rank_of_best": model_rank_of_best}
    raw["row"] = row
    return row, raw


def preflight(rt, log=print) -> tuple[list[int], dict]:
    """Run each R once on a small shape; drop (on every rank alike) an R whose path fails here."""
    device = _device()
    a = torch.randn(256, 512, device=device, dtype=torch.bfloat16)
    b = torch.randn(512, 256, device=device, dtype=torch.bfloat16)
    ok, errors = [], {}
    for method in [m for m in rt.sync_methods() if m != "kernel"] if 0 in rt.pool.r_values and rt.world > 1 else []:
        # The stream-memory-operation methods first; one failing is dropped on every rank alike.
        flag, key = 1.0, f"sync={method}"
        try:
            rt.sync = method
            rt(a, b, OverlapConfig(2, 0, 1))
            _sync()
        except Exception as exc:  # noqa: BLE001 - reported, and another method used instead
            flag, errors[key] = 0.0, repr(exc)[:500]
        t = torch.tensor([flag], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=rt.group)
        if t.item() != 1.0:
            rt.disable_sync(method)
            log(f"  {key} excluded: {errors.get(key, 'failed on another rank')}")
    if rt.world > 1:
        rt.sync = rt.sync_methods()[0]
    for r in rt.pool.r_values:
        flag = 1.0
        try:
            rt(a, b, OverlapConfig(2, r, 1))
            _sync()
        except Exception as exc:  # noqa: BLE001 - reported and excluded, not hidden
            flag, errors[str(r)] = 0.0, repr(exc)[:500]
        t = torch.tensor([flag], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=rt.group)
        if t.item() == 1.0:
            ok.append(r)
        else:
            log(f"  R={r} excluded: {errors.get(str(r), 'failed on another rank')}")
    return ok, errors


def run_cases(cases, r_values=DEFAULT_R, s_values=DEFAULT_S, p_values=DEFAULT_P, top=5, iters=20,
              exhaustive=True, log=print, checkpoint=None) -> tuple[list, list]:
    rt = AllGatherMatmul(r_values=r_values)
    active_r, errors = preflight(rt, log)
    if not active_r:
        raise RuntimeError(f"no R value works on this machine: {errors}")
    rows, raws = [], []
    for i, (m_shard, k, n) in enumerate(cases):
        log(f"case {i}: M_shard={m_shard} K={k} N={n} world={rt.world}")
        t0 = time.time()
        row, raw = run_case(rt, m_shard, k, n, s_values=s_values, p_values=p_values, top=top, iters=iters,
                            seed=i, exhaustive=exhaustive, log=log, r_values=active_r)
        raw["wall_s"] = time.time() - t0
        raw["excluded_r"] = errors
        log(f"  serial {row['serial_ms']:.3f} ms, torch fused {row['torch_fused_ms']}, ours {row['ours_ms']:.3f} "
            f"({row['S']},{row['R']},{row['P']}), ideal {row['ideal_ms']:.3f}, model rank of best "
            f"{row['model_rank_of_best']}  [{raw['wall_s']:.1f} s]")
        rows.append(row)
        raws.append(raw)
        if checkpoint is not None:
            checkpoint(rows, raws)
    return rows, raws


def geomean(xs) -> float:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summary_lines(rows) -> list[str]:
    sp = [r["serial_ms"] / r["ours_ms"] for r in rows]
    fu = [r["serial_ms"] / r["torch_fused_ms"] for r in rows if r["torch_fused_ms"]]
    idl = [r["serial_ms"] / r["ideal_ms"] for r in rows]
    lines = [f"geomean speedup over serial: ours {geomean(sp):.3f}x, torch fused {geomean(fu):.3f}x, ideal bound {geomean(idl):.3f}x",
             "per case ours/serial: " + " / ".join(f"{x:.3f}x" for x in sp),
             "per case torch fused/serial: " + " / ".join(f"{r['serial_ms'] / r['torch_fused_ms']:.3f}x"
                                                        if r["torch_fused_ms"] else "unmeasured" for r in rows)]
    slower = [i for i, r in enumerate(rows) if r["torch_fused_ms"] and r["ours_ms"] > r["torch_fused_ms"]]
    lines.append(f"cases where ours is slower than torch fused: {slower or 'none'}")
    ranks = [r["model_rank_of_best"] for r in rows]
    lines.append(f"model rank of the measured-best config per case: {ranks}")
    return lines


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m overlap.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", default=None, help="M_shard,K,N (repeatable); default: the five cases")
    ap.add_argument("--r", type=_int_list, default=DEFAULT_R, help="R values (comm SMs; 0 = copy engines)")
    ap.add_argument("--s", type=_int_list, default=DEFAULT_S, help="S values (comm chunks)")
    ap.add_argument("--p", type=_int_list, default=DEFAULT_P, help="P values (chunks per GEMM step)")
    ap.add_argument("--top", type=int, default=5, help="configs of the model's ranking the tuner times")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-exhaustive", action="store_true", help="skip timing every candidate")
    ap.add_argument("--timeout-s", type=float, default=120.0, help="collective timeout (s) before every rank errors")
    ap.add_argument("--out", default=None, help="raw measurements JSON (rank 0)")
    return ap.parse_args(argv)


def run(args) -> tuple[int, list, list]:
    """Initialise NCCL, measure every case; returns (rank, rows, raws). The group stays alive."""
    from .safety import init_distributed

    cases = [parse_shape(c) for c in args.case] if args.case else list(CASES)
    rank, world, device = init_distributed("nccl", timeout_s=args.timeout_s)
    log = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)

    def checkpoint(rows, raws):  # after every case, so a run cut short still leaves its measurements
        if rank != 0 or not args.out:
            return
        from argus_rt.fsutil import atomic_write_text

        text = json.dumps({"rows": rows, "raw": raws}, indent=1) + "\n"
        atomic_write_text(args.out, text)
        if os.environ.get("OUT"):
            atomic_write_text(os.path.join(os.environ["OUT"], os.path.basename(args.out)), text)

    rows, raws = run_cases(cases, args.r, args.s, args.p, args.top, args.iters, not args.no_exhaustive, log,
                           checkpoint)
    if rank == 0:
        for line in summary_lines(rows):
            print(line, flush=True)
    return rank, rows, raws


def main(argv=None) -> int:
    run(parse_args(argv))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from .safety import run_entry_point

    sys.exit(run_entry_point(main))
