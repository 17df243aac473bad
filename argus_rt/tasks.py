"""Typed plan tasks and the versioned JSON runtime descriptor.

Four kinds of task (``Task.kind``), all carrying the same explicit bindings:

``transform``   artifact -> artifact (make a program variant, insert a probe, compile); CPU pool
``collect``     run a program variant on one backend -> evidence; a device worker process
``synthesize``  parse and join evidence -> facts; CPU pool
``control``     discovery; its outputs may add branches to the DAG at run time; CPU pool

Fields every task has: ``op`` (handler name: a transform, a backend, a synthesis rule or a control
handler), ``program`` (id of the input program version), ``region`` (qualified name or ``None``
for a whole-program collection), ``scope`` (dict of :class:`argus_rt.scope.Scope`), ``config``
(backend / handler configuration), ``deps`` (task ids), ``sampling`` (sampling policy),
``outputs`` (names it publishes), ``effects`` (collection effects; see
:data:`argus_rt.backends.base.EFFECTS`), ``device`` (``"cpu"`` or ``"gpu"``), ``timeout_s``.

A task's ``id`` is a content hash of everything that determines its outputs (its dependencies'
ids included, so ids chain like a Merkle tree); identical tasks get identical ids, which is how
the planner deduplicates and how the workspace recognises results it already has.

:class:`Plan` is the runtime descriptor: ``{"argus_plan_version": 1, "query", "programs",
"tasks", "targets", "runs"}``; ``Plan.from_json(plan.to_json()) == plan``.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

PLAN_VERSION = 1
TASK_KINDS = ("transform", "collect", "synthesize", "control")
DEFAULT_SAMPLING = {"warmup": 1, "repeats": 1}
# per task kind; the planner and the run-time expanders both set them
DEFAULT_TIMEOUTS_S = {"transform": 900.0, "collect": 600.0, "synthesize": 300.0, "control": 900.0}
_SAMPLING_KEYS = ("warmup", "repeats", "launches", "trial")
_ID_PREFIX = {"transform": "t", "collect": "c", "synthesize": "s", "control": "x"}


class PlanError(ValueError):
    """A malformed task or plan (unknown kind, dangling dependency, cycle, bad version)."""


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def check_sampling(sampling: dict) -> dict:
    """Validate a sampling policy: ``warmup`` launches (int >= 0), ``repeats`` (int >= 1),
    optional ``launches`` (list of launch indices to record), optional ``trial`` (int >= 0): the
    index of a separate collection of otherwise identical content (``argus compare``'s repeats).
    ``trial`` is part of every task's id, so trial 3 never reuses trial 2's evidence; trial 0 is
    the default and is dropped, so a plain query's runs are trial 0."""
    unknown = set(sampling) - set(_SAMPLING_KEYS)
    if unknown:
        raise PlanError(f"unknown sampling key(s) {sorted(unknown)}; valid: {', '.join(_SAMPLING_KEYS)}")
    out = dict(DEFAULT_SAMPLING)
    out.update(sampling)
    if not isinstance(out["warmup"], int) or out["warmup"] < 0:
        raise PlanError(f"sampling 'warmup' must be an int >= 0, got {out['warmup']!r}")
    if not isinstance(out["repeats"], int) or out["repeats"] < 1:
        raise PlanError(f"sampling 'repeats' must be an int >= 1, got {out['repeats']!r}")
    if "trial" in out:
        if not isinstance(out["trial"], int) or isinstance(out["trial"], bool) or out["trial"] < 0:
            raise PlanError(f"sampling 'trial' must be an int >= 0, got {out['trial']!r}")
        if out["trial"] == 0:
            del out["trial"]
    return out


@dataclass(frozen=True)
class Task:
    kind: str
    op: str
    program: str
    region: str | None = None
    scope: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    deps: tuple[str, ...] = ()
    sampling: dict = field(default_factory=lambda: dict(DEFAULT_SAMPLING))
    outputs: tuple[str, ...] = ()
    effects: tuple[str, ...] = ()
    device: str = "cpu"
    timeout_s: float | None = None
    label: str = ""  # human description; not part of the id
    requests: tuple[str, ...] = ()  # collect: the recipe requests merged into this run; not part of the id
    replica: int = 0  # a second, separate run of otherwise identical content (the planner split them)

    def __post_init__(self) -> None:
        if self.kind not in TASK_KINDS:
            raise PlanError(f"unknown task kind {self.kind!r}; valid: {', '.join(TASK_KINDS)}")
        if self.device not in ("cpu", "gpu"):
            raise PlanError(f"unknown task device {self.device!r}; valid: cpu, gpu")
        if self.device == "gpu" and self.kind != "collect":
            raise PlanError(f"only collect tasks run on a GPU worker, not {self.kind!r} task {self.op!r}")
        object.__setattr__(self, "deps", tuple(sorted(set(self.deps))))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "effects", tuple(sorted(set(self.effects))))
        object.__setattr__(self, "_id", self._compute_id())

    def _compute_id(self) -> str:
        ident = {
            "kind": self.kind, "op": self.op, "program": self.program, "region": self.region,
            "scope": self.scope, "config": self.config, "deps": list(self.deps), "sampling": self.sampling,
            "outputs": list(self.outputs), "effects": list(self.effects), "device": self.device,
        }
        if self.replica:
            ident["replica"] = self.replica
        return f"{_ID_PREFIX[self.kind]}-" + hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:20]

    @property
    def id(self) -> str:
        return self._id  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and self.to_dict() == other.to_dict()

    def to_dict(self) -> dict:
        return {
            "id": self.id, "kind": self.kind, "op": self.op, "program": self.program, "region": self.region,
            "scope": self.scope, "config": self.config, "deps": list(self.deps), "sampling": self.sampling,
            "outputs": list(self.outputs), "effects": list(self.effects), "device": self.device,
            "timeout_s": self.timeout_s, "label": self.label, "requests": list(self.requests),
            "replica": self.replica,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Task":
        task = cls(kind=data["kind"], op=data["op"], program=data["program"], region=data.get("region"),
                   scope=data.get("scope", {}), config=data.get("config", {}), deps=tuple(data.get("deps", ())),
                   sampling=data.get("sampling", dict(DEFAULT_SAMPLING)), outputs=tuple(data.get("outputs", ())),
                   effects=tuple(data.get("effects", ())), device=data.get("device", "cpu"),
                   timeout_s=data.get("timeout_s"), label=data.get("label", ""),
                   requests=tuple(data.get("requests", ())), replica=data.get("replica", 0))
        if "id" in data and data["id"] != task.id:
            raise PlanError(f"task record {data['id']!r} does not hash to its id ({task.id}); it was edited")
        return task

    def name(self) -> str:
        """Id and label: how errors name a task (``s-1a2b... (latency)``)."""
        return f"{self.id} ({self.label or self.kind + ':' + self.op})"

    def describe(self) -> str:
        where = f" region={self.region}" if self.region else ""
        scope = f" scope={canonical_json(self.scope)}" if self.scope else ""
        return f"{self.kind}:{self.op} [{self.label or self.program}]{where}{scope}"


@dataclass
class Plan:
    """A DAG of tasks plus the program versions they reference; JSON-serialisable both ways."""

    query: dict
    programs: dict[str, dict]  # program id -> ProgramVersion.to_dict()
    tasks: dict[str, Task]  # id -> task, in topological order
    targets: dict[str, str]  # signal -> id of the synthesize task that answers it
    runs: list[dict] = field(default_factory=list)  # how collect requests were partitioned, and why

    def validate(self) -> None:
        for task in self.tasks.values():
            for dep in task.deps:
                if dep not in self.tasks:
                    raise PlanError(f"task {task.id} ({task.describe()}) depends on unknown task {dep}")
            if task.program not in self.programs:
                raise PlanError(f"task {task.id} reads unknown program version {task.program}")
        for signal, tid in self.targets.items():
            if tid not in self.tasks:
                raise PlanError(f"target of signal {signal!r} is unknown task {tid}")
        topological_order(self.tasks.values())

    def to_dict(self) -> dict:
        return {"argus_plan_version": PLAN_VERSION, "query": self.query, "programs": self.programs,
                "tasks": [t.to_dict() for t in self.tasks.values()], "targets": self.targets,
                "runs": self.runs}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        version = data.get("argus_plan_version") if isinstance(data, dict) else None
        if version != PLAN_VERSION:
            raise PlanError(f"unsupported plan descriptor version {version!r}; this Argus reads {PLAN_VERSION}")
        tasks = [Task.from_dict(t) for t in data["tasks"]]
        plan = cls(query=data["query"], programs=data["programs"], tasks={t.id: t for t in tasks},
                   targets=data["targets"], runs=data.get("runs", []))
        plan.validate()
        return plan

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        return cls.from_dict(json.loads(text))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self.to_dict() == other.to_dict()

    def count(self, kind: str) -> int:
        return sum(1 for t in self.tasks.values() if t.kind == kind)

    def program_version(self, pid: str):
        from .program import ProgramVersion

        return ProgramVersion.from_dict(self.programs[pid])


def topological_order(tasks: Iterable[Task]) -> list[Task]:
    """Tasks ordered so every dependency comes first; raises :class:`PlanError` on a cycle."""
    by_id = {t.id: t for t in tasks}
    indegree = {tid: sum(1 for d in t.deps if d in by_id) for tid, t in by_id.items()}
    users: dict[str, list[str]] = {tid: [] for tid in by_id}
    for t in by_id.values():
        for d in t.deps:
            if d in by_id:
                users[d].append(t.id)
    ready = sorted(tid for tid, n in indegree.items() if n == 0)
    order: list[Task] = []
    while ready:
        tid = ready.pop()
        order.append(by_id[tid])
        for u in users[tid]:
            indegree[u] -= 1
            if indegree[u] == 0:
                ready.append(u)
    if len(order) != len(by_id):
        stuck = {tid: [d for d in by_id[tid].deps if d in by_id] for tid, n in indegree.items() if n > 0}
        cycle = find_cycle(stuck)
        raise PlanError("task graph has a dependency cycle: " + " -> ".join(by_id[t].name() for t in cycle))
    return order


def find_cycle(deps: dict[str, list[str]]) -> list[str]:
    """One dependency cycle of ``deps`` (task id -> dependency ids) as ``[a, b, ..., a]``; ``[]`` if none.

    Iterative depth-first search: a plan of many thousand tasks must not hit the recursion limit.
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in sorted(deps):
        if state.get(root):
            continue
        path, todo = [root], [iter(sorted(deps.get(root, ())))]
        state[root] = 1
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                todo.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt) and nxt in deps:
                state[nxt] = 1
                path.append(nxt)
                todo.append(iter(sorted(deps[nxt])))
    return []
