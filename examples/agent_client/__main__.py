"""``python -m examples.agent_client``: tune Triton kernels through ``argus mcp`` with two policies.

Run from the checkout's root. Examples::

    # CPU only: fork and compile every start configuration, plan its query, print the run's size
    python -m examples.agent_client --dry-run
    # the smallest meaningful GPU run: one kernel, one tuning + one held-out shape, 8 trials per policy
    python -m examples.agent_client --kernels tma_matmul --shapes 2 --budget 8 --record
    # the issue's run: both kernels, 2 tuning + 2 held-out shapes, 25 trials per policy
    python -m examples.agent_client --budget 25 --record
    # render table, verdict and plot again from a run's trials.json
    python -m examples.agent_client --replot agent_client_out/trials.json

Writes to ``--out`` (default ``$OUT/agent_client`` on the device machine, else ``agent_client_out``):
``progress.jsonl`` (one line per trial as it ends), ``trials.json`` (every trial, diagnosis and
measurement; rewritten after each policy), ``table.md``
(speedups and verdict) and ``best_so_far.png``. ``--record`` also writes
``benchmarks/results/agent_client.json`` through ``benchmarks/record.py``; it is refused for
``--standin`` runs, whose numbers come from a synthetic model.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from .kernels import KERNELS, KernelSpecError, kernel, shape_label, split_shapes
from .output import ROW_COLUMNS, plot_best_so_far, result_rows, speedup_table, verdict
from .search import POLICIES, SearchError, run_search

DEFAULT_BUDGET = 25


def _csv(valid, what):
    def parse(text: str) -> list[str]:
        items = [t for t in text.split(",") if t]
        bad = [t for t in items if t not in valid]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{what} {text!r}: unknown {bad or 'empty'}; valid: {', '.join(valid)}")
        return items
    return parse


def parse_args(argv=None) -> argparse.Namespace:
    from .evaluator import REGION_SIGNALS

    ap = argparse.ArgumentParser(prog="python -m examples.agent_client", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=_csv(list(KERNELS), "--kernels"), default=list(KERNELS))
    ap.add_argument("--shapes", type=int, default=4, help="shapes per kernel (first N of its list; odd positions "
                                                          "are held out); 2..4")
    ap.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="trials per (kernel, policy), the start included")
    ap.add_argument("--policies", type=_csv(POLICIES, "--policies"), default=list(POLICIES))
    ap.add_argument("--region-signals", type=_csv(REGION_SIGNALS, "--region-signals"), default=list(REGION_SIGNALS),
                    help="what policy (b) asks of each incumbent")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-gain", type=float, default=0.02, help="relative gain a candidate needs to be accepted")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=None,
                    help="Argus workspace (default: <out>/workspace; with $OUT set, <tmp>/agent_client_workspace)")
    ap.add_argument("--standin", metavar="MODULE", default=None,
                    help="the server imports MODULE with ARGUS_STANDIN_WORKER=1 (tests' synthetic backends)")
    ap.add_argument("--dry-run", action="store_true", help="fork, compile and plan the start configurations only (no GPU)")
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/agent_client.json")
    ap.add_argument("--replot", type=Path, default=None, metavar="TRIALS_JSON")
    args = ap.parse_args(argv)
    if args.budget < 1:
        ap.error(f"--budget {args.budget}: needs at least 1 (the starting configuration)")
    if args.record and (args.standin or args.dry_run or args.replot):
        ap.error("--record writes measured results only: not with --standin, --dry-run or --replot")
    for name in args.kernels:  # before any server starts: a bad --shapes is one line
        try:
            split_shapes(kernel(name), args.shapes)
        except KernelSpecError as exc:
            ap.error(str(exc))
    if args.out is None:
        args.out = Path(os.environ["OUT"]) / "agent_client" if os.environ.get("OUT") else Path("agent_client_out")
    if args.workspace is None:  # under $OUT everything comes back from the device: keep the evidence out of it
        args.workspace = (Path(tempfile.gettempdir()) / "agent_client_workspace" if os.environ.get("OUT")
                          else args.out / "workspace")
    return args


async def dry_run(args, tools) -> int:
    """Fork the start configuration at every chosen shape, compile it (``discover`` builds its TTGIR on the
    CPU) and plan its time query; print the run's size."""
    from .evaluator import TIME_SIGNALS

    for name in args.kernels:
        spec = kernel(name)
        tuning, held = split_shapes(spec, args.shapes)
        print(f"{name}: start {spec.start}; knobs " + "; ".join(f"{k.name} {list(k.values)}" for k in spec.knobs))
        for shape in tuning + held:
            edits, launch = spec.candidate(spec.start, shape, spec.base_launch())
            version = (await tools.fork(str(spec.program_dir), edits, launch))["id"]
            plan = await tools.plan(version, spec.root_region, TIME_SIGNALS)
            sites = await tools.call("discover", {"program": version, "region": spec.root_region})  # compiles it
            print(f"  {'held out' if shape in held else 'tuning  '} {shape_label(shape)}: fork {version} compiles "
                  f"({len(sites['sites'])} async sites), {len(plan['runs'])} collection run(s) per measurement "
                  f"{[r['requests'] for r in plan['runs']]}")
        measurements = len(args.policies) * args.budget * len(tuning) + 2 * len(held)
        diagnoses = args.budget if "regions" in args.policies else 0
        print(f"  at most {measurements} measurements (fork + query; a repeated candidate is measured once) and "
              f"{diagnoses} diagnoses ({', '.join(args.region_signals)})")
    return 0


