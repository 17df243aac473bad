"""`argus query`: plan, run and report a region query (results reused from the workspace)."""
from __future__ import annotations

import sys
from pathlib import Path

from .plan import add_query_arguments, parse_timeouts


def register(sub) -> None:
    p = sub.add_parser("query", help="measure signals of a region and print a region report")
    add_query_arguments(p)
    p.add_argument("--workspace", default=None,
                   help="workspace directory (default $ARGUS_WORKSPACE or ./.argus_workspace)")
    p.add_argument("--devices", default=None, help="comma-separated CUDA device indices for collection workers")
    p.add_argument("--json", dest="json_out", default=None, help="also write the JSON report to this file")
    p.add_argument("--markdown", default=None, help="also write a markdown report to this file")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--cpu-pool", choices=("thread", "process"), default="thread",
                   help="run Transform/Synthesize/Control in threads (default) or spawned processes")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..fsutil import atomic_write_text
    from ..query import query
    from ..scope import Scope

    try:
        report = query(args.program, args.region, args.signals, Scope.parse(args.scope),
                       workspace=args.workspace, progress=not args.no_progress and sys.stderr.isatty(),
                       devices=args.devices.split(",") if args.devices is not None else None,
                       timeouts=parse_timeouts(args.timeout), cpu_pool=args.cpu_pool)
    except (ValueError, KeyError) as exc:
        print(f"argus query: {exc}", file=sys.stderr)
        return 2
    report.print()
    if args.json_out:
        atomic_write_text(Path(args.json_out), report.to_json())
    if args.markdown:
        atomic_write_text(Path(args.markdown), report.to_markdown())
    return 0 if not report.unanswered else 1
