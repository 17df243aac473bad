"""Recipes: how each signal is obtained. The planner knows recipes, never tools.

A :class:`Recipe` maps one signal (``"latency"``) to:

* ``evidence``: collection requests (:class:`Evidence`): which backend, which program variant,
  which outputs, the backend configuration, the request's collection ``effects``, the effects it
  is ``sensitive_to`` (that would invalidate what it measures), and whether it must be
  ``isolated`` in its own run (a recipe exclusion);
* ``prerequisites``: other recipes (signals or internal analyses such as ``pc_region_map``) whose
  synthesized facts this recipe's synthesis reads; the planner adds them recursively;
  ``capability_prerequisites`` replaces them for the kinds with a capability (a kind that
  ``traces_iteration_waits`` takes its probe reference from those waits, not from region latency);
* ``control`` / ``expander``: an optional discovery Control task and the expander that turns its
  outputs into run-time branches (see ``argus_rt.runtime.handlers``);
* ``scope_fields``: the scope coordinates the evidence retains, i.e. which :class:`Scope` fields a
  query may use with this signal; ``collect_filters``: those applied at collection time (cheaper
  runs, less reuse); the rest are selected during synthesis;
* ``synthesis``: the synthesis rule name (``argus_rt.synthesis``) and the ``qualification`` of the
  values it produces (observed / attributed / derived);
* ``kind_needs`` / ``kinds`` / ``kinds_reason``: which program kinds can give this evidence and why
  only those: ``kind_needs`` names the kind capabilities it needs (:data:`argus_rt.kinds.registry.
  CAPABILITIES`, e.g. ``variant_cubin`` for a map of the marker-only SASS), read from the registry
  when asked, so a kind registered later counts; ``kinds`` (``None``: every kind) names kinds
  outright, for a recipe registered outside Argus. A signal is available for a kind when it and
  all its prerequisites for that kind are (:func:`unsupported_reason`; the planner refuses the
  others). Stand-in programs (kind ``standin``, made by tests that register their own handlers)
  can give every signal.

Registering a new recipe::

    from argus_rt.recipes import Evidence, Recipe, register_recipe
    register_recipe(Recipe(
        signal="occupancy", unit="warps/SM", qualification="observed", synthesis="copy_metric",
        evidence=(Evidence("ncu", outputs=("pc_counters",), variant="marker_only",
                           config={"sections": ["Occupancy"]},
                           effects={"replays_kernel", "exclusive_profiler", "perturbs_timing"}),),
        scope_fields={"step"}, description="achieved occupancy"))

Built-in recipes: ``latency``, ``instruction_mix``, ``barrier_count``, ``stall_reasons``,
``async_completion_latency``, ``system_timeline`` (public) and ``pc_region_map`` (analysis).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .backends.base import EFFECTS
from .errors import ArgusInputError
from .kinds.registry import CAPABILITIES, find_kind, kind_names, kinds_with
from .program import VARIANTS
from .scope import SCOPE_FIELDS

QUALIFICATIONS = ("observed", "attributed", "derived")
# Effects that make a run's timings differ from the reference program's.
TIMING_EFFECTS = frozenset({"perturbs_timing", "forces_completion", "changes_overlap", "replays_kernel",
                            "needs_binary_instrumentation", "serialises_kernels"})
# The reference trace is itself an instrument: writing records perturbs timing by a small, measured
# amount (benchmarks/trace_overhead.py) that latency accepts. It does not accept anything else.
REFERENCE_TRACE_SENSITIVE = TIMING_EFFECTS - {"perturbs_timing"}


class RecipeError(ArgusInputError):
    """A malformed recipe or a recipe graph problem (unknown prerequisite, cycle)."""


class UnknownSignalError(RecipeError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def _frozen(values, valid, what: str) -> frozenset:
    values = frozenset(values)
    bad = values - frozenset(valid)
    if bad:
        raise RecipeError(f"unknown {what} {sorted(bad)}; valid: {', '.join(sorted(valid))}")
    return values


@dataclass(frozen=True)
class Evidence:
    """One collection request of a recipe (several may share a run; see the planner)."""

    backend: str
    outputs: tuple[str, ...]
    variant: str = "traced"
    config: dict = field(default_factory=dict)
    effects: frozenset = frozenset()
    sensitive_to: frozenset = frozenset()
    isolated: bool = False  # recipe exclusion: never share a run with any other request
    device: str = "gpu"

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise RecipeError(f"evidence variant {self.variant!r} unknown; valid: {', '.join(VARIANTS)}")
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "effects", _frozen(self.effects, EFFECTS, "effects"))
        object.__setattr__(self, "sensitive_to", _frozen(self.sensitive_to, EFFECTS, "sensitive_to effects"))
        if not self.outputs:
            raise RecipeError(f"evidence from backend {self.backend!r} names no outputs")


@dataclass(frozen=True)
class Recipe:
    signal: str
    synthesis: str
    qualification: str
    unit: str = ""
    evidence: tuple[Evidence, ...] = ()
    prerequisites: tuple[str, ...] = ()
    # kind capability -> prerequisites for the kinds that have it (the first capability listed wins)
    capability_prerequisites: dict = field(default_factory=dict)
    control: str | None = None
    expander: str | None = None
    scope_fields: frozenset = frozenset(SCOPE_FIELDS)
    collect_filters: frozenset = frozenset()
    synthesis_config: dict = field(default_factory=dict)
    description: str = ""
    public: bool = True  # False: an internal analysis (still plannable as a prerequisite)
    kind_needs: frozenset = frozenset()  # kind capabilities the evidence needs (argus_rt.kinds.registry)
    kinds: frozenset | None = None  # program kinds named outright (None: every kind that has kind_needs)
    kinds_reason: str = ""  # why only those kinds, e.g. "TTGIR discovery"

    def __post_init__(self) -> None:
        if not self.signal.replace("_", "").isalnum():
            raise RecipeError(f"signal name {self.signal!r} must be letters, digits and '_'")
        if self.qualification not in QUALIFICATIONS:
            raise RecipeError(f"qualification {self.qualification!r} unknown; valid: {', '.join(QUALIFICATIONS)}")
        object.__setattr__(self, "evidence", tuple(self.evidence))
        object.__setattr__(self, "prerequisites", tuple(self.prerequisites))
        _frozen(self.capability_prerequisites, CAPABILITIES, "kind capabilities")
        object.__setattr__(self, "capability_prerequisites",
                           {k: tuple(v) for k, v in self.capability_prerequisites.items()})
        object.__setattr__(self, "kind_needs", _frozen(self.kind_needs, CAPABILITIES, "kind capabilities"))
        object.__setattr__(self, "scope_fields", _frozen(self.scope_fields, SCOPE_FIELDS, "scope fields"))
        object.__setattr__(self, "collect_filters", _frozen(self.collect_filters, self.scope_fields,
                                                            "collect filters (must be retained scope fields)"))
        if self.expander and not self.control:
            raise RecipeError(f"recipe {self.signal!r} names an expander but no control task")
        if self.kinds is not None:
            object.__setattr__(self, "kinds", _frozen(self.kinds, kind_names(), "program kinds"))

    def kind_set(self) -> frozenset | None:
        """The program kinds that can give this evidence (None: every kind)."""
        if not self.kind_needs:
            return self.kinds
        capable = kinds_with(self.kind_needs)
        return capable if self.kinds is None else capable & self.kinds

    def supports(self, kind: str | None) -> bool:
        """Whether programs of ``kind`` can give this recipe's own evidence (prerequisites aside)."""
        kinds = self.kind_set()
        return kinds is None or kind is None or kind == "standin" or kind in kinds

    def missing_capabilities(self, kind: str | None) -> list[str]:
        """The capabilities in ``kind_needs`` that ``kind`` lacks (all of them for an unregistered kind)."""
        found = find_kind(kind)
        return sorted(c for c in self.kind_needs if found is None or not found.has(c))

    def prerequisites_for(self, kind: str | None) -> tuple[str, ...]:
        """Prerequisites for a program of ``kind`` (those of the first of its capabilities listed in
        ``capability_prerequisites``, else ``prerequisites``)."""
        found = find_kind(kind)
        if found is not None:
            for capability, prerequisites in self.capability_prerequisites.items():
                if found.has(capability):
                    return prerequisites
        return self.prerequisites


