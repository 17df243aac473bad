"""`argus campaign FILE.json`: a grid of queries (program versions x regions x signals) in one go.

One workspace, one engine, progress while it runs, a summary table at the end; run it again after an
interruption and the finished queries are reused (nothing of them runs again). The file's format:
:mod:`argus_rt.campaign` and ``argus_rt/schemas/campaign.schema.json``.
"""
from __future__ import annotations

import sys

from .options import add_workspace, workspace_path
from .output import human_console, json_add_argument, write_json
from .query import add_engine_arguments, engine_options


def register(sub) -> None:
    p = sub.add_parser("campaign", help="run a grid of queries (program versions x regions x signals) from a JSON file")
    p.add_argument("file", metavar="FILE.json", help="the campaign file (schema argus_rt/schemas/campaign.schema.json)")
    add_workspace(p, "the campaign's shared workspace (default: the file's 'workspace', else $ARGUS_WORKSPACE or "
                     "./.argus_workspace)")
    add_engine_arguments(p)
    p.add_argument("--devices", default=None, help="comma-separated CUDA device indices (embedded) or as many "
                                                   "entries as device workers (ray)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    json_add_argument(p, "the campaign result (one row per finished query, each with its report)")
    p.set_defaults(func=run, input_errors=(ValueError, KeyError))


def run(args) -> int:
    from ..campaign import load_campaign, run_campaign

    console = human_console(args)  # refuses two outputs on stdout before any work
    campaign = load_campaign(args.file)  # a bad file is one line (exit 2) before anything starts
    options = engine_options(args, args.engine or campaign.engine)
    result = run_campaign(campaign, workspace=workspace_path(args), engine=args.engine, address=args.address,
                          engine_options=options,
                          devices=args.devices.split(",") if args.devices is not None else None,
                          progress=not args.no_progress and sys.stderr.isatty(), stream=sys.stderr)
    result.print(console)
    if args.json_out:
        write_json(args.json_out, result.to_dict())
    if result.interrupted:
        return 130
    return 0 if result.ok else 1
