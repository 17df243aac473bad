"""`argus plan`: print the measurement DAG of a query as text, Graphviz dot, or the JSON descriptor."""
from __future__ import annotations

from ..errors import ArgusInputError
from ..tasks import Plan, topological_order
from .options import add_workspace, workspace_path
from .output import human_stream, json_add_argument, write_json, write_text

_KIND_SHAPE = {"transform": "box", "collect": "box3d", "synthesize": "ellipse", "control": "diamond"}


def add_query_arguments(p) -> None:
    p.add_argument("program", help="program directory (with argus_program.json)")
    p.add_argument("--region", default=None, help="qualified or unique leaf region name (default: all)")
    p.add_argument("--signals", default="latency", help="comma-separated signals, e.g. latency,instruction_mix")
    # One item per flag: a list-valued option would swallow the program after it.
    p.add_argument("--scope", action="append", default=[], metavar="FIELD=VALUE",
                   help="one scope item per flag, repeatable: --scope warp_role=producer --scope iterations=2:4 "
                        "(fields: warp_role, iterations=A:B, sms=0-7, ctas=0,1, step=N, layer=N)")
    p.add_argument("--timeout", action="append", default=[], metavar="KIND=SECONDS",
                   help="one per-task-kind timeout per flag, repeatable: --timeout collect=900 "
                        "(kinds: transform, collect, synthesize, control)")
    p.add_argument("--allow-unsafe-flags", action="store_true",
                   help="build with compiler flags from argus_program.json outside the allow-list (-ccbin, "
                        "-Xcompiler, ...): the program directory is trusted as code (docs/programs-security.md)")


def program_from_args(args):
    """The program the command line names, loaded with the flag policy it asks for."""
    from ..program import load_program

    return load_program(args.program, allow_unsafe_flags=args.allow_unsafe_flags)


def parse_timeouts(items: list[str]) -> dict:
    kinds = ("transform", "collect", "synthesize", "control")
    out = {}
    for item in items:
        kind, sep, value = item.partition("=")
        if not sep or kind not in kinds:
            raise ArgusInputError(f"bad timeout {item!r}: use KIND=SECONDS with KIND one of {', '.join(kinds)}")
        try:
            out[kind] = float(value)
        except ValueError:
            raise ArgusInputError(f"bad timeout {item!r}: {value!r} is not a number of seconds") from None
        if not out[kind] > 0:  # NaN too
            raise ArgusInputError(f"bad timeout {item!r}: seconds must be > 0")
    return out


def register(sub) -> None:
    p = sub.add_parser("plan", help="plan a region query and print its task DAG")
    add_query_arguments(p)
    p.add_argument("--format", choices=("text", "dot", "json"), default="text")
    add_workspace(p, "plan against this existing workspace: finished runs that cover a request are reused")
    p.add_argument("-o", "--output", default=None, metavar="FILE", help="write the --format view to FILE, not stdout")
    json_add_argument(p, "the plan descriptor (what --format json prints)")
    p.set_defaults(func=run, input_errors=(ValueError, KeyError))  # unknown signal: KeyError listing the valid


def plan_from_args(args):
    """(the plan, the program it plans) the command line asks for."""
    from ..query import make_plan
    from ..scope import Scope

    scope = Scope.parse(args.scope)
    if workspace_path(args):
        from .workspace import open_existing

        with open_existing(workspace_path(args)) as ws:  # planning only reads it
            program = program_from_args(args)
            return make_plan(program, args.region, args.signals, scope, workspace=ws,
                             timeouts=parse_timeouts(args.timeout)), program
    program = program_from_args(args)
    return make_plan(program, args.region, args.signals, scope, timeouts=parse_timeouts(args.timeout)), program


def check_compiles(program) -> None:
    """:func:`argus_rt.query.check_compiles`, the one compile check of the commands and the MCP tools
    (imported on use: importing argus_rt.query at start-up would slow every command)."""
    from ..query import check_compiles as shared_check

    shared_check(program)


def run(args) -> int:
    view_stream = human_stream(args)  # refuses two outputs on stdout before any work
    plan, program = plan_from_args(args)
    check_compiles(program)
    text = {"text": to_text, "dot": to_dot, "json": Plan.to_json}[args.format](plan)
    if args.output:
        write_text(args.output, text)
    else:
        print(text, file=view_stream)
    if args.json_out:
        write_json(args.json_out, plan.to_dict())
    return 0


def to_text(plan: Plan) -> str:
    q = plan.query
    lines = [f"plan for {q['program_name']} ({q['program']}) region={q['region'] or '(all)'} "
             f"signals={','.join(q['signals'])} scope={q['scope'] or 'all'}",
             f"{len(plan.tasks)} tasks: " + ", ".join(f"{plan.count(k)} {k}" for k in
                                                      ("transform", "collect", "synthesize", "control")), ""]
    for t in topological_order(plan.tasks.values()):
        deps = f"  <- {', '.join(t.deps)}" if t.deps else ""
        effects = f"  effects={','.join(t.effects)}" if t.effects else ""
        lines.append(f"{t.id}  {t.describe()}{effects}{deps}")
    lines.append("")
    lines.append("collection runs (partitioned by effects):")
    for i, run in enumerate(plan.runs, 1):
        reused = "  (reused: an earlier run covers it)" if run.get("reused") else ""
        lines.append(f"  run {i}: {run['collect']}  {' + '.join(run['requests'])}{reused}")
        for why in run["why_separate"]:
            lines.append(f"      {why}")
    for s, tid in plan.targets.items():
        lines.append(f"signal {s} <- {tid}")
    return "\n".join(lines)


def _dot_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def to_dot(plan: Plan) -> str:
    lines = ["digraph argus_plan {", "  rankdir=LR;", "  node [fontsize=10];"]
    for t in plan.tasks.values():
        label = f"{t.kind}: {t.op}\n{t.label or t.program}"
        if t.region:
            label += f"\nregion {t.region}"
        lines.append(f"  {_dot_quote(t.id)} [shape={_KIND_SHAPE[t.kind]}, label={_dot_quote(label)}];")
    for t in plan.tasks.values():
        for d in t.deps:
            lines.append(f"  {_dot_quote(d)} -> {_dot_quote(t.id)};")
    lines.append("}")
    return "\n".join(lines)
