#!/usr/bin/env python3
"""Wall time of one `argus query`, as a user runs it, on every example program (issue 15, item 5).

Rows, each against its target (the anchor) in the same run:

  every Triton program (the corpus, examples/triton, examples/triton_minimal):
      --signals instruction_mix,barrier_count        target 20 s
  examples/cuda:
      --signals latency,instruction_mix,barrier_count  target 10 s

Each query is the CLI in a new process (`python -m argus_rt.cli query ...`, imports and planning
included) on an empty workspace and an empty Argus build cache, so nothing is reused; Triton's own
compile cache is left as a user's machine has it after the first run (the first repeat of each
program warms it; its time is kept, labelled `first`). `wall_s` is the process's wall time over the
other repeats. Where the time goes comes from the report's `execution.task_seconds`: `by_op` sums
the seconds of the tasks that ran, per operation (variant builds, the mapping run under Nsight
Compute, the region trace, syntheses); `mapping_run` splits the mapping run by step (the pcmap
output's `provenance.seconds`). A query that leaves a signal unanswered fails the run.

Usage: python benchmarks/query_wall.py [--repeats N] [--only NAME[,NAME]]
Exit code 2 without a CUDA GPU (nothing is measured).

PREDICTION for the next device run (2026-12-01, after the query-speed commits that follow the
18:10 record docs/gpu_runs/2026-12-01-1807-session5/query_wall.md; a CPU-side estimate, NOT measured
on a GPU). Device command: source scripts/gpu_env.sh && python3 benchmarks/query_wall.py --repeats 2
--only cuda,softmax. Baseline softmax 23.15 s: outside the runtime 6.0 s, collect:pcmap 15.7 s = build
5.4 + disassemble 0.4 + ncu 9.6 (runner_run 8.0) + map 0.0, the rest of the runtime 1.5 s.
What changed, and what it was worth on the CPU here (2 shared cores):
  - the Triton mapping run starts ncu first and builds and reads the marker-only variant while ncu
    runs (its runner compiles the kernel itself; check_same_binary still compares the two binaries):
    build + disassemble leave the critical path. provenance.seconds: `ncu` is the whole ncu run from
    its start (overlapping build and disassemble), `ncu_wait` what was left of it after them.
  - the CLI's plan-time compile check no longer imports torch (Triton's native specialiser imported
    it only for a torch.Tensor fast path): `argus plan` softmax with an empty Argus cache 3.7-3.9 s
    -> 1.0-1.2 s; the CLI part of a query (wall minus the runtime's) 4.4-6.7 s -> 2.0-2.1 s.
  - ncu attaches to the runner's process only (--target-processes application-only): a Triton compile
    starts /sbin/ldconfig -p and ptxas --version twice, which no longer get ncu's injection. Not
    measurable here.
  - the Triton runner stamps its phases: `mapping_run` shows runner_run [torch, compile, inputs,
    launch, reference, jit_check], so the next record says where the 8.0 s under ncu go.
Predicted softmax: outside the runtime 6.0 -> ~3.5-4 (torch import and its exit, ~2-2.5 s);
collect:pcmap 15.7 -> ~9.5-10.5 (ncu 9.6, maybe -0.3..1 from application-only, maybe +0.5 from the
parallel build; ncu_wait ~3.5-4.5); rest of the runtime ~1.5. Wall ~14.5-16.5 s (target 20).
cuda unchanged but for application-only: ~7.0-7.4 s (target 10).
If softmax's ncu_wait is near 0, the parallel build is the longer branch: read build against ncu.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.record import gpu_name, record, spread  # noqa: E402

TRITON_SIGNALS = "instruction_mix,barrier_count"
CUDA_SIGNALS = "latency,instruction_mix,barrier_count"
TARGET_S = {TRITON_SIGNALS: 20.0, CUDA_SIGNALS: 10.0}


def programs() -> list[tuple[str, Path, str]]:
    """(name, program file or directory, signals) of every example the issue's targets cover."""
    out = [("cuda", ROOT / "examples" / "cuda", CUDA_SIGNALS)]
    for path in [ROOT / "examples" / "triton", ROOT / "examples" / "triton_minimal",
                 *sorted((ROOT / "examples" / "triton_corpus").glob("*/argus_program*.json"))]:
        name = path.name if path.is_dir() else f"{path.parent.name}{path.stem.removeprefix('argus_program')}"
        out.append((name, path, TRITON_SIGNALS))
    return out


def one_query(path: Path, signals: str, scratch: Path) -> tuple[float, dict]:
    """(wall seconds of the CLI process, its JSON report) on a fresh workspace and build cache."""
    ws, cache, report = scratch / "ws", scratch / "cache", scratch / "report.json"
    env = dict(os.environ, ARGUS_CACHE_DIR=str(cache))
    cmd = [sys.executable, "-m", "argus_rt.cli", "query", str(path), "--signals", signals,
           "--workspace", str(ws), "--json", str(report), "--no-progress"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0 or not report.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"query of {path} failed (exit {done.returncode}): {' | '.join(tail)}")
    doc = json.loads(report.read_text())
    if doc["unanswered"]:
        raise SystemExit(f"query of {path} left {doc['unanswered']} unanswered")
    doc["mapping_run_seconds"] = mapping_run_seconds(ws)
    return wall, doc


