"""Tuner: profile the (S, R) grid once each, fit the model, validate only its top few, pick (S*, R*, P*).

    torchrun --nproc_per_node=N -m overlap.tune --shape M,K,N [--s 1,2,4,8] [--r 0,4,8,16,32] [--p 1,2,4,8]

M is the global row count of A (sharded by rows over the N ranks; must divide by N). Prints the
model's ranking and the validated times on rank 0 and, with ``--out``, writes them as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field

from .safety import set_safe_env

set_safe_env()  # before torch, NCCL or symmetric memory initialise anything

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from .config import OverlapConfig, OverlapShapeError, candidate_configs, check_operands, parse_shape, split_global_m  # noqa: E402
from .measure import device_events_of_one_call, summarize_call, time_interleaved_ms, time_op_ms  # noqa: E402
from .model import OverlapModel, ProfiledPoint, fit_model, rank_of  # noqa: E402

DEFAULT_S = (1, 2, 4, 8)
DEFAULT_R = (0, 4, 8, 16, 32)
DEFAULT_P = (1, 2, 4, 8)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return vals


def time_configs(rt, a_shard, b, configs, iters: int = 10, rounds: int = 3) -> dict:
    """{config: ms} of ``configs`` timed together, one call of each in turn (see
    :func:`overlap.measure.time_interleaved_ms`), so they are compared at one clock."""
    fns = {c: (lambda c=c: rt(a_shard, b, c)) for c in configs}
    return time_interleaved_ms(fns, rounds=rounds, iters=iters, warmup=2, group=rt.group)


def profile_point(rt, a_shard, b, S: int, R: int, iters: int, warmup: int = 3, measured_ms: float | None = None):
    """Profile one call of config (S, R, 1) (and time it, unless ``measured_ms`` is given);
    returns (ProfiledPoint | None, raw summary).

    The profiled quantities are reduced with MAX over ranks (the slowest rank sets the pipeline's
    pace), so every rank builds the same model and takes the same decisions.
    """
    cfg = OverlapConfig(S, R, 1)
    if measured_ms is None:
        timing = time_op_ms(lambda: rt(a_shard, b, cfg), iters=iters, warmup=warmup, group=rt.group)
    else:
        timing = {"median_ms": measured_ms, "method": "interleaved with the other profiled points"}
    events = device_events_of_one_call(lambda: rt(a_shard, b, cfg), align_group=rt.group)
    summary = summarize_call(events, rt.world, S, 1, R)
    ok = summary.get("matched", False) and "comm_chunk_ms" in summary
    keys = ("comm_chunk_ms", "local_gemm_ms", "step_gemm_ms", "setup_ms", "step_gap_ms")
    vals = torch.tensor([float(ok)] + [float(summary.get(k, 0.0)) for k in keys], dtype=torch.float64,
                        device=a_shard.device)
    ok_t = vals[:1].clone()
    dist.all_reduce(ok_t, op=dist.ReduceOp.MIN, group=rt.group)
    dist.all_reduce(vals, op=dist.ReduceOp.MAX, group=rt.group)
    summary["timing"] = timing
    if ok_t.item() < 1:
        return None, summary
    v = vals.tolist()[1:]
    return ProfiledPoint(S, R, v[0], v[1], v[2], v[3], timing["median_ms"], step_gap_ms=v[4]), summary


@dataclass
class TuneResult:
    best: OverlapConfig
    model: OverlapModel
    ranking: list
    validated: dict                    # config -> measured ms (top-k of the model only)
    raw: dict = field(default_factory=dict)

    def to_dict(self):
        return {
            "best": self.best.key(),
            "best_ms": self.validated[self.best],
            "best_model_rank": rank_of(self.best, self.ranking),
            "ranking": [{"config": c.key(), "predicted_ms": p} for c, p in self.ranking],
            "validated": {c.key(): ms for c, ms in self.validated.items()},
            "model": self.model.to_dict(),
            "profiles": self.raw,
        }


def tune(rt, a_shard, b, s_values=DEFAULT_S, r_values=None, p_values=DEFAULT_P, top: int = 5,
         iters: int = 20, profile_fn=None, time_fn=None) -> TuneResult:
    """Profile every (S, R) with P = 1, fit, rank all (S, R, P), time only the model's ``top``.

    ``profile_fn(S, R) -> (ProfiledPoint | None, summary)`` and ``time_fn(cfg) -> ms`` default to
    real measurements on ``rt``; tests pass recorded ones.
    """
    m_shard, k, n = check_operands(a_shard, b)
    r_values = tuple(r_values) if r_values is not None else tuple(rt.pool.r_values)
    if top < 1:
        raise ValueError(f"top (configs to validate) must be >= 1, got {top}")
    s_ok = [s for s in s_values if m_shard % s == 0] or [1]
    grid = [(s, r) for s in sorted(set(s_ok) | {1}) for r in r_values]
    sub_iters = max(5, iters // 2)
    if profile_fn is None:
        # The calibration times of all profiled points in one interleaved pass: one clock for all.
        base = time_configs(rt, a_shard, b, [OverlapConfig(s, r, 1) for s, r in grid], iters=sub_iters)

        def profile_fn(S, R):
            return profile_point(rt, a_shard, b, S, R, iters, measured_ms=base[OverlapConfig(S, R, 1)])
    if time_fn is None:
        def time_many(configs):
            return time_configs(rt, a_shard, b, configs, iters=sub_iters)
    else:
        def time_many(configs):
            return {c: time_fn(c) for c in configs}
    points, raw = [], {}
    for s, r in grid:
        point, summary = profile_fn(s, r)
        raw[OverlapConfig(s, r, 1).key()] = summary
        if point is not None:
            points.append(point)
    if not points:
        raise RuntimeError("no profiled call could be split into chunks and GEMM launches; see the raw summaries: "
                           + json.dumps({k: {kk: v.get(kk) for kk in ('gemm_names', 'comm_names', 'n_events')}
                                         for k, v in raw.items()})[:2000])
    model = fit_model(rt.world, m_shard, k, n, a_shard.element_size(), points)
    measured_r = sorted(model.link)
    cands = candidate_configs(s_ok, measured_r, p_values, m_shard)
    ranking = model.rank(cands)
    validated = time_many([cfg for cfg, _ in ranking[:top]])
    best = min(validated, key=lambda c: (validated[c], c.S))
    return TuneResult(best, model, ranking, validated, raw)


def main(argv=None) -> int:
    from .safety import init_distributed

    ap = argparse.ArgumentParser(prog="python -m overlap.tune", description=__doc__.splitlines()[0])
    ap.add_argument("--shape", required=True, help="M,K,N with M the global row count of A")
    ap.add_argument("--s", type=_int_list, default=DEFAULT_S, help="S values (comm chunks), e.g. 1,2,4,8")
    ap.add_argument("--r", type=_int_list, default=DEFAULT_R, help="R values (comm SMs; 0 = copy engines)")
    ap.add_argument("--p", type=_int_list, default=DEFAULT_P, help="P values (chunks per GEMM step)")
    ap.add_argument("--top", type=int, default=5, help="how many of the model's best configs to time")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--timeout-s", type=float, default=120.0, help="collective timeout (s) before every rank errors")
    ap.add_argument("--out", default=None, help="write the result JSON here (rank 0)")
    ap.add_argument("--gemm-regions", action="store_true",
                    help="also record the Triton region GEMM's mainloop/epilogue timings for the chosen config's "
                         "GEMM shapes (overlap.measure.gemm_region_record; not cuBLAS's)")
    args = ap.parse_args(argv)
    from .preflight import launch_problems, refuse

    # Everything a user can get wrong is checked here, before NCCL starts, so it is one line, not a traceback.
    try:
        m, k, n = parse_shape(args.shape)
    except OverlapShapeError as exc:
        return refuse(ap.prog, str(exc))
    problems = launch_problems("torchrun --nproc_per_node=N -m overlap.tune --shape M,K,N")
    if problems:
        return refuse(ap.prog, "; ".join(problems))
    try:
        split_global_m(m, int(os.environ["WORLD_SIZE"]))
    except OverlapShapeError as exc:
        return refuse(ap.prog, str(exc))
    rank, world, device = init_distributed(timeout_s=args.timeout_s)
    m_shard = split_global_m(m, world)
    from .op import AllGatherMatmul, serial_all_gather_matmul

    rt = AllGatherMatmul(r_values=args.r if device.type == "cuda" else (0,))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(1000 + rank)
    a = torch.randn(m_shard, k, generator=g).to(device, dtype)
    b = torch.randn(k, n, generator=torch.Generator(device="cpu").manual_seed(7)).to(device, dtype)
    result = tune(rt, a, b, args.s, None, args.p, args.top, args.iters)
    ref = serial_all_gather_matmul(a, b).float()
    err = (rt(a, b, result.best).float() - ref).norm() / ref.norm()
    gemm_regions = None
    if args.gemm_regions:  # collective: every rank measures; R > 0 runs an all-gather on the R-CTA group meanwhile
        from .measure import gemm_region_record

        comm = rt.pool.group(result.best.R) if device.type == "cuda" and result.best.R > 0 else None
        gemm_regions = gemm_region_record(a, b, result.best, group=rt.group, comm_group=comm)
    if rank == 0:
        print(f"world={world} shape M,K,N={m},{k},{n}: chosen {result.best.key()} "
              f"{result.validated[result.best]:.3f} ms, rel err vs serial {err.item():.2e}")
        print(f"{'rank':>4} {'config':<14} {'predicted_ms':>12} {'measured_ms':>12}")
        for i, (c, p) in enumerate(result.ranking[:10], 1):
            meas = result.validated.get(c)
            print(f"{i:>4} {c.key():<14} {p:>12.3f} {meas if meas is None else round(meas, 3)!s:>12}")
        if gemm_regions is not None and gemm_regions.get("available"):
            for role, r in gemm_regions["shapes"].items():
                reg = r["regions"]
                print(f"triton GEMM regions ({role} {r['shape']}): mainloop {reg['overlap_gemm/mainloop']['mean_ns']:.0f} ns, "
                      f"epilogue {reg['overlap_gemm/epilogue']['mean_ns']:.0f} ns per CTA (mean), "
                      f"plain {r['plain_event_ms']['median']:.3f} ms, traced {r['traced_event_ms']['median']:.3f} ms")
        elif gemm_regions is not None:
            print(f"triton GEMM regions not measured: {gemm_regions['reason']}")
        if args.out:
            from argus_rt.fsutil import atomic_write_text

            payload = result.to_dict() | {"shape": [m, k, n], "world": world, "rel_err": err.item()}
            if gemm_regions is not None:
                payload["gemm_regions"] = gemm_regions
            atomic_write_text(args.out, json.dumps(payload, indent=1) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from .safety import run_entry_point

    sys.exit(run_entry_point(main))
