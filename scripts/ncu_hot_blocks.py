#!/usr/bin/env python3
"""Where a kernel's warp instructions and stall samples go, from ncu's per-PC source counters, for kernels whose
code is inlined into one function (so megakernel.ncu_attr's per-function view says nothing).

SASS lines executed the same number of times belong to the same blocks, usually one loop body run once per trip:
grouping by that count finds the loops, with instructions per trip (lines) and their share of all instructions and
stall samples. Then the kernel's stall reasons and its hottest lines by samples. Reads the output of
``ncu --section SourceCounters --page source --print-source sass --csv`` (parsed by argus_rt.backends.ncu).

    python scripts/ncu_hot_blocks.py ncu_src_rows-stream.csv [--kernel layer_rows] [--top 8]
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_rt.backends.ncu import NcuError, parse_source_csv  # noqa: E402


def hot_blocks(profile, top: int) -> list[str]:
    inst = profile.metrics["inst_executed"]
    samples = profile.metrics["warp_stall_samples"]
    total_i, total_s = sum(inst) or 1.0, sum(samples) or 1.0
    groups: dict[float, list[int]] = defaultdict(list)
    for i, count in enumerate(inst):
        if count:
            groups[count].append(i)
    out = [f"{profile.kernel_name}: {total_i / 1e6:.1f} M warp instructions, {total_s:,.0f} stall samples",
           "executions  lines  M instr  % instr  % samples"]
    for count, lines in sorted(groups.items(), key=lambda kv: -kv[0] * len(kv[1]))[:top]:
        s = sum(samples[i] for i in lines)
        out.append(f"{count:>10,.0f}  {len(lines):5d}  {count * len(lines) / 1e6:7.1f}  {100 * count * len(lines) / total_i:6.1f}"
                   f"  {100 * s / total_s:8.1f}")
    stalls = {k[len("stall:"):]: sum(v) for k, v in profile.metrics.items() if k.startswith("stall:")}
    out.append("stall reasons (% of samples): " + ", ".join(
        f"{k} {100 * v / total_s:.1f}" for k, v in sorted(stalls.items(), key=lambda kv: -kv[1])[:8] if v))
    out.append("hottest lines by samples:")
    for i in sorted(range(len(samples)), key=lambda i: -samples[i])[:top]:
        out.append(f"  +{profile.pcs[i]:#07x}  {profile.sass[i][:56]:56s}  executed {inst[i]:>12,.0f}"
                   f"  samples {samples[i]:>7,.0f}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--kernel", help="profiled kernel to show (default: every one in the file)")
    ap.add_argument("--top", type=int, default=8, help="groups and lines to list (default 8)")
    args = ap.parse_args()
    try:
        profiles = parse_source_csv(Path(args.csv).read_text(errors="replace"))
    except OSError as exc:
        raise SystemExit(f"ncu_hot_blocks: cannot read {args.csv}: {exc.strerror}") from None
    except NcuError as exc:
        raise SystemExit(f"ncu_hot_blocks: {args.csv}: {exc}") from None
    chosen = [p for p in profiles if args.kernel is None or p.kernel == args.kernel]
    if not chosen:
        raise SystemExit(f"ncu_hot_blocks: no kernel {args.kernel!r} in {args.csv}; present: "
                         + ", ".join(sorted({p.kernel for p in profiles})))
    for p in chosen:
        print("\n".join(hot_blocks(p, args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
