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
    # one device call per kernel, each stopping cleanly before its deadline ...
    python -m examples.agent_client --kernels tma_matmul --deadline-s 500 --out run_tma
    # ... then, on any machine, one table, plot and record of both
    python -m examples.agent_client --merge run_tma/trials.json run_ln/trials.json --record

Writes to ``--out`` (default ``$OUT/agent_client`` on the device machine, else ``agent_client_out``):
``progress.jsonl`` (one line per trial as it ends), ``trials.json`` (every trial, diagnosis and
measurement; rewritten after each policy), ``table.md``
(speedups and verdict) and ``best_so_far.png``. ``--record`` also writes
``benchmarks/results/agent_client.json`` through ``benchmarks/record.py``; it is refused for
``--standin`` runs, whose numbers come from a synthetic model.

``--deadline-s S``: the run stops starting work that would end more than S seconds after the
client started (less a margin for writing its files): each (kernel, policy) search gets an equal
share of the time left when it starts, so a cut-off run leaves both policies with about the same
number of trials; the trials left are named in ``trials.json`` (``not_run``) and on stdout. Every
file is written whole (a temporary file renamed into place), so a killed run leaves the last
complete ``trials.json`` and the ``progress.jsonl`` lines written so far.
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
DEADLINE_MARGIN_S = 20.0  # after the searches: stop the server, write trials.json, table and plot
# what --merge requires the runs to share (the first mismatch is named): each a trials.json key
MERGE_KEYS = ("format", "budget", "min_gain", "seed", "shapes", "region_signals", "standin")
MERGE_PROVENANCE_KEYS = ("gpu", "commit", "versions")


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
    ap.add_argument("--merge", type=Path, nargs="+", default=None, metavar="TRIALS_JSON",
                    help="one table, plot (and with --record, record) from runs of separate calls")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="stop cleanly so that the run ends within this many seconds of its start")
    args = ap.parse_args(argv)
    if args.budget < 1:
        ap.error(f"--budget {args.budget}: needs at least 1 (the starting configuration)")
    if args.record and (args.standin or args.dry_run or args.replot):
        ap.error("--record writes measured results only: not with --standin, --dry-run or --replot")
    if args.deadline_s is not None and args.deadline_s <= DEADLINE_MARGIN_S:
        ap.error(f"--deadline-s {args.deadline_s:g}: needs more than the {DEADLINE_MARGIN_S:g} s kept for writing")
    for name in args.kernels:  # before any server starts: a bad --shapes is one line
        try:
            split_shapes(kernel(name), args.shapes)
        except KernelSpecError as exc:
            ap.error(str(exc))
    if args.out is None and args.merge:
        args.out = Path("agent_client_out")
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


def _trial_span(first: int, last: int) -> str:
    return f"{first}-{last}" if last > first else str(first)


