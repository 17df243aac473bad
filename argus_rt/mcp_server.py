"""Argus's region queries as Model Context Protocol tools, for agents (``argus mcp``).

Built on the official ``mcp`` SDK (``pip install "argus-rt[mcp]"``). Tools:

* ``list_programs``: the shipped examples and the program versions in the workspace;
* ``list_regions(program)``: the region tree (qualified names, stable IDs, parents), the scopes each
  signal accepts, and the program's warp roles;
* ``plan(program, region, signals, scope)``: the task DAG in brief (tasks per kind, collection runs
  and what shares them), without running anything;
* ``query(program, region, signals, scope, detail)``: plan, run (reusing the workspace) and report.
  ``detail="summary"`` (default) keeps the answer small for a context window (see
  :func:`summarise_report`); ``"full"`` returns the whole versioned report;
* ``discover(program, region)``: the async operation sites of a kernel region, from its kind's
  ``discover_async_sites`` hook (:mod:`argus_rt.kinds.registry`; today Triton's);
* ``fork(program, edits, launch)``: a new version from file edits and launch changes, linked to its
  parent (:mod:`argus_rt.program_fork`);
* ``history(program)``: the versions of that program in the workspace and the signals already
  answered for each (a repeated query is served from the workspace).
* ``compare(version_a, version_b, region, signals, repeats, scope, detail)``: both versions queried
  ``repeats`` times (separate collections, reused from the workspace), per region and metric each
  one's median and spread, the difference, and whether it exceeds run-to-run noise
  (:mod:`argus_rt.compare` states the rule); rows of incompatible versions say why instead.

Resources: ``argus://schemas/report`` (the report's JSON Schema) and ``argus://recipes`` (how each
signal is obtained). A ``program`` argument is a program directory or ``argus_program.json`` path,
the name of a shipped example (``cuda``, ``triton``, ...), or a version id of the workspace
(``pv-...``). A bad argument comes back as a tool error naming the value and what is valid.
``plan``, ``query`` and ``compare`` first check that the program compiles, as the CLI does
(:func:`argus_rt.query.check_compiles`): a compile error is a tool error naming the program and the
compiler's message, and nothing runs.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

from . import __version__
from .engines.shared import SharedEngine
from .errors import ArgusInputError

SUMMARY_CHARS = 12_000  # ~3k tokens of JSON: a summary answer stays under about 4k tokens
LATENCY_METRICS = ("count", "mean", "p50", "p99")
DETAILS = ("summary", "full")


class McpUnavailableError(ArgusInputError):
    """The ``mcp`` package is not installed."""


def _load_mcp():
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "mcp":
            raise McpUnavailableError('argus mcp needs the MCP SDK: pip install "argus-rt[mcp]" (mcp >= 2.3)') from None
        raise
    return MCPServer, ToolError


def resolve_program(ref: str, workspace_dir: Path):
    """The :class:`ProgramVersion` a tool's ``program`` argument names (see the module docstring)."""
    from .compare import resolve_version

    return resolve_version(ref, workspace_dir, noun="program")


