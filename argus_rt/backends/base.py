"""The backend adapter contract: how a Collect task runs one tool and hands back evidence.

A Collect task names one backend (``task.op``). The adapter registered under that name is the
only code that knows the tool (its flags, its output formats, whether it is installed). The
planner never imports an adapter; it only reads recipes. Adapters run inside a device worker
process (see ``argus_rt.runtime.workers``) that already sees exactly one GPU as ``cuda:0``
through ``CUDA_VISIBLE_DEVICES``.

Writing an adapter (this is the whole interface)::

    from argus_rt.backends.base import BackendAdapter, register_backend
    from argus_rt.evidence import PcCounters

    class NcuAdapter(BackendAdapter):
        name = "ncu"                                   # what recipes and tasks call it
        effects = frozenset({"replays_kernel", "exclusive_profiler", "perturbs_timing"})
        outputs = ("pc_counters", "ncu_csv")           # evidence names it can publish

        def available(self):                           # -> (ok, reason when not ok)
            return (shutil.which("ncu") is not None, "ncu is not on PATH")

        def collect(self, ctx):                        # ctx: CollectContext, see below
            csv = ctx.outdir / "raw.csv"
            ...                                        # run the tool, parse, write files
            return {**ctx.publish(PcCounters.from_document(doc)), "ncu_csv": csv}

    register_backend(NcuAdapter())                     # at import time of the module

An adapter may be specific to one program kind (``register_backend(adapter, kind="triton")``):
``get_backend(name, kind)`` prefers the kind-specific adapter and falls back to the generic one, so
``trace`` can mean "region tracing" for CUDA and Triton programs with different code behind it. The
built-in kinds name theirs in the kind registry (:attr:`argus_rt.kinds.registry.Kind.adapters`).

The built-in names ``trace``, ``ncu``, ``pcmap``, ``nvbit``, ``systrace`` are looked up lazily in
``argus_rt.backends.<name>`` the first time they are asked for, so those modules only need to call
:func:`register_backend` at import. Any other module may register more adapters; the registry
remembers the module so that a freshly spawned worker process can import it again.

Rules an adapter keeps:

* Write every output file under ``ctx.outdir`` (a private staging directory) and return the paths.
  The runtime hashes them into the workspace after ``collect`` returns; a killed worker therefore
  leaves nothing visible. Never write into the workspace yourself.
* Declare in ``effects`` everything running the tool does to the program run. Before ``collect``
  the worker checks ``adapter.effects`` is a subset of the task's planned effects and refuses the
  task otherwise (:class:`EffectMismatchError`): a plan must never co-locate what the tool perturbs.
* Raise :class:`BackendUnavailableError` (tool missing, wrong GPU) with the reason; it fails the
  task and its dependents only.
* ``collect_filters``: the scope fields the adapter honours at collection time (``ctx.scope``);
  the worker refuses a task that asks for others, so a scope is never silently ignored.
* ``merge_configs`` says how several requests sharing one run combine (default:
  :func:`merge_configs`, union of lists, equal scalars).

Evidence formats. The columnar ones are typed (:mod:`argus_rt.evidence`, one dataclass each, stored as
``.npy`` columns plus ``meta.json`` by :meth:`CollectContext.publish`; each class documents its fields):
``region_intervals`` (:class:`~argus_rt.evidence.RegionIntervals`, trace and Proton backends),
``pc_counters`` (:class:`~argus_rt.evidence.PcCounters`, ncu and the mapping run), ``op_events``
(:class:`~argus_rt.evidence.OpEvents`, a probe run), ``iteration_waits``
(:class:`~argus_rt.evidence.IterationWaits`, a Triton program's traced reference), ``pc_region_counts``
(:class:`~argus_rt.evidence.PcRegionCounts`, the mapping run and NVBit; inline documents of older
workspaces are read the same) and ``system_timeline`` (:class:`~argus_rt.evidence.SystemTimeline`, systrace).
``async_sites`` (:class:`~argus_rt.evidence.AsyncSites`, a discovery Control task) is typed too, with a
JSON-only store (a few nested sites, no table). PC keys are opaque strings (``"<function>@0x<offset>"``)
that must match the keys of the PC-to-region map of the same program variant. Other outputs such as raw
tool files may be published too and are kept for provenance.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# Effects a collection may have on the program run. Recipes declare them per evidence request and
# which of them would invalidate what the request measures ("sensitive_to").
EFFECTS = frozenset({
    "perturbs_timing",             # the run's timings are not those of the reference program
    "forces_completion",           # a forced wait makes an async operation complete early
    "changes_overlap",             # concurrency between operations differs from the reference
    "replays_kernel",              # the tool replays kernels (several passes, restored memory)
    "exclusive_profiler",          # holds the one CUPTI subscriber a process may have
    "needs_binary_instrumentation",  # SASS rewritten at load time (NVBit)
    "serialises_kernels",          # kernels no longer overlap across streams
})

# Built-in adapters, imported on first use (their modules call register_backend at import).
BUILTIN_BACKEND_MODULES = {
    "trace": "argus_rt.backends.trace",
    "ncu": "argus_rt.backends.ncu",
    "pcmap": "argus_rt.backends.pcmap",
    "nvbit": "argus_rt.backends.nvbit",
    "systrace": "argus_rt.backends.systrace",
}


def _kind_adapter_ref(name: str, kind: str | None) -> str | None:
    """``"module:Class"`` of the adapter the kind registry names for backend ``name`` and program
    ``kind`` (:attr:`argus_rt.kinds.registry.Kind.adapters`), or None."""
    from ..kinds.registry import find_kind

    found = find_kind(kind)
    return found.adapters.get(name) if found is not None else None


def _register_kind_adapter(name: str, kind: str | None) -> None:
    """Register the kind's own adapter for ``name`` on first use (a fresh worker process finds it too)."""
    ref = _kind_adapter_ref(name, kind)
    if ref is not None and (name, kind) not in _ADAPTERS:
        from ..kinds.registry import resolve

        register_backend(resolve(ref)(), kind=kind, replace=True)


