"""Run examples/cuda/experiments/timer_after_barrier.cu on a GPU: for each way of reading %globaltimer right after a
named barrier, how often the stamp precedes the other warp's release (it must never), by how much, and what a read
costs (clock64 cycles per stamp, 1024 back-to-back on one warp). Prints a table; ``--json PATH`` writes the rows.

    PYTHONPATH=. python3 scripts/timer_after_barrier.py --trials 2000 --json $OUT/timer_after_barrier.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "examples" / "cuda" / "experiments" / "timer_after_barrier.cu"
METHODS = ("plain", "lo32", "lds", "syncwarp", "membar", "activemask")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--delay-ns", type=int, default=2000, help="how long the releasing warp spins before it arrives")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import torch

    from argus_rt.kinds.cuda.build import CudaBuildSpec, build
    from argus_rt.launch import CubinModule

    if not torch.cuda.is_available():
        print("timer_after_barrier: no CUDA device", file=sys.stderr)
        return 2
    mod = CubinModule.load(build(CudaBuildSpec("timer_after_barrier", [SOURCE], argus_mode=0)).cubin)
    rows = []
    for m in METHODS:
        out = torch.zeros(2 * args.trials, dtype=torch.int64, device="cuda")
        mod.launch(f"after_barrier_{m}", grid=1, block=64, args=[out, np.int32(args.trials), np.uint32(args.delay_ns)])
        cost = torch.zeros(2, dtype=torch.int64, device="cuda")
        mod.launch(f"cost_{m}", grid=1, block=32, args=[cost])
        torch.cuda.synchronize()
        pairs = out.cpu().numpy().reshape(-1, 2)
        lead = pairs[:, 1] - pairs[:, 0]  # stamp after the barrier minus the release stamp (ns); must be >= 0
        rows.append({"method": m, "trials": args.trials, "early": int((lead < 0).sum()),
                     "lead_ns_min": int(lead.min()), "lead_ns_median": float(np.median(lead)),
                     "cycles_per_read": float(cost.cpu().numpy()[0]) / 1024})
    print("| method | trials | stamps before the release | lead ns min / median | clock64 cycles per read |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['trials']} | {r['early']} | {r['lead_ns_min']} / {r['lead_ns_median']:.0f} | "
              f"{r['cycles_per_read']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "delay_ns": args.delay_ns, "rows": rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