def summarise_report(doc: dict, budget_chars: int = SUMMARY_CHARS) -> dict:
    """A report small enough for a context window: per region, latency's count/mean/p50/p99 and the
    largest other values of each signal, each with its qualification; the rest is counted in
    ``omitted``. Values are cut per (signal, region) from the smallest until the JSON fits
    ``budget_chars``; ``unanswered`` and the query are always kept whole."""
    def brief(v: dict) -> dict:
        out = {"signal": v["signal"], "region": v["region"], "metric": v["metric"], "value": v["value"],
               "unit": v.get("unit"), "qualification": v["qualification"]}
        if v.get("ambiguity"):
            out["ambiguity"] = v["ambiguity"]
        return out

    groups: dict = {}
    for v in doc["values"]:
        if v["signal"] == "latency" and v["metric"] not in LATENCY_METRICS:
            continue
        if "(inclusive)" in str(v["metric"]):
            continue
        groups.setdefault((v["signal"], v["region"] or ""), []).append(v)
    for key in groups:  # the largest values first; latency keeps its fixed order
        if key[0] != "latency":
            groups[key].sort(key=lambda v: -abs(v["value"] or 0))
    keep = max((len(g) for g in groups.values()), default=0)
    while True:
        values = [brief(v) for _, g in sorted(groups.items()) for v in g[:keep]]
        out = {"argus_report_version": doc["argus_report_version"], "detail": "summary", "query": doc["query"],
               "unanswered": doc["unanswered"], "values": values,
               "omitted": len(doc["values"]) - len(values),
               "collect_runs": doc.get("execution", {}).get("collect_runs")}
        if keep <= 1 or len(json.dumps(out)) <= budget_chars:
            return out
        keep = max(1, keep // 2)


def program_history(workspace_dir: Path, name: str) -> dict:
    """Versions of program ``name`` in the workspace (oldest first), each with the signals that
    finished collections on its variants requested."""
    from .workspace import Workspace

    if not workspace_dir.is_dir():
        return {"program": name, "versions": []}
    with Workspace(workspace_dir) as ws:
        programs = ws.programs()
        versions = [r for r in programs if r["name"] == name and r["variant"] in (None, "base")]
        base_of = {r["id"]: (r["base"] or r["id"]) for r in programs}
        answered: dict[str, set] = {}
        collected = {(t["op"], t["program"]) for t in ws.tasks()
                     if t["kind"] == "collect" and t["status"] == "done" and t["program"] in base_of}
        for op, program in collected:  # one look-up per (op, variant), each giving all its finished runs
            for task in ws.done_tasks("collect", op, program):
                answered.setdefault(base_of[program], set()).update(r.split(":")[0] for r in task.requests)
    return {"program": name, "versions": [{"id": v["id"], "parent": v["parent"], "created": v["created"],
                                           "answered": sorted(answered.get(v["id"], ()))} for v in versions]}


def plan_brief(plan) -> dict:
    kinds: dict[str, int] = {}
    for task in plan.tasks.values():
        kinds[task.kind] = kinds.get(task.kind, 0) + 1
    return {"query": plan.query, "tasks": kinds, "targets": dict(plan.targets),
            "runs": [{"requests": r["requests"], "effects": r["effects"], "reused": bool(r.get("reused"))}
                     for r in plan.runs]}


def async_sites(kind, program, region: str | None) -> dict:
    """The ``argus.async_sites/1`` document of ``region`` of ``program``, from its kind's
    ``discover_async_sites`` hook (a kind without one: the registry's one-line error naming the kinds
    that have it). The files the hook writes beside it (Triton: the TTGIR it read) are not kept."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="argus-discover-") as outdir:
        doc, _files = kind.call("discover_async_sites", program, region, Path(outdir))
    return doc


def import_extensions(modules) -> None:
    """Import the modules that register a user's own recipes, backends and handlers."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ArgusInputError(f"cannot import module {name!r} (--import): {exc}") from None


def build_server(workspace_dir: str | Path | None = None, imports=()):
    """The MCP server; its queries use (and reuse) the workspace at ``workspace_dir``. ``imports``:
    modules to import first (they register recipes, backends or handlers of the user's own)."""
    from .query import default_workspace

    MCPServer, ToolError = _load_mcp()
    import_extensions(imports)
    workspace_dir = Path(workspace_dir) if workspace_dir else default_workspace()
    # One engine for every query and compare of this server: its workers start once (argus mcp closes it).
    engine = SharedEngine(workspace_dir)
    server = MCPServer(name="argus", version=__version__,
                       instructions="Region-level measurements of GPU kernels. list_programs, then list_regions; "
                                    "query answers signals per region with each value's qualification "
                                    "(observed / attributed / derived).")

    def tool(fn):
        """Register ``fn``; bad input becomes a tool error with the one-line message."""
        from .errors import input_error_classes, one_line

        @functools.wraps(fn)
        async def wrapped(*args, **kwargs):
            try:
                return await fn(*args, **kwargs)
            except Exception as exc:
                if isinstance(exc, input_error_classes()):
                    raise ToolError(one_line(exc)) from None
                raise
        return server.tool()(wrapped)

    async def in_thread(fn, *args):
        import anyio

        return await anyio.to_thread.run_sync(functools.partial(fn, *args))

    @tool
    async def list_programs() -> dict:
        """The shipped example programs and the program versions already in the workspace."""
        from .program import load_program
        from .resources import examples_dir

        examples = []
        for d in sorted(examples_dir().iterdir()):
            if (d / "argus_program.json").is_file():
                p = load_program(d)
                examples.append({"program": d.name, "name": p.name, "kind": p.kind, "id": p.id})
        versions = []
        if workspace_dir.is_dir():  # listing never creates a workspace
            from .workspace import Workspace

            with Workspace(workspace_dir) as ws:
                versions = [{k: r[k] for k in ("id", "name", "variant", "parent")} for r in ws.programs()
                            if r["variant"] in (None, "base")]
        return {"examples": examples, "workspace": str(workspace_dir), "versions": versions}

    @tool
    async def list_regions(program: str) -> dict:
        """The program's region tree (qualified names, IDs, parents), each signal's accepted scope
        fields, and its warp roles."""
        from .recipes import get_recipe, signals_for

        pv = resolve_program(program, workspace_dir)
        regions = [{"name": r.name, "id": f"0x{r.id:08x}", "parent": r.parent} for r in pv.regions]
        scopes = {s: sorted(get_recipe(s).scope_fields) for s in signals_for(pv.kind)}
        return {"program": pv.name, "id": pv.id, "kind": pv.kind, "regions": regions, "signal_scopes": scopes,
                "warp_roles": pv.warp_roles}

    @tool
    async def plan(program: str, region: str | None = None, signals: list[str] | None = None,
                   scope: dict | None = None) -> dict:
        """Plan a query without running it: tasks per kind, collection runs and what each serves."""
        from .query import check_compiles, make_plan

        pv = resolve_program(program, workspace_dir)
        planned = await in_thread(lambda: make_plan(pv, region, signals or ["latency"], scope))
        await in_thread(check_compiles, pv)  # as `argus plan`
        return plan_brief(planned)

    @tool
    async def query(program: str, region: str | None = None, signals: list[str] | None = None,
                    scope: dict | None = None, detail: str = "summary") -> dict:
        """Answer signals for a region (plan, run, reuse the workspace). detail: "summary" (small:
        top values per region with their qualification) or "full" (the whole versioned report)."""
        from .query import check_compiles
        from .query import query as run_query

        if detail not in DETAILS:
            raise ArgusInputError(f"detail {detail!r} unknown; valid: {', '.join(DETAILS)}")
        pv = resolve_program(program, workspace_dir)
        await in_thread(check_compiles, pv)  # as `argus query`: a compile error is the tool's error, before any run
        report = await in_thread(lambda: engine.run(
            lambda rt: run_query(pv, region, signals or ["latency"], scope, runtime=rt)))
        doc = report.to_dict()
        return doc if detail == "full" else summarise_report(doc)

    @tool
    async def discover(program: str, region: str | None = None) -> dict:
        """The async operation sites (TMA, WGMMA, cp.async) of a kernel region, with the iterations
        each can be probed at (programs of a kind with async-site discovery: Triton's)."""
        from .kinds.registry import get_kind

        pv = resolve_program(program, workspace_dir)
        return await in_thread(async_sites, get_kind(pv.kind), pv, region)

    @tool
    async def fork(program: str, edits: dict[str, str] | None = None, launch: dict | None = None) -> dict:
        """A new version of the program: files replaced ({relative path: new text}, e.g. the kernel
        source or Triton module) and/or launch keys set (num_warps, num_stages, constexprs, config).
        It is linked to its parent and can be queried by its id at once."""
        from .program_fork import fork_program

        pv = resolve_program(program, workspace_dir)
        spec = Path(program).name if Path(program).is_file() else None
        child = await in_thread(lambda: fork_program(pv, workspace_dir, edits=edits, launch=launch, spec_name=spec))
        return {"id": child.id, "parent": child.parent, "name": child.name, "root": child.root,
                "launch": child.launch}

    @tool
    async def history(program: str) -> dict:
        """The program's versions in the workspace and, per version, the signals whose evidence the
        workspace already holds (asking again reuses it)."""
        pv = resolve_program(program, workspace_dir)
        return program_history(workspace_dir, pv.name)

    from .compare import DEFAULT_REPEATS

    @tool
    async def compare(version_a: str, version_b: str, region: str | None = None, signals: list[str] | None = None,
                      repeats: int = DEFAULT_REPEATS, scope: dict | None = None, detail: str = "summary") -> dict:
        """Compare two program versions (paths, example names or pv- ids), each queried `repeats` times
        as separate collections: per region and metric, each version's median [min, max], the
        difference B - A and ratio, and a verdict. "differs" only if the 95% percentile-bootstrap
        interval of median(B) - median(A) over per-repeat values excludes 0, else "within noise";
        under 3 repeats "insufficient repeats"; "incompatible: <why>" where the versions' regions or
        qualifications differ. detail: "summary" (small) or "full" (per-repeat values, collections)."""
        from .compare import check_repeats, resolve_version
        from .compare import compare as run_compare
        from .query import check_compiles

        if detail not in DETAILS:
            raise ArgusInputError(f"detail {detail!r} unknown; valid: {', '.join(DETAILS)}")
        check_repeats(repeats)
        versions = [resolve_version(v, workspace_dir) for v in (version_a, version_b)]
        for pv in versions:  # as `argus compare`
            await in_thread(check_compiles, pv)
        result = await in_thread(lambda: engine.run(
            lambda rt: run_compare(*versions, region, signals or ["latency"], scope, repeats=repeats, runtime=rt)))
        return result.to_dict() if detail == "full" else result.summary()

    @server.resource("argus://schemas/report", mime_type="application/json")
    def report_schema() -> str:
        """The JSON Schema of the versioned report that query returns (detail="full")."""
        from .schema_check import load_schema

        return json.dumps(load_schema("report"))

    @server.resource("argus://recipes", mime_type="application/json")
    def recipe_catalogue() -> str:
        """Every public signal: unit, qualification, the evidence behind it and the scopes it takes."""
        from .recipes import recipes

        return json.dumps({name: {"unit": r.unit, "qualification": r.qualification, "description": r.description,
                                  "evidence": [e.backend for e in r.evidence], "scope_fields": sorted(r.scope_fields),
                                  "prerequisites": list(r.prerequisites)}
                           for name, r in sorted(recipes().items()) if r.public})

    server.argus_engine = engine  # the caller closes it when the server stops (commands/mcp.py)
    return server
