"""`argus query`: plan, run and report a region query (results reused from the workspace)."""
from __future__ import annotations

import json
import sys

from .options import add_workspace, workspace_path
from .output import human_console, json_add_argument, write_json, write_text
from .plan import add_query_arguments, parse_timeouts, program_from_args


def register(sub) -> None:
    p = sub.add_parser("query", help="measure signals of a region and print a region report")
    add_query_arguments(p)
    add_workspace(p)
    p.add_argument("--devices", default=None, help="comma-separated CUDA device indices for collection workers")
    json_add_argument(p, "the report (argus_report_version 1, schema argus_rt/schemas/report.schema.json)")
    p.add_argument("--markdown", default=None, metavar="FILE", help="also write a markdown report to FILE ('-': stdout)")
    p.add_argument("--chrome", "--perfetto", dest="chrome", default=None, metavar="FILE",
                   help="also write the region occurrences behind the latency values as a Chrome/Perfetto "
                        "trace JSON to FILE ('-': stdout): a track per SM, CTA and warp, nested slices with "
                        "their coordinates and their region's attributed metrics from this query, and with "
                        "async_completion_latency each probe run's issue -> completion slices linked by flows "
                        "(schema argus_rt/schemas/chrome_trace.schema.json, docs/perfetto.md); needs the "
                        "latency signal")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--cpu-pool", choices=("process", "thread"), default="process",
                   help="run Transform/Synthesize/Control in worker processes (default: killed past their timeout, "
                        "a crash fails only its task) or in threads of this process")
    add_engine_arguments(p)
    p.set_defaults(func=run, input_errors=(ValueError, KeyError))  # unknown signal: KeyError listing the valid


def add_engine_arguments(p) -> None:
    """``--engine``, ``--address``, ``--collect-resources`` (query and campaign)."""
    p.add_argument("--engine", choices=("embedded", "ray"), default=None,
                   help="what executes the plan: embedded (default: here) or ray (a Ray cluster, docs/distributed.md; "
                        "needs the [ray] extra)")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="the Ray cluster (--engine ray): host:port, auto (started by `ray start` here), "
                        "default $RAY_ADDRESS or a new local instance")
    p.add_argument("--collect-resources", default=None, metavar="JSON",
                   help='the Ray resources of one device worker (--engine ray), default {"num_gpus": 1}; e.g. '
                        '{"num_gpus": 0, "argus_device": 1} for CPU stand-ins')


def engine_options(args, engine: str | None = None) -> dict:
    """The Ray engine options of the command line (an input error unless the engine, ``engine`` or
    ``--engine``, is ray)."""
    from ..errors import ArgusInputError

    if args.collect_resources is None:
        return {}
    if (engine or args.engine) != "ray":
        raise ArgusInputError("--collect-resources is a Ray engine option: it needs --engine ray")
    try:
        value = json.loads(args.collect_resources)
    except json.JSONDecodeError as exc:
        raise ArgusInputError(f"--collect-resources {args.collect_resources!r} is not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ArgusInputError(f"--collect-resources must be a JSON object, got {args.collect_resources!r}")
    return {"collect_resources": value}


def run(args) -> int:
    from ..query import check_compiles, default_workspace, query
    from ..scope import Scope

    console = human_console(args)  # refuses two outputs on stdout before any work
    if args.chrome:
        from .query_chrome import require_latency

        require_latency([s for s in args.signals.split(",") if s])
    workspace = workspace_path(args) or default_workspace()
    program = program_from_args(args)
    check_compiles(program)  # as `argus plan`: compile errors are one line, before any task runs
    report = query(program, args.region, args.signals, Scope.parse(args.scope),
                   workspace=workspace, progress=not args.no_progress and sys.stderr.isatty(),
                   devices=args.devices.split(",") if args.devices is not None else None,
                   timeouts=parse_timeouts(args.timeout), cpu_pool=args.cpu_pool,
                   engine=args.engine or "embedded", address=args.address, engine_options=engine_options(args))
    report.print(console)
    if args.json_out:
        write_json(args.json_out, report.to_dict())
    if args.markdown:
        write_text(args.markdown, report.to_markdown())
    unanswered = {u["signal"]: u["reason"] for u in report.unanswered}
    if args.chrome and "latency" in unanswered:  # nothing was traced: the report says why
        console.print(f"no Chrome/Perfetto trace written: latency is unanswered ({unanswered['latency']})",
                      markup=False)
    elif args.chrome:
        from .query_chrome import write_query_chrome_trace
        from .workspace import open_existing

        with open_existing(workspace) as ws:
            n = write_query_chrome_trace(report, ws, args.chrome)
        console.print(f"Chrome/Perfetto trace: {args.chrome} ({n} region occurrences)")
    return 0 if not report.unanswered else 1