async def tune(args, tools) -> tuple[list[dict], list[str]]:
    """(results, errors): a kernel whose start fails is one error line; the other kernels still run.
    With ``args.deadline`` (a time.monotonic instant) each search gets an equal share of the time left,
    and a search still running at the deadline is cut off (then nothing more runs)."""
    import anyio

    from .evaluator import McpEvaluator

    results, errors, not_run = [], [], []
    args.out.mkdir(parents=True, exist_ok=True)
    searches = [(name, policy) for name in args.kernels for policy in args.policies]
    evaluators, failed_kernels = {}, set()
    for i, (name, policy) in enumerate(searches):
        if name in failed_kernels:
            continue  # the other policy has no baseline either
        spec = kernel(name)
        tuning, held = split_shapes(spec, args.shapes)
        if name not in evaluators:
            evaluators[name] = McpEvaluator(spec, tools, args.region_signals)
            if args.deadline is not None and args.deadline - DEADLINE_MARGIN_S > time.monotonic():
                # the start at its tuning shapes, before the shares: both policies' trial 1 (memoised), and
                # the fresh server's first query (engine start-up) would otherwise eat policy (a)'s share alone
                with anyio.move_on_after(args.deadline - DEADLINE_MARGIN_S - time.monotonic()):
                    for shape in tuning:
                        if (await evaluators[name].measure(spec.start, shape)).time_ns is None:
                            break
        evaluator = evaluators[name]
        stop_at, hard = None, float("inf")
        if args.deadline is not None:
            now = time.monotonic()
            hard = args.deadline - DEADLINE_MARGIN_S - now
            stop_at = now + hard / (len(searches) - i)
            if hard <= 0:
                not_run += [{"kernel": k, "policy": p, "trials": _trial_span(1, args.budget)} for k, p in searches[i:]
                            if k not in failed_kernels]
                break
        ran = []

        def progress(trial, policy=policy, name=name, ran=ran):
            ran.append(trial.index)
            with open(args.out / "progress.jsonl", "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"kernel": name, "policy": policy, **asdict(trial)}) + "\n")

        result = None
        with anyio.move_on_after(hard):
            try:
                result = await run_search(spec, evaluator, tuning, held, budget=args.budget, policy=policy,
                                          seed=args.seed, min_gain=args.min_gain, log=lambda s: print(s, flush=True),
                                          on_trial=progress, stop_at=stop_at)
            except SearchError as exc:
                errors.append(str(exc))
                print(f"agent_client: {exc}", file=sys.stderr, flush=True)
                failed_kernels.add(name)
                continue
        if result is None:  # cut off inside a query: its trials are in progress.jsonl, not in results
            first = len(ran) + 1
            errors.append(f"{name} {policy}: cut off at the deadline during trial {first}; trials "
                          f"{_trial_span(first, args.budget)} not run, the {len(ran)} before it only in progress.jsonl")
            print(f"agent_client: {errors[-1]}", file=sys.stderr, flush=True)
            not_run += [{"kernel": name, "policy": policy, "trials": _trial_span(first, args.budget)}]
            not_run += [{"kernel": k, "policy": p, "trials": _trial_span(1, args.budget)} for k, p in searches[i + 1:]
                        if k not in failed_kernels]
            break
        results.append(result.to_dict())
        if result.not_run:
            not_run.append({"kernel": name, "policy": policy, "trials": _trial_span(result.not_run[0], args.budget)})
        write_trials(args, results, errors, not_run)
    write_trials(args, results, errors, not_run)
    for gap in not_run:
        print(f"not run: {gap['kernel']} {gap['policy']} trials {gap['trials']} (deadline)", flush=True)
    return results, errors


def provenance() -> dict:
    """Where the run's numbers come from (recorded in trials.json, so that a merge elsewhere records it)."""
    from benchmarks import provenance as prov
    from benchmarks.record import ROOT, gpu_name

    commit, source, missing = prov.git_commit(ROOT)
    versions, versions_missing = prov.versions()
    return {"gpu": gpu_name(), "commit": commit, "commit_source": source, "versions": versions,
            "not_recorded": {**({"commit": missing} if missing else {}), **versions_missing}}


def write_text_whole(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file renamed into place: a reader, or a run killed
    mid-write, sees the old file or the new one, never part of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_trials(args, results: list[dict], errors: list[str], not_run: list[dict] = ()) -> Path:
    doc = {"format": "agent_client.trials/1", "budget": args.budget, "min_gain": args.min_gain, "seed": args.seed,
           "shapes": args.shapes, "region_signals": list(args.region_signals), "standin": args.standin,
           "command": command_line(), "deadline_s": args.deadline_s, "provenance": getattr(args, "provenance", None),
           "results": results, "errors": errors, "not_run": list(not_run)}
    path = args.out / "trials.json"
    write_text_whole(path, json.dumps(doc, indent=1) + "\n")
    return path


class MergeError(ValueError):
    """Runs that cannot make one table: they differ in what the comparison needs to share."""


def merge_trials(paths: list[Path]) -> dict:
    """One trials document from several (one per kernel, from separate device calls); refuses runs whose
    budget, settings, commit, GPU or versions differ, or that both hold one (kernel, policy)."""
    docs = [(p, json.loads(Path(p).read_text(encoding="utf-8"))) for p in paths]
    (first_path, first), seen = docs[0], {}
    for path, doc in docs:
        for key in MERGE_KEYS:
            if doc.get(key) != first.get(key):
                raise MergeError(f"{key} differs: {first.get(key)!r} in {first_path}, {doc.get(key)!r} in {path}")
        prov_a, prov_b = first.get("provenance") or {}, doc.get("provenance") or {}
        for key in MERGE_PROVENANCE_KEYS:
            if prov_a.get(key) != prov_b.get(key):
                raise MergeError(f"{key} differs: {prov_a.get(key)!r} in {first_path}, {prov_b.get(key)!r} in {path}")
        for r in doc["results"]:
            key = (r["kernel"], r["policy"])
            if key in seen:
                raise MergeError(f"{key[0]} {key[1]} is in both {seen[key]} and {path}")
            seen[key] = path
    merged = {k: first.get(k) for k in (*MERGE_KEYS, "provenance")}
    merged.update({"command": " ; ".join(doc.get("command", "?") for _, doc in docs),
                   "deadline_s": [doc.get("deadline_s") for _, doc in docs],
                   "merged_from": [str(p) for p, _ in docs],
                   "results": [r for _, doc in docs for r in doc["results"]],
                   "errors": [e for _, doc in docs for e in doc.get("errors", [])],
                   "not_run": [g for _, doc in docs for g in doc.get("not_run", [])]})
    return merged


def report(args, results: list[dict], min_gain: float) -> None:
    lines = verdict(results, min_gain)
    table = speedup_table(results)
    measured = [m for r in results for t in r["trials"] for m in t["measurements"] if m["seconds"]]
    cost = (f"client wall time per measurement (fork + query of one shape): mean "
            f"{sum(m['seconds'] for m in measured) / len(measured):.2f} s over {len(measured)} run(s) "
            f"(repeated candidates are not measured again)") if measured else ""
    text = table + "\n" + "\n".join(f"- {line}" for line in lines + ([cost] if cost else [])) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_whole(args.out / "table.md", text)
    print(text)
    try:
        tmp = plot_best_so_far(results, args.out / ".best_so_far.tmp.png")  # whole or not at all, as trials.json
        os.replace(tmp, args.out / "best_so_far.png")
        print(f"plot: {args.out / 'best_so_far.png'}")
    except ImportError:
        print("plot: matplotlib is not installed here; render it elsewhere with --replot trials.json")


def command_line(argv=None) -> str:
    """The client's command line as it was run (``argv``: main's arguments, default this process's)."""
    return shlex.join(["python", "-m", "examples.agent_client", *(sys.argv[1:] if argv is None else argv)])


def record_results(args, results: list[dict], root: Path | None = None, command: str | None = None,
                   run_provenance: dict | None = None) -> dict:
    """benchmarks/results/agent_client.json (under ``root``, default the checkout) and docs/benchmarks.md;
    ``command``: the run's command line (default :func:`command_line` of this process);
    ``run_provenance``: the device run's GPU, commit and versions (:func:`provenance`), for a record
    written elsewhere (``--merge``); without it, this process's own."""
    from benchmarks import results_doc
    from benchmarks.record import ROOT, doc_paths, make_record, record, results_dir

    notes = ("Optimisation client (examples/agent_client) through argus mcp only. Time: kernel_time untraced_median "
             "(CUDA events, plain kernel). Trial = one configuration at every tuning shape; held_out shapes are never "
             f"seen by the search. Budget {args.budget} trials per policy, min gain {args.min_gain}. "
             + " ".join(verdict(results, args.min_gain)))
    kw = dict(title="Optimisation client: two policies, fixed trial budget", notes=notes, columns=ROW_COLUMNS,
              root=root or ROOT, command=command or command_line())
    if run_provenance is None:
        return record("agent_client", result_rows(results), **kw)
    payload = make_record("agent_client", result_rows(results), gpu=run_provenance["gpu"], **kw)
    payload.update({k: run_provenance[k] for k in ("commit", "commit_source", "versions")},
                   not_recorded=run_provenance.get("not_recorded", {}))
    text = json.dumps(payload, indent=2) + "\n"
    results_dir(kw["root"]).mkdir(parents=True, exist_ok=True)
    write_text_whole(results_dir(kw["root"]) / "agent_client.json", text)
    results_doc.update_docs(results_dir(kw["root"]), *doc_paths(kw["root"]))
    print(results_doc.render_section("agent_client", payload))
    return payload


def main(argv=None) -> int:
    import anyio

    args = parse_args(argv)
    args.deadline = None if args.deadline_s is None else time.monotonic() + args.deadline_s
    if args.replot:
        doc = json.loads(args.replot.read_text(encoding="utf-8"))
        args.out = args.replot.parent
        report(args, doc["results"], doc["min_gain"])
        return 0
    if args.merge:
        return merge(args, argv)
    from .mcp_session import argus_server

    imports, env = (), None
    if args.standin:
        imports, env = (args.standin,), {**os.environ, "ARGUS_STANDIN_WORKER": "1"}

    async def session():
        async with argus_server(args.workspace, imports, env) as tools:
            return await (dry_run(args, tools) if args.dry_run else tune(args, tools))

    start = time.perf_counter()
    if not args.dry_run:
        args.provenance = provenance()
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


def merge(args, argv) -> int:
    """``--merge``: trials.json, table, plot (and ``--record``) of several runs in ``--out``."""
    try:
        doc = merge_trials(args.merge)
    except MergeError as exc:
        print(f"agent_client: --merge refused: {exc}", file=sys.stderr)
        return 2
    if args.record and doc["standin"]:
        print(f"agent_client: --merge --record refused: the runs are --standin {doc['standin']} runs", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_whole(args.out / "trials.json", json.dumps(doc, indent=1) + "\n")
    report(args, doc["results"], doc["min_gain"])
    for gap in doc["not_run"]:
        print(f"not run: {gap['kernel']} {gap['policy']} trials {gap['trials']} (deadline)")
    if args.record:
        if not doc.get("provenance"):
            print("agent_client: --merge --record refused: the runs carry no provenance (GPU, commit, versions)",
                  file=sys.stderr)
            return 2
        args.budget, args.min_gain = doc["budget"], doc["min_gain"]
        record_results(args, doc["results"], command=doc["command"], run_provenance=doc["provenance"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
