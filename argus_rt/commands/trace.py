"""`argus trace`: decode a saved raw trace (.npz from TraceSession.save), print per-region
statistics, and optionally write a Chrome/Perfetto JSON."""
from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("trace", help="decode a saved region trace: per-region stats, Chrome/Perfetto export")
    p.add_argument("raw", help=".npz written by TraceSession.save / argus_rt.trace.save_raw")
    p.add_argument("--manifest", help="region manifest JSON (names regions; unknown IDs become errors)")
    p.add_argument("--chrome", help="write a Chrome/Perfetto trace JSON here")
    p.add_argument("--lenient", action="store_true", help="skip mismatched markers instead of failing")
    p.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..regions import RegionError, RegionTree
    from ..trace import TraceError, load_raw, pair_intervals, region_stats, write_chrome_trace

    console = Console()
    try:
        tree = RegionTree.load(args.manifest) if args.manifest else None
        trace = load_raw(args.raw, known_ids=[r.id for r in tree] if tree else None)
        iv = pair_intervals(trace, strict=not args.lenient)
    except (TraceError, RegionError, OSError, ValueError) as exc:
        print(f"argus trace: {exc}", file=sys.stderr)
        return 1
    table = Table(title=f"{args.raw}: {len(trace.events)} records, {len(trace.rings)} warps, unit {iv.unit}")
    for col in ("region", "count", "total", "mean", "p50", "p99", "min", "max", "SM spread"):
        table.add_column(col, justify="left" if col == "region" else "right")
    for s in region_stats(iv, names=tree):
        table.add_row(s.name, str(s.count), *(f"{v:.4g}" for v in (s.total, s.mean, s.p50, s.p99, s.min, s.max, s.sm_spread)))
    console.print(table)
    if iv.incomplete:
        console.print(f"[yellow]incomplete[/]: {len(iv.problems)} problem(s); first: {iv.problems[0]}")
    if args.chrome:
        path = write_chrome_trace(iv, args.chrome, names=tree)
        console.print(f"Chrome/Perfetto trace: {path}")
    return 0
