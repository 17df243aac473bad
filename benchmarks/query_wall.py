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
15:33 record; a CPU-side estimate, NOT measured on a GPU). Device command: QUERY_ONLY=cuda,softmax
SUITE_S=1 bash scripts/gpu_triton_check.sh. Baseline: docs/gpu_runs/2026-12-01_1533_query_wall/
(cuda 21.1 s, softmax 26.8 s), taken before gpu_env.sh's PYTHONPYCACHEPREFIX, so every torch import
there also compiled ~1,100 modules (3.1 s in the profiled CLI). What changed, and what it was worth
on the CPU here (2 shared cores, load ~2; torch import 2.0 s, a disassembler start 0.35-0.7 s):
  - the CUDA kind's profiled process (under ncu) gets the cubin and symbol from the parent, draws its
    inputs with NumPy, launches through the driver API and saves its arguments (.npz); it imports
    neither torch nor Triton. Its CPU part: 4.2 s (interpreter, imports 0.34, torch 2.06, build-cache
    check 0.03, kernel lookup by cuobjdump -sass plus the tool finder's Triton import 0.86) -> 0.49 s.
  - the parent checks those saved outputs (step `reference`): 0.04 s once torch is loaded, 2.2 s if
    it must import it; the warm worker has loaded it during the ncu run.
  - one disassembler run in the mapping run (nvdisasm -g; arch, functions and jump tables from
    cuobjdump -elf, 10 ms): 1.32 -> 0.73 s; kernel symbol of the traced cubin from the ELF: 0.70 -> 0.04 s.
  - device workers start with the Runtime and import torch, open their CUDA context and import
    Triton in a background thread (GPU hosts; $ARGUS_WARM_WORKERS); workers leave with os._exit
    (Runtime.close 1.4 -> 0.1 s); the variant Transform prebuilds CUDA cubins on the CPU pool.
    CPU stand-in query (examples/cuda instruction_mix,barrier_count, stand-in ncu that runs the
    real runner on tests/stub_driver): cold wall 6.6-6.7 s (build 0.6, reference 1.7-2.0), warm
    4.5-6.2 s (build 0.0, reference 0.0; on 2 cores the background import competes with nvcc).
Predicted step split on one H200 (old -> new, seconds):
  cuda, latency,instruction_mix,barrier_count: CLI 21.1 -> ~8.5 (7.5-10.5)
    outside the runtime 1.5 -> ~1.0 (Runtime.close without finalising the children);
    transform:variant 0.0 -> ~1.1 (CPU pool start 0.3, both nvcc builds in parallel ~0.8), while
      the worker warms up (torch ~1.5-2 with bytecode, context ~0.4, Triton ~0.3);
    collect:pcmap 11.6 -> ~4.6: build 0.7 -> 0.05 (cache hit), disassemble 0.7 -> 0.45 (cuobjdump -elf
      0.02 + nvdisasm -g ~0.35 + capability from the driver), ncu 9.4 -> ~3.5 (ncu_to_main 1.1 -> 1.1;
      runner_run 7.2 -> ~1.5: cuInit and the primary context under ncu ~0.5, the replayed launch
      ~0.5-1 -- the two parts not measurable here -- saving 256 KiB; ncu_after_exit 1.2 -> ~0.9, no
      torch to finalise), reference new ~0.1, map 0.5 -> 0.15 (its nvdisasm run is gone), task ~0.3;
    collect:trace 7.2 (13:11 record, torch already loaded: 1.9) -> ~1.0 (no nvcc, no cuobjdump
      -sass, torch and context from the warm-up; +up to ~1.5 if it runs first and the warm-up is
      not done), synthesize after the last collect ~0.4. Runtime ~7.1-8.6.
  softmax, instruction_mix,barrier_count: CLI 26.8 -> ~16.5 (14-19)
    outside the runtime 7.8 -> ~4.6 (check_compiles' torch import in the CLI with bytecode ~-2.5,
      not this change; Runtime.close ~-0.7);
    collect:pcmap 17.8 -> ~10.7: the 5.1 s before the mapping run's clock (mapping_run imported torch
      first) -> ~0; build 0.9 -> ~2.0 (it now waits for the warm-up's torch and Triton imports,
      which start with the Runtime); disassemble 0.7 -> 0.45; ncu 10.6 -> ~7.8 (runner_run 8.4 ->
      ~5.7 from bytecode alone: a Triton program's own make_inputs/run/reference are torch, so its
      profiled process keeps torch, Triton, the cached compile and the JIT check); map 0.5 -> 0.15;
      synthesize ~0.7. Runtime ~11.8.
  If cuda's ncu step stays above ~5 s, the replay or the context under ncu is the cost: read
  runner_run against ncu_to_main/ncu_after_exit in `mapping_run`.
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