class BackendError(RuntimeError):
    """Base class of backend failures; fails the Collect task and its dependents only."""


class UnknownBackendError(BackendError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class BackendUnavailableError(BackendError):
    """The tool is missing or cannot run here (no GPU, wrong architecture, no permissions)."""


class EffectMismatchError(BackendError):
    """The adapter has effects the plan did not declare for this run."""


class ConfigMergeError(BackendError, ValueError):
    """Two requests' configurations cannot share one run."""


@dataclass
class CollectContext:
    """Everything an adapter may use to run one Collect task.

    ``program`` is the :class:`argus_rt.program.ProgramVersion` of the variant to run (its
    ``launch`` dict says how to run it, its ``regions`` the region tree). ``inputs`` maps
    ``"<dep task id>/<output name>"`` and, when unambiguous, the bare ``"<output name>"`` to the
    files of dependency outputs (e.g. a compiled cubin from a Transform task).
    """

    task: Any  # argus_rt.tasks.Task
    program: Any  # argus_rt.program.ProgramVersion
    config: dict
    scope: Any  # argus_rt.scope.Scope: collection-time filters only
    sampling: dict
    inputs: dict[str, Path]
    outdir: Path
    device: str | None  # CUDA_VISIBLE_DEVICES of this worker ("" = no GPU)
    log: Callable[[str], None] = field(default=print)

    def publish(self, evidence) -> dict[str, Path]:
        """Write typed ``evidence`` (an :class:`argus_rt.evidence.Evidence`) under ``<outdir>/<its output
        name>/``: its metadata and one .npy per column; returns every file as its output (``{name: path}``)."""
        return evidence.save(Path(self.outdir) / evidence.OUTPUT)

    def write_json(self, name: str, doc: Any) -> Path:
        """Publish ``doc`` as ``<outdir>/<name>.json``, written whole or not at all; returns the path."""
        from ..fsutil import atomic_write_text

        path = Path(self.outdir) / f"{name}.json"
        atomic_write_text(path, json.dumps(doc) + "\n")
        return path


class BackendAdapter:
    """Base class of backend adapters; subclass and override ``collect`` (see module docstring)."""

    name: str = ""
    effects: frozenset = frozenset()
    outputs: tuple = ()
    needs_gpu: bool = True  # False: a CPU stand-in; it still runs in a device worker process
    # Scope fields the adapter applies while collecting (e.g. {"step"} if it can select launches);
    # a task whose collection scope names any other field is refused rather than silently widened.
    collect_filters: frozenset = frozenset()

    def available(self) -> tuple[bool, str]:
        return True, ""

    def validate_config(self, config: dict) -> None:
        """Raise ``ValueError`` naming the bad key/value and the valid choices."""

    def merge_configs(self, configs: list[dict]) -> dict:
        return merge_configs(configs)

    def effects_for(self, config: dict) -> frozenset:
        """Effects of a run with ``config`` (default: ``effects``); an adapter whose configurations
        differ in what they do to the run (a probe vs. its reference) narrows this per config."""
        return frozenset(self.effects)

    def collect(self, ctx: CollectContext) -> dict[str, Path]:
        raise NotImplementedError(f"backend {self.name!r} does not implement collect()")


def refuse_unknown_keys(config: dict, valid, what: str) -> None:
    """``ValueError`` naming the keys of ``config`` outside ``valid`` and the valid ones (``what``: e.g.
    "ncu config"), the one message every adapter's ``validate_config`` gives for them."""
    bad = sorted(set(config) - set(valid))
    if bad:
        raise ValueError(f"unknown {what} key(s) {bad}; valid: {', '.join(valid)}")


def tool_availability(find) -> tuple[bool, str]:
    """``available()`` of an adapter whose tool ``find()`` locates (raising BackendUnavailableError)."""
    try:
        find()
    except BackendUnavailableError as exc:
        return False, str(exc)
    return True, ""


def merge_configs(configs: list[dict]) -> dict:
    """Merge request configurations for one run: lists are unioned (order kept), equal scalars kept.

    Raises :class:`ConfigMergeError` for the first key whose scalar values differ.
    """
    merged: dict = {}
    if len(configs) == 2 and not configs[0]:
        return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in configs[1].items()}
    for cfg in configs:
        for key, value in cfg.items():
            if key not in merged:
                merged[key] = list(value) if isinstance(value, (list, tuple)) else value
            elif isinstance(merged[key], list) and isinstance(value, (list, tuple)):
                merged[key] += [v for v in value if v not in merged[key]]
            elif merged[key] != value:
                raise ConfigMergeError(f"config key {key!r}: {merged[key]!r} vs {value!r} cannot share a run")
    return merged