async def tune(args, tools) -> tuple[list[dict], list[str]]:
    """(results, errors): a kernel whose start fails is one error line; the other kernels still run."""
    from .evaluator import McpEvaluator

    results, errors = [], []
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.kernels:
        spec = kernel(name)
        tuning, held = split_shapes(spec, args.shapes)
        evaluator = McpEvaluator(spec, tools, args.region_signals)
        for policy in args.policies:
            def progress(trial, policy=policy):
                with open(args.out / "progress.jsonl", "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"kernel": name, "policy": policy, **asdict(trial)}) + "\n")

            try:
                result = await run_search(spec, evaluator, tuning, held, budget=args.budget, policy=policy,
                                          seed=args.seed, min_gain=args.min_gain, log=lambda s: print(s, flush=True),
                                          on_trial=progress)
            except SearchError as exc:
                errors.append(str(exc))
                print(f"agent_client: {exc}", file=sys.stderr, flush=True)
                break  # the other policy has no baseline either
            results.append(result.to_dict())
            write_trials(args, results, errors)
    write_trials(args, results, errors)
    return results, errors


def write_trials(args, results: list[dict], errors: list[str]) -> Path:
    doc = {"format": "agent_client.trials/1", "budget": args.budget, "min_gain": args.min_gain, "seed": args.seed,
           "standin": args.standin, "command": " ".join(sys.argv), "results": results, "errors": errors}
    path = args.out / "trials.json"
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


def report(args, results: list[dict], min_gain: float) -> None:
    lines = verdict(results, min_gain)
    table = speedup_table(results)
    measured = [m for r in results for t in r["trials"] for m in t["measurements"] if m["seconds"]]
    cost = (f"client wall time per measurement (fork + query of one shape): mean "
            f"{sum(m['seconds'] for m in measured) / len(measured):.2f} s over {len(measured)} run(s) "
            f"(repeated candidates are not measured again)") if measured else ""
    text = table + "\n" + "\n".join(f"- {line}" for line in lines + ([cost] if cost else [])) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(text, encoding="utf-8")
    print(text)
    try:
        print(f"plot: {plot_best_so_far(results, args.out / 'best_so_far.png')}")
    except ImportError:
        print("plot: matplotlib is not installed here; render it elsewhere with --replot trials.json")


def command_line(argv=None) -> str:
    """The client's command line as it was run (``argv``: main's arguments, default this process's)."""
    return shlex.join(["python", "-m", "examples.agent_client", *(sys.argv[1:] if argv is None else argv)])


def record_results(args, results: list[dict], root: Path | None = None, command: str | None = None) -> dict:
    """benchmarks/results/agent_client.json (under ``root``, default the checkout) and docs/benchmarks.md;
    ``command``: the run's command line (default :func:`command_line` of this process)."""
    from benchmarks.record import ROOT, record

    notes = ("Optimisation client (examples/agent_client) through argus mcp only. Time: kernel_time untraced_median "
             "(CUDA events, plain kernel). Trial = one configuration at every tuning shape; held_out shapes are never "
             f"seen by the search. Budget {args.budget} trials per policy, min gain {args.min_gain}. "
             + " ".join(verdict(results, args.min_gain)))
    return record("agent_client", result_rows(results), title="Optimisation client: two policies, fixed trial budget",
                  notes=notes, columns=ROW_COLUMNS, root=root or ROOT, command=command or command_line())


def main(argv=None) -> int:
    import anyio

    args = parse_args(argv)
    if args.replot:
        doc = json.loads(args.replot.read_text(encoding="utf-8"))
        args.out = args.replot.parent
        report(args, doc["results"], doc["min_gain"])
        return 0
    from .mcp_session import argus_server

    imports, env = (), None
    if args.standin:
        imports, env = (args.standin,), {**os.environ, "ARGUS_STANDIN_WORKER": "1"}

    async def session():
        async with argus_server(args.workspace, imports, env) as tools:
            return await (dry_run(args, tools) if args.dry_run else tune(args, tools))

    start = time.perf_counter()
    outcome = anyio.run(session)
    if args.dry_run:
        return outcome
    results, errors = outcome
    print(f"total wall time {time.perf_counter() - start:.1f} s")
    if results:
        report(args, results, args.min_gain)
    if args.record and results:
        record_results(args, results, command=command_line(argv))
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
