"""`argus compare`: two program versions, each queried with repeats, per region and metric: medians,
spread, the difference, and whether it exceeds run-to-run noise (the rule: :mod:`argus_rt.compare`)."""
from __future__ import annotations

import argparse
import sys

from .options import add_workspace, workspace_path
from .output import human_console, json_add_argument, write_json
from .plan import check_compiles, parse_timeouts


def _description() -> str:
    from ..compare import CONFIDENCE, MIN_REPEATS, RESAMPLES

    return f"""\
Query VERSION_A and VERSION_B REPEATS times each, through the workspace (each repeat is a separate
collection, reused by a later compare or query), and compare them per signal, region and metric.

A version is a program directory (or its argus_program.json), a shipped example's name, or a
workspace version id (pv-..., e.g. what the MCP fork tool made).

noise rule: the sample is one value per repeat (a trace signal is one launch per repeat; the
occurrences inside a launch are not independent repeats, so each repeat's p50, mean, count, ... is
one sample). Each version: median over repeats, [min, max], and a bootstrap interval of the median.
The difference is median(B) - median(A) (and B / A). Its {CONFIDENCE:.0%} interval is a percentile
bootstrap ({RESAMPLES} resamples of each version's repeats, with replacement; seeded). Verdict:
"differs" only if that interval excludes 0, else "within noise"; fewer than {MIN_REPEATS} repeats:
"insufficient repeats". Rows whose two sides are not the same quantity (a region in one version
only, other region IDs, any attributed value when the region trees differ, observed vs attributed,
other units) say "incompatible: <why>" instead of a difference. Every signal's collections are
repeated (an ncu mapping run too), so N repeats cost N times a query of each version.

exit status: 0 compared, 1 some signal was unanswered, 2 bad input
"""


def register(sub) -> None:
    from ..compare import DEFAULT_REPEATS, MAX_REPEATS

    p = sub.add_parser("compare", help="compare two program versions with repeats and a noise rule",
                       description=_description(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("version_a", metavar="VERSION_A", help="the baseline: program directory, example name or pv-id")
    p.add_argument("version_b", metavar="VERSION_B", help="the candidate: program directory, example name or pv-id")
    p.add_argument("--region", default=None, help="qualified or unique leaf region name (default: all)")
    p.add_argument("--signals", default="latency", help="comma-separated signals, e.g. latency,instruction_mix")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, metavar="N",
                   help=f"separate collections per version (default {DEFAULT_REPEATS}, 1..{MAX_REPEATS}; "
                        "at least 3 for a verdict)")
    p.add_argument("--scope", action="append", default=[], metavar="FIELD=VALUE",
                   help="one scope item per flag, repeatable, as for `argus query`")
    p.add_argument("--timeout", action="append", default=[], metavar="KIND=SECONDS",
                   help="one per-task-kind timeout per flag, repeatable: --timeout collect=900")
    add_workspace(p)
    p.add_argument("--devices", default=None, help="comma-separated CUDA device indices for collection workers")
    json_add_argument(p, "the comparison (argus_compare_version 1: rows, rule, per-repeat values, collections)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--allow-unsafe-flags", action="store_true",
                   help="build with compiler flags from argus_program.json outside the allow-list "
                        "(docs/programs-security.md)")
    p.set_defaults(func=run, input_errors=(ValueError, KeyError))  # unknown signal: KeyError listing the valid


def run(args) -> int:
    from ..compare import check_repeats, compare, resolve_version
    from ..query import default_workspace
    from ..scope import Scope
    from ..workspace import Workspace

    console = human_console(args)  # refuses two outputs on stdout before any work
    check_repeats(args.repeats)  # bad input before a workspace is opened
    scope, timeouts = Scope.parse(args.scope), parse_timeouts(args.timeout)
    workspace = workspace_path(args) or default_workspace()
    with Workspace(workspace) as ws:
        versions = [resolve_version(v, ws, allow_unsafe_flags=args.allow_unsafe_flags)
                    for v in (args.version_a, args.version_b)]
        for pv in versions:
            check_compiles(pv)  # as `argus query`: compile errors are one line, before any task runs
        result = compare(*versions, args.region, args.signals, scope, repeats=args.repeats,
                         workspace=ws, progress=not args.no_progress and sys.stderr.isatty(),
                         devices=args.devices.split(",") if args.devices is not None else None,
                         timeouts=timeouts)
    result.print(console)
    if args.json_out:
        write_json(args.json_out, result.to_dict())
    return 1 if result.unanswered else 0