_RECIPES: dict[str, Recipe] = {}


def register_recipe(recipe: Recipe, *, replace: bool = False) -> Recipe:
    """Add ``recipe`` to the catalog; ``replace=True`` to override one with the same signal."""
    if recipe.signal in _RECIPES and not replace:
        raise RecipeError(f"a recipe for {recipe.signal!r} is already registered; pass replace=True")
    _RECIPES[recipe.signal] = recipe
    return recipe


def unregister_recipe(signal: str) -> None:
    _RECIPES.pop(signal, None)


def get_recipe(signal: str) -> Recipe:
    recipe = _RECIPES.get(signal)
    if recipe is None:
        raise UnknownSignalError(f"unknown signal {signal!r}; valid signals: {', '.join(signals())}")
    return recipe


def signals(include_internal: bool = False) -> list[str]:
    return sorted(s for s, r in _RECIPES.items() if r.public or include_internal)


def recipes() -> dict[str, Recipe]:
    return dict(_RECIPES)


def unsupported_reason(signal: str, kind: str | None) -> str | None:
    """Why programs of ``kind`` cannot give ``signal`` (``"needs a triton program (TTGIR discovery)"``),
    or ``None`` when they can: the signal's recipe and every prerequisite it has for ``kind`` support it."""
    seen: set[str] = set()

    def walk(name: str) -> str | None:
        if name in seen:
            return None
        seen.add(name)
        recipe = get_recipe(name)
        if not recipe.supports(kind):
            missing = recipe.missing_capabilities(kind)
            because = [recipe.kinds_reason] if recipe.kinds_reason else []
            if missing:
                because.append(f"kind {kind} has no {' or '.join(repr(c) for c in missing)}")
            why = f"needs a {' or '.join(sorted(recipe.kind_set())) or 'no'} program"
            why += f" ({'; '.join(because)})" if because else ""
            return why + (f" for its prerequisite {name!r}" if name != signal else "")
        return next((w for w in map(walk, recipe.prerequisites_for(kind)) if w), None)

    return walk(signal)