def mapping_run_seconds(ws_dir: Path) -> str:
    """``"build 1.2, disassemble 0.3, ncu 9.8 (ncu_to_main 3.1, runner_run 5.0 [torch 1.9, ...], ...), map 0.4"``:
    the mapping run's steps (its ``provenance.seconds``), read from the query's workspace. The runner's
    own phases (``runner_run.<phase>``) go in brackets after ``runner_run``; where ncu ran alongside the
    build (``provenance.ncu_alongside``) the ncu part says so, and ``ncu_wait`` is what was left of it after them."""
    from argus_rt.workspace import Workspace

    with Workspace(ws_dir) as ws:
        for task in ws.tasks():
            if task["op"] == "pcmap" and task["status"] == "done":
                prov = ws.outputs(task["id"])["pc_region_counts"].read_json()["provenance"]
                return format_mapping_seconds(prov.get("seconds", {}), prov.get("ncu_alongside", []))
    return ""


def format_mapping_seconds(seconds: dict, alongside: list) -> str:
    """One line of a mapping run's ``provenance.seconds`` (see :func:`mapping_run_seconds`)."""
    inner = ("ncu_to_main", "runner_setup", "runner_run", "ncu_after_exit")
    phases = ", ".join(f"{k.removeprefix('runner_run.')} {v:.1f}" for k, v in seconds.items()
                       if k.startswith("runner_run."))
    split = ", ".join(f"{k} {seconds[k]:.1f}" + (f" [{phases}]" if k == "runner_run" and phases else "")
                      for k in inner if k in seconds)
    if alongside:
        split += ("; " if split else "") + "alongside " + ", ".join(alongside)
    return ", ".join(f"{k} {v:.1f}" + (f" ({split})" if k == "ncu" and split else "")
                     for k, v in seconds.items() if k not in inner and not k.startswith("runner_run."))


def by_op(report: dict) -> str:
    """``"collect:pcmap 7.1, transform:variant 2.3, ..."``: seconds per kind:op over the tasks that ran,
    largest first."""
    acc: dict[str, float] = defaultdict(float)
    for t in report["execution"].get("task_seconds", []):
        acc[f"{t['kind']}:{t['op']}"] += t["seconds"]
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(acc.items(), key=lambda kv: -kv[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="queries per program (>= 2: the first warms Triton's cache)")
    parser.add_argument("--only", default="", help="comma-separated program names (default: all)")
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error(f"--repeats must be >= 2, got {args.repeats}")
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing measured", file=sys.stderr)
        return 2
    chosen = [p for p in programs() if not args.only or p[0] in args.only.split(",")]
    if not chosen:
        parser.error(f"--only {args.only!r} names no program; valid: {', '.join(p[0] for p in programs())}")
    rows = []
    for i, (name, path, signals) in enumerate(chosen):
        walls, reports = [], []
        for rep in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="argus-query-wall-") as scratch:
                wall, doc = one_query(path, signals, Path(scratch))
            walls.append(wall)
            reports.append(doc)
            print(f"[{i + 1}/{len(chosen)}] {name} repeat {rep + 1}: {wall:.1f} s", flush=True)
        timed = spread(walls[1:])
        target = TARGET_S[signals]
        rows.append({"program": name, "signals": signals, "wall_s": round(timed["median"], 2),
                     "spread": {"wall_s": timed},
                     "first_s": round(walls[0], 2), "target_s": target, "met": timed["median"] <= target,
                     "query_wall_s": reports[-1]["execution"]["wall_s"],
                     "collect_runs": reports[-1]["execution"]["collect_runs"], "by_op": by_op(reports[-1]),
                     "mapping_run": reports[-1]["mapping_run_seconds"]})
    met = sum(r["met"] for r in rows)
    notes = (f"{met} of {len(rows)} queries within target. `wall_s`: median CLI process wall over repeats 2..N "
             "(empty workspace and Argus build cache each time; Triton's compile cache warm after repeat 1, "
             "`first_s`). `query_wall_s`: the runtime's own wall for plan execution (the rest is process start, "
             "imports, planning and report output). `by_op`: task seconds per kind:op in the last repeat; "
             "`mapping_run`: that repeat's mapping run by step, its Nsight Compute step split into ncu and "
             "interpreter start to the runner's main, runner setup, the runner's run (CUDA context, the launch "
             "under replay, its arguments saved; a Triton program's run also imports torch, compiles (cached) "
             "and checks) and ncu after the runner exits; `reference`: the parent's check of a CUDA program's "
             "saved outputs. transform:variant includes the CUDA variants' nvcc builds (CPU pool, in "
             "parallel).")
    record("query_wall", rows, title="Query wall time per example program", notes=notes, gpu=gpu_name(),
           columns=["program", "signals", "wall_s", "first_s", "target_s", "met", "query_wall_s", "collect_runs",
                    "by_op", "mapping_run"])
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
