"""Planner: turn a query into a measurement-valid DAG of typed tasks.

Steps (:func:`plan_query`):

1. Validate the region (qualified or unique leaf name), the signals and the scope: each signal
   (and its prerequisites) must support the program's kind, i.e. the kind has the capabilities the
   recipes need (:func:`argus_rt.recipes.unsupported_reason`; a refusal is one line naming the signal,
   the kind, what it lacks and the signals it supports),
   each signal's recipe lists the scope fields it retains (asking for another is an error naming
   the valid ones), and a ``warp_role`` must be one the program declares.
2. Close the recipe graph over ``prerequisites`` (depth-first; a cycle is a :class:`RecipeError`
   naming the loop).
3. For each evidence request, add a ``variant`` Transform for the program variant it needs.
4. Partition the requests into runs (:func:`partition_requests`). Two requests share a run only if
   they use the same backend, program variant, collection scope, sampling and device, neither is
   ``isolated``, neither's ``effects`` intersect the other's ``sensitive_to``, and their
   configurations merge. Requests that could share are merged; everything else gets its own run,
   and ``plan.runs`` records why. The result is valid, not minimal: more runs, never wrong ones.
5. Add one Synthesize task per recipe (internal analyses are whole-program so any region reuses
   them) and a Control task for recipes that discover their targets at run time.

Task ids are content hashes, so planning the same query twice gives the same plan and identical
tasks from different signals collapse into one (deduplication).

The ``forced_wait_probes`` expander, which turns a discovery's ``argus.async_sites/1`` output into
one isolated transform -> collect branch per (op, iteration) at run time, is
:mod:`argus_rt.probe_expander` (a runtime handler: the planner stays below the runtime).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .backends.base import ConfigMergeError, merge_configs
from .errors import ArgusInputError
from .program import ProgramVersion
from .recipes import Evidence, Recipe, RecipeError, get_recipe, signals_for, unsupported_reason
from .regions import UnknownRegionError
from .scope import Scope, ScopeError, check_warp_role
from .tasks import DEFAULT_TIMEOUTS_S, Plan, Task, canonical_json, check_sampling, topological_order


class QueryError(ArgusInputError):
    """A query that names an unknown region, signal or scope field."""


class UnsupportedSignalError(QueryError):
    """A signal that programs of this kind cannot give (e.g. TTGIR discovery on a CUDA program)."""


@dataclass
class Request:
    """One evidence request bound to a program variant, waiting to be placed in a run."""

    signal: str
    evidence: Evidence
    program: str  # variant id
    deps: tuple[str, ...]  # the variant transform
    scope: Scope
    sampling: dict

    @property
    def group_key(self) -> str:
        ev = self.evidence
        return canonical_json([ev.backend, self.program, self.scope.to_dict(), self.sampling, ev.device])

    @property
    def name(self) -> str:
        return f"{self.signal}:{self.evidence.backend}"


@dataclass
class Run:
    requests: list[Request] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    why_separate: list[str] = field(default_factory=list)
    # unions over the members, so a candidate is checked against a run in O(1) set operations
    effects: frozenset = frozenset()
    sensitive_to: frozenset = frozenset()
    isolated: bool = False

    def add(self, req: Request, config: dict) -> None:
        self.requests.append(req)
        self.config = config
        self.effects |= req.evidence.effects
        self.sensitive_to |= req.evidence.sensitive_to
        self.isolated |= req.evidence.isolated


def conflict(a: Request, b: Request) -> str | None:
    """Why two requests must not share a run (``None`` when they may)."""
    if a.evidence.isolated or b.evidence.isolated:
        which = a if a.evidence.isolated else b
        return f"{which.name} is isolated by its recipe (own run)"
    hit = a.evidence.effects & b.evidence.sensitive_to
    if hit:
        return f"{a.name} has effect(s) {sorted(hit)} that invalidate {b.name}"
    hit = b.evidence.effects & a.evidence.sensitive_to
    if hit:
        return f"{b.name} has effect(s) {sorted(hit)} that invalidate {a.name}"
    return None


def _run_conflict(req: Request, run: Run) -> str | None:
    ev = req.evidence
    if ev.isolated or run.isolated or ev.effects & run.sensitive_to or run.effects & ev.sensitive_to:
        return next(w for w in (conflict(req, other) for other in run.requests) if w)
    return None


def _rejection(req: Request, run: Run) -> str | None:
    """Why ``run`` cannot take ``req`` (``None``: it can), in the words ``Run.why_separate`` records."""
    why = _run_conflict(req, run)
    if why is not None:
        return why
    try:
        merge_configs([run.config, req.evidence.config])
    except ConfigMergeError as exc:
        return f"configurations do not merge: {exc}"
    return None


_MAX_REASONS = 4  # per run; the count of further rejections is recorded, not each sentence
_LIST = object()  # config token of a list value: lists merge with lists, whatever they hold


def _token(value):
    """What decides whether two values of one config key merge: equal scalars, or two lists."""
    if isinstance(value, (list, tuple)):
        return _LIST
    try:
        hash(value)
    except TypeError:  # a dict value: equal when its JSON is (merge_configs confirms)
        return ("json", canonical_json(value))
    return value


class _OpenRuns:
    """The runs of one group (backend, variant, scope, sampling, device), indexed for first-fit.

    Whether a run takes a request depends only on the run's effects, sensitivities, config keys and
    the tokens of their values, so runs are bucketed by (keys, effects, sensitive_to): effects are
    checked once per bucket, and inside a bucket only the runs whose tokens equal the request's on the
    shared keys are candidates. Placement stays first-fit (lowest run index) without comparing a
    request with every run, which made planning quadratic.
    """

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self._buckets: dict[tuple, dict] = {}  # bucket key -> {key: {token: {run index}}, None: {run index}}
        self._bucket_of: dict[int, tuple] = {}

    def first_fit(self, req: Request) -> int | None:
        ev = req.evidence
        if ev.isolated:
            return None
        best = None
        for (keys, effects, sensitive), bucket in self._buckets.items():
            if ev.effects & sensitive or effects & ev.sensitive_to:
                continue
            shared = [k for k in ev.config if k in keys]
            sets = sorted((bucket[k].get(_token(ev.config[k]), set()) for k in shared), key=len) or [bucket[None]]
            candidates = set(sets[0]).intersection(*sets[1:])
            if best is not None:
                candidates = {i for i in candidates if i < best}
            while candidates:
                index = min(candidates)
                if _rejection(req, self.runs[index]) is None:  # tokens agree; merge_configs has the last word
                    best = index
                    break
                candidates.discard(index)
        return best

    def add_run(self, run: Run) -> None:
        self.runs.append(run)
        self._index(len(self.runs) - 1)

    def place(self, index: int, req: Request) -> None:
        run = self.runs[index]
        run.add(req, merge_configs([run.config, req.evidence.config]))
        self._unindex(index)
        self._index(index)

    def _index(self, index: int) -> None:
        run = self.runs[index]
        if run.isolated:
            return  # takes no other request
        key = (frozenset(run.config), run.effects, run.sensitive_to)
        bucket = self._buckets.setdefault(key, {None: set(), **{k: {} for k in run.config}})
        bucket[None].add(index)
        for k, value in run.config.items():
            bucket[k].setdefault(_token(value), set()).add(index)
        self._bucket_of[index] = key

    def _unindex(self, index: int) -> None:
        key = self._bucket_of.pop(index, None)
        if key is None:
            return
        bucket = self._buckets[key]
        bucket[None].discard(index)
        for k, value in self.runs[index].config.items():
            if k in bucket:
                bucket[k].get(_token(value), set()).discard(index)
        if not bucket[None]:
            del self._buckets[key]


def partition_requests(requests: list[Request]) -> list[Run]:
    """Greedy first-fit placement of requests into effect-compatible runs (deterministic order)."""
    groups: dict[str, _OpenRuns] = {}
    ordered: list[Run] = []
    for req in requests:
        group = groups.setdefault(req.group_key, _OpenRuns())
        index = group.first_fit(req)
        if index is not None:
            group.place(index, req)
            continue
        # every run of the group turned it down: the first few say why, the rest are counted
        reasons = [f"not with run {i + 1} of this backend/variant: {_rejection(req, run)}"
                   for i, run in enumerate(group.runs[:_MAX_REASONS])]
        if len(group.runs) > len(reasons):
            reasons.append(f"... and {len(group.runs) - len(reasons)} more runs of this backend/variant")
        run = Run(why_separate=reasons)
        run.add(req, dict(req.evidence.config))
        group.add_run(run)
        ordered.append(run)
    return ordered


def resolve_recipes(signals: list[str], kind: str | None = None) -> list[Recipe]:
    """Recipes for ``signals`` and all their prerequisites (for programs of ``kind``), prerequisites
    first; cycles raise."""
    order: list[Recipe] = []
    done: set[str] = set()

    def visit(signal: str, stack: list[str]) -> None:
        if signal in done:
            return
        if signal in stack:
            loop = " -> ".join(stack[stack.index(signal):] + [signal])
            raise RecipeError(f"recipe prerequisite cycle: {loop}")
        recipe = get_recipe(signal)
        for pre in recipe.prerequisites_for(kind):
            visit(pre, stack + [signal])
        done.add(signal)
        order.append(recipe)

    for s in signals:
        visit(s, [])
    return order


def covers(run: Task, req: Request) -> bool:
    """Whether a finished collection ``run`` is valid evidence for ``req`` too: same backend, variant,
    collection scope, sampling and device; its outputs and configuration include the request's
    (configurations are additive: a merged run serves each member); it had the request's effects and
    none the request is sensitive to; an isolated request only reuses a run that held one request."""
    ev = req.evidence
    if (run.kind, run.op, run.program, run.device) != ("collect", ev.backend, req.program, ev.device):
        return False
    if run.scope != req.scope.to_dict() or run.sampling != req.sampling or set(ev.outputs) - set(run.outputs):
        return False
    effects = frozenset(run.effects)
    if effects & ev.sensitive_to or ev.effects - effects or (ev.isolated and len(run.requests) != 1):
        return False
    for key, want in ev.config.items():
        if key not in run.config:
            return False
        have = run.config[key]
        if isinstance(want, (list, tuple)):
            if not isinstance(have, list) or not {canonical_json(v) for v in want} <= {canonical_json(v) for v in have}:
                return False
        elif have != want:
            return False
    return True


def plan_query(program: ProgramVersion, region: str | None, signals: list[str], scope: Scope | None = None,
               *, sampling: dict | None = None, timeouts: dict | None = None, existing_runs=None) -> Plan:
    """Plan ``signals`` for ``region`` of ``program`` under ``scope`` (see the module docstring).

    ``existing_runs(backend, program_id) -> [Task]``: finished collections (e.g.
    ``Workspace.done_tasks``); a request that one of them :func:`covers` reuses it instead of
    planning a new run, so a narrower follow-up query needs no new collection.
    """
    scope = scope if scope is not None else Scope()
    if not isinstance(scope, Scope):
        scope = Scope.from_dict(scope)
    sampling = check_sampling(sampling or {})
    timeouts = {**DEFAULT_TIMEOUTS_S, **(timeouts or {})}
    if not signals:
        raise QueryError("a query needs at least one signal")
    region_name = None
    if region is not None:
        try:
            region_name = program.regions[region].name
        except UnknownRegionError as exc:
            raise QueryError(str(exc)) from None
    for s in signals:
        recipe = get_recipe(s)
        why = unsupported_reason(s, program.kind)
        if why:
            raise UnsupportedSignalError(
                f"signal {s!r} {why}; {program.root or program.name!r} is {program.kind}. Signals for "
                f"{program.kind}: {', '.join(signals_for(program.kind)) or 'none'}")
        extra = scope.fields_set() - recipe.scope_fields
        if extra:
            raise ScopeError(f"signal {s!r} cannot be scoped by {sorted(extra)}: its evidence retains only "
                             f"{', '.join(sorted(recipe.scope_fields)) or 'no scope fields'}")
    check_warp_role(scope, program.warp_roles, program.name)
    builder = _PlanBuilder(program, sampling, timeouts)
    synth_of: dict[str, str] = {}
    recipes = resolve_recipes(list(signals), program.kind)
    requests: list[Request] = []
    for recipe in recipes:
        for ev in recipe.evidence:
            requests.append(builder.request(recipe, ev, scope))
    collect_of: dict[int, str] = {}
    reused_runs: dict[str, list[str]] = {}
    fresh = []
    finished: dict[tuple[str, str], list[Task]] = {}  # one workspace look-up per (backend, variant)
    for req in requests:
        old_run = None
        if existing_runs is not None:
            where = (req.evidence.backend, req.program)
            if where not in finished:
                finished[where] = sorted(existing_runs(*where), key=lambda t: t.id)
            old_run = next((t for t in finished[where]
                            if covers(t, req) and all(d in builder.tasks for d in t.deps)), None)
        if old_run is None:
            fresh.append(req)
            continue
        builder.tasks.setdefault(old_run.id, old_run)
        collect_of[id(req)] = old_run.id
        reused_runs.setdefault(old_run.id, []).append(req.name)
    runs = partition_requests(fresh)
    for run in runs:
        task = builder.collect_task(run)
        for req in run.requests:
            collect_of[id(req)] = task.id
    by_recipe: dict[str, list[str]] = {}
    for req in requests:
        by_recipe.setdefault(req.signal, []).append(collect_of[id(req)])
    for recipe in recipes:
        deps = set(by_recipe.get(recipe.signal, [])) | {synth_of[p] for p in recipe.prerequisites_for(program.kind)}
        # internal analyses (the PC-to-region map) are whole-program, so every region's query reuses them
        rregion, rscope = (region_name if recipe.public else None), scope.restrict(recipe.scope_fields)
        if recipe.control:
            control = builder.add(Task(
                kind="control", op=recipe.control, program=builder.base_id, region=rregion, scope=rscope.to_dict(),
                config={"expander": recipe.expander} if recipe.expander else {}, outputs=("async_sites",),
                sampling=sampling, timeout_s=timeouts["control"], label=f"discover for {recipe.signal}"))
            deps.add(control.id)
        synth = builder.add(Task(
            kind="synthesize", op=recipe.synthesis, program=builder.base_id, region=rregion, scope=rscope.to_dict(),
            config={**recipe.synthesis_config, "signal": recipe.signal, "unit": recipe.unit,
                    "qualification": recipe.qualification},
            deps=tuple(deps), outputs=("facts",), sampling=sampling, timeout_s=timeouts["synthesize"],
            label=recipe.signal))
        synth_of[recipe.signal] = synth.id
    plan = Plan(
        query={"program": builder.base_id, "program_name": program.name, "region": region_name,
               "signals": list(signals), "scope": scope.to_dict(), "sampling": sampling},
        programs={pid: pv.to_dict() for pid, pv in builder.programs.items()},
        tasks={t.id: t for t in topological_order(builder.tasks.values())},
        targets={s: synth_of[s] for s in signals},
        runs=[{"collect": collect_of[id(run.requests[0])], "requests": [r.name for r in run.requests],
               "effects": sorted(run.effects), "why_separate": run.why_separate} for run in runs]
        + [{"collect": tid, "requests": names, "effects": list(builder.tasks[tid].effects), "why_separate": [],
            "reused": "an earlier run covers these requests"} for tid, names in reused_runs.items()],
    )
    plan.validate()
    return plan


class _PlanBuilder:
    def __init__(self, program: ProgramVersion, sampling: dict, timeouts: dict) -> None:
        self.base = program
        self.sampling = sampling
        self.timeouts = timeouts
        self.tasks: dict[str, Task] = {}
        self.base_id = program.id  # a ProgramVersion hashes itself on every .id: once per plan
        self.programs: dict[str, ProgramVersion] = {self.base_id: program}
        self._variants: dict[str, tuple[str, tuple[str, ...]]] = {}

    def add(self, task: Task) -> Task:
        return self.tasks.setdefault(task.id, task)  # identical task: keep the first (dedup)

    def variant(self, name: str) -> tuple[str, tuple[str, ...]]:
        if name == "base":
            return self.base_id, ()
        if name not in self._variants:
            pv = self.base.variant_of(name)
            self.programs[pv.id] = pv
            task = self.add(Task(kind="transform", op="variant", program=self.base_id,
                                 config={"variant": name, "expect_program": pv.id}, outputs=("program",),
                                 timeout_s=self.timeouts["transform"], label=f"make {pv.label()}"))
            self._variants[name] = pv.id, (task.id,)
        return self._variants[name]

    def request(self, recipe: Recipe, ev: Evidence, scope: Scope) -> Request:
        pid, deps = self.variant(ev.variant)
        return Request(recipe.signal, ev, pid, deps, scope.restrict(recipe.collect_filters), self.sampling)

    def collect_task(self, run: Run) -> Task:
        first = run.requests[0]
        outputs = sorted({o for r in run.requests for o in r.evidence.outputs})
        replica = 0
        while True:
            task = self._collect(run, first, outputs, replica)
            if task.id not in self.tasks:
                self.tasks[task.id] = task
                return task
            replica += 1  # the partition separated two runs of identical content: keep both

    def _collect(self, run: Run, first: Request, outputs: list[str], replica: int) -> Task:
        return (Task(
            kind="collect", op=first.evidence.backend, program=first.program, region=None,
            scope=first.scope.to_dict(), config=run.config, deps=first.deps, sampling=first.sampling,
            outputs=tuple(outputs), effects=tuple(run.effects), device=first.evidence.device,
            timeout_s=self.timeouts["collect"], requests=tuple(r.name for r in run.requests),
            replica=replica, label=f"{first.evidence.backend} on {self.programs[first.program].label()}"))