def signals_for(kind: str | None) -> list[str]:
    """The public signals programs of ``kind`` can give."""
    return [s for s in signals() if unsupported_reason(s, kind) is None]


# ---- built-in catalog -------------------------------------------------------------------------
# Region traces: the CUDA trace adapter (device markers) and the Triton one (TTGIR instrumentation).
_PROFILER = frozenset({"replays_kernel", "exclusive_profiler", "perturbs_timing", "serialises_kernels"})
# PC-keyed counters keep no per-SM/CTA/iteration/launch coordinates and no adapter selects a launch
# yet, so these signals take no scope (asking for one is a planning error, not a silent widening).
_LAUNCH_SCOPE = frozenset()
# The mapping run is an Nsight Compute SourceCounters run of the marker-only build: its per-PC
# counters are the ones the attributed signals read, so they come from that run (stall_reasons adds
# a section to it): one ncu run per query, not one for the map and one for the counters.
_MAP_RUN_COUNTERS = Evidence("pcmap", outputs=("pc_counters",), variant="marker_only", effects=_PROFILER)

register_recipe(Recipe(
    signal="latency", unit="ns", qualification="observed", synthesis="latency",
    description="duration of each region occurrence from device timestamps (reference trace)",
    evidence=(Evidence("trace", outputs=("region_intervals",), variant="traced",
                       effects=frozenset({"perturbs_timing"}), sensitive_to=REFERENCE_TRACE_SENSITIVE),),
    collect_filters=frozenset(), kind_needs={"traced"}, kinds_reason="a region trace of a compiled kernel",
))
register_recipe(Recipe(
    signal="pc_region_map", unit="executions", qualification="observed", synthesis="pc_region_map",
    public=False, description="n(r,p): executions of each PC under each region (mapping run)",
    evidence=(Evidence("pcmap", outputs=("pc_region_counts",), variant="marker_only", effects=_PROFILER),),
    scope_fields=_LAUNCH_SCOPE, collect_filters=_LAUNCH_SCOPE,
    # the mapping run maps the marker-only cubin's SASS and profiles the kind's checked launch of it
    kind_needs={"variant_cubin", "run_once"}, kinds_reason="the SASS and region markers of a compiled kernel",
))
register_recipe(Recipe(
    signal="instruction_mix", unit="instructions", qualification="attributed", synthesis="attributed_metric",
    synthesis_config={"metric": "inst_executed", "group_by": "opcode"},
    description="executed warp instructions per opcode family, attributed to regions through n(r,p)",
    evidence=(_MAP_RUN_COUNTERS,), prerequisites=("pc_region_map",),
    scope_fields=_LAUNCH_SCOPE, collect_filters=_LAUNCH_SCOPE,
))
register_recipe(Recipe(
    signal="barrier_count", unit="instructions", qualification="attributed", synthesis="attributed_metric",
    synthesis_config={"metric": "inst_executed", "opcodes": ["BAR"]},
    description="executed barrier instructions (BAR.*), attributed to regions through n(r,p)",
    evidence=(_MAP_RUN_COUNTERS,), prerequisites=("pc_region_map",),
    scope_fields=_LAUNCH_SCOPE, collect_filters=_LAUNCH_SCOPE,
))
register_recipe(Recipe(
    signal="branch_profile", unit="instructions", qualification="attributed", synthesis="attributed_metric",
    synthesis_config={"metrics": ["branch_inst_executed", "divergent_branches", "thread_inst_executed",
                                  "predicated_off"]},
    description="executed branch instructions and divergent branches (warp level), thread instructions executed "
                "and predicated off (thread level), attributed to regions through n(r,p)",
    evidence=(_MAP_RUN_COUNTERS,), prerequisites=("pc_region_map",),
    scope_fields=_LAUNCH_SCOPE, collect_filters=_LAUNCH_SCOPE,
))
register_recipe(Recipe(
    signal="stall_reasons", unit="samples", qualification="attributed", synthesis="attributed_metric",
    synthesis_config={"metric_prefix": "stall:"},
    description="warp-stall samples per reason, attributed to regions through n(r,p)",
    evidence=(Evidence("pcmap", outputs=("pc_counters",), variant="marker_only",
                       config={"sections": ["SourceCounters", "WarpStateStats"]}, effects=_PROFILER),),
    prerequisites=("pc_region_map",),
    scope_fields=_LAUNCH_SCOPE, collect_filters=_LAUNCH_SCOPE,
))
register_recipe(Recipe(
    signal="iteration_waits", unit="ns", qualification="observed", synthesis="iteration_waits", public=False,
    description="per loop iteration, how long the consumer waited for that iteration's async loads in the "
                "traced (unprobed) reference run: the reference side of forced-wait probe joins",
    # isolated: the traced reference is its own TTGIR variant, one launch that serves no other request;
    # merged with latency's region trace ({} + this config = this config) the region trace was lost
    evidence=(Evidence("trace", outputs=("iteration_waits",), variant="traced",
                       config={"reference": "iteration_waits"}, effects=frozenset({"perturbs_timing"}),
                       sensitive_to=REFERENCE_TRACE_SENSITIVE, isolated=True),),
    scope_fields=frozenset({"iterations", "ctas"}),
    kind_needs={"traces_iteration_waits"}, kinds_reason="per-iteration waits traced in TTGIR",
))
register_recipe(Recipe(
    signal="async_completion_latency", unit="ns", qualification="derived", synthesis="async_completion_latency",
    description="issue-to-completion latency of each async operation site and iteration, from forced-wait "
                "probes joined to the reference trace by (op ID, iteration)",
    prerequisites=("latency",), capability_prerequisites={"traces_iteration_waits": ("iteration_waits",)},
    control="async_discovery", expander="forced_wait_probes",
    scope_fields=frozenset({"iterations", "sms", "ctas"}),
    kind_needs={"discover_async_sites", "forced_wait_probe"},
    kinds_reason="TTGIR discovery of async operations and forced-wait probes",
))
register_recipe(Recipe(
    signal="system_timeline", unit="ns", qualification="observed", synthesis="system_timeline",
    description="kernel, copy and communication phases on the host/system timeline",
    evidence=(Evidence("systrace", outputs=("system_timeline",), variant="trace_free",
                       effects=frozenset({"exclusive_profiler"}),
                       sensitive_to=frozenset({"replays_kernel", "needs_binary_instrumentation",
                                               "forces_completion", "serialises_kernels"})),),
    scope_fields=frozenset({"step"}),
))
