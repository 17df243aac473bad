"""`argus trace`: decode a saved raw trace (.npz from TraceSession.save), print per-region
statistics, and optionally write a Chrome/Perfetto JSON and the statistics as JSON."""
from __future__ import annotations

import json

from .output import STDOUT, human_console, json_add_argument, write_json, write_text

TRACE_STATS_FORMAT = "argus.trace_stats/1"


def register(sub) -> None:
    p = sub.add_parser("trace", help="decode a saved region trace: per-region stats, Chrome/Perfetto export")
    p.add_argument("raw", help=".npz written by TraceSession.save / argus_rt.trace.save_raw")
    p.add_argument("--manifest", help="region manifest JSON (names regions; unknown IDs become errors)")
    p.add_argument("--chrome", metavar="FILE", help="write a Chrome/Perfetto trace JSON here ('-': stdout)")
    p.add_argument("--lenient", action="store_true", help="skip mismatched markers instead of failing")
    json_add_argument(p, "the per-region statistics")
    # a raw file that is no npz or damaged is a TraceError (an ArgusInputError: load_raw turns zipfile's
    # and numpy's errors into one); ValueError and OSError stay bad input, as before
    p.set_defaults(func=run, input_errors=(ValueError, OSError))


def stats_document(raw: str, trace, intervals, stats) -> dict:
    """``argus.trace_stats/1``: what the table shows, one entry per region (times in ``unit``)."""
    return {"format": TRACE_STATS_FORMAT, "raw": raw, "records": int(len(trace.events)),
            "warps": int(len(trace.rings)), "unit": intervals.unit, "incomplete": bool(intervals.incomplete),
            "problems": [str(p) for p in intervals.problems], "regions": [s.to_json() for s in stats]}


def run(args) -> int:
    from rich.markup import escape
    from rich.table import Table

    from ..regions import RegionTree
    from ..trace import chrome_trace, load_raw, pair_intervals, region_stats

    console = human_console(args)
    tree = RegionTree.load(args.manifest) if args.manifest else None
    trace = load_raw(args.raw, known_ids=[r.id for r in tree] if tree else None)
    iv = pair_intervals(trace, strict=not args.lenient)
    stats = region_stats(iv, names=tree)
    table = Table(title=f"{args.raw}: {len(trace.events)} records, {len(trace.rings)} warps, unit {iv.unit}")
    for col in ("region", "count", "total", "mean", "p50", "p99", "min", "max", "SM spread"):
        table.add_column(col, justify="left" if col == "region" else "right")
    for s in stats:
        table.add_row(s.name, str(s.count), *(f"{v:.4g}" for v in (s.total, s.mean, s.p50, s.p99, s.min, s.max, s.sm_spread)))
    console.print(table)
    if iv.incomplete:
        console.print(f"[yellow]incomplete[/]: {len(iv.problems)} problem(s); first: {escape(str(iv.problems[0]))}")
    if args.chrome:  # one writer for a file and for stdout, as `argus query --chrome`
        write_text(args.chrome, json.dumps(chrome_trace(iv, names=tree)))
        if args.chrome != STDOUT:
            console.print(f"Chrome/Perfetto trace: {args.chrome}")
    if args.json_out:
        write_json(args.json_out, stats_document(args.raw, trace, iv, stats))
    return 0