_ADAPTERS: dict[tuple[str, str | None], BackendAdapter] = {}
_MODULES: dict[tuple[str, str | None], str] = {}


def register_backend(adapter: BackendAdapter, *, replace: bool = False, kind: str | None = None) -> BackendAdapter:
    """Register ``adapter`` under ``adapter.name`` (for programs of ``kind`` only, when given)."""
    name = adapter.name
    if not name or not isinstance(name, str):
        raise ValueError(f"backend adapter {adapter!r} needs a non-empty string name")
    bad = set(adapter.effects) - EFFECTS
    if bad:
        raise ValueError(f"backend {name!r} declares unknown effects {sorted(bad)}; valid: {sorted(EFFECTS)}")
    key = (name, kind)
    if key in _ADAPTERS and not replace and type(_ADAPTERS[key]) is not type(adapter):
        raise ValueError(f"backend {name!r} is already registered by {type(_ADAPTERS[key]).__module__}")
    _ADAPTERS[key] = adapter
    _MODULES[key] = type(adapter).__module__
    return adapter


def unregister_backend(name: str, kind: str | None = None) -> None:
    _ADAPTERS.pop((name, kind), None)
    _MODULES.pop((name, kind), None)


def _registered(name: str, kind: str | None) -> BackendAdapter | None:
    return (kind is not None and _ADAPTERS.get((name, kind))) or _ADAPTERS.get((name, None))


def get_backend(name: str, kind: str | None = None) -> BackendAdapter:
    """The adapter for ``name`` (and program ``kind``), importing a built-in module on first use."""
    _register_kind_adapter(name, kind)
    adapter = _registered(name, kind)
    if adapter is not None:
        return adapter
    module = backend_module(name, kind)
    if module is not None:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            raise UnknownBackendError(
                f"backend {name!r} is not built yet (module {module} is missing); registered: "
                f"{', '.join(backend_names()) or 'none'}"
            ) from None
        adapter = _registered(name, kind)
        if adapter is not None:
            return adapter
    kinds = sorted(str(k) for n, k in _ADAPTERS if n == name)
    extra = f" (registered for program kinds {kinds}, not {kind!r})" if kinds else ""
    raise UnknownBackendError(
        f"unknown backend {name!r}{extra}; registered: {', '.join(sorted({n for n, _ in _ADAPTERS})) or 'none'}; "
        f"built-in: {', '.join(sorted(BUILTIN_BACKEND_MODULES))}"
    )


def backend_module(name: str, kind: str | None = None) -> str | None:
    """Module to import in a fresh worker process so that ``name`` is registered there."""
    kind_ref = _kind_adapter_ref(name, kind)
    return (_MODULES.get((name, kind)) if kind is not None else None) \
        or (kind_ref.partition(":")[0] if kind_ref else None) or _MODULES.get((name, None)) \
        or BUILTIN_BACKEND_MODULES.get(name)


def backend_names() -> list[str]:
    return sorted({n for n, _ in _ADAPTERS} | set(BUILTIN_BACKEND_MODULES))
