"""The program kinds Argus knows: one list, :data:`KIND_MODULES`, one line per kind.

A kind is a package ``argus_rt/kinds/<kind>/`` whose module ``kind.py`` defines ``KIND``, a
:class:`Kind`: its name, its capability flags (``traced``, ``hands_over``, ``builds_alongside_ncu``, ...)
and its hooks as ``"module:function"`` strings, imported when they are first called (so reading the
registry imports no compiler, torch, Triton, CuPy or numba). Everything that used to list kinds reads
this registry: program validation (:func:`kind_names`), the recipes' kind requirements (a recipe names
the capabilities it needs, :func:`kinds_with`), the kind-specific backend adapters (``Kind.adapters``),
plan-time compile checks, the profiled runner (:mod:`argus_rt.kinds.run_variant`), the mapping run
(:mod:`argus_rt.backends.pcmap`), the trace adapter (:mod:`argus_rt.backends.trace`) and the async
discovery and probe handlers (:mod:`argus_rt.runtime.async_handlers`).

A *capability* is the name of a :class:`Kind` field other than ``name``, ``runner_says``, ``adapters``,
``launch_schema`` and ``input_errors`` (:data:`CAPABILITIES`): a kind has it when the flag is true or the hook is set
(:meth:`Kind.has`).

Adding a kind: its folder, and its line in :data:`KIND_MODULES`. A kind defined elsewhere (a plugin, a
test) is added with :func:`register_kind` and removed with :func:`unregister_kind`.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from ..errors import ArgusInputError

# The registration lines: one module per kind, each defining KIND.
KIND_MODULES: tuple[str, ...] = (
    "argus_rt.kinds.cuda.kind",
    "argus_rt.kinds.triton.kind",
    "argus_rt.kinds.cupy.kind",
    "argus_rt.kinds.numba.kind",
    "argus_rt.kinds.proton.kind",
)


class UnknownKindError(ArgusInputError):
    """A program kind that no registered :class:`Kind` has, or a kind without the hook asked for (the
    message lists the valid ones). Bad input: the CLI's one line, the MCP server's tool error."""


@dataclass(frozen=True)
class Kind:
    """What Argus needs to know of a program kind. Hooks are ``"module:function"`` (None: not supported).

    * ``variant_cubin(program, variant) -> Path``: the variant's cubin (the mapping run maps and
      profiles it);
    * ``kernel(program) -> str``: the kernel's name (what ncu profiles, whose SASS is mapped);
    * ``run_once(program, variant, **handovers) -> dict`` (``symbol``, ``max_rel_err``, ...): one
      checked launch, in the process ncu profiles (``python -m argus_rt.kinds.run_variant``);
      ``handovers``: ``cubin``, ``symbol``, ``outputs``, only for a kind with ``hands_over``;
    * ``saves_outputs(program) -> bool`` and ``check_saved_run(program, path) -> float | None``
      (``hands_over`` kinds): whether the profiled run saves its outputs for the parent to check;
    * ``trace(program, outdir, config) -> (argus.region_intervals/1 document, raw rings path)``: the
      traced variant's run for the shared ``trace`` adapter;
    * ``trace_run(mode, program, outdir, *, config, inputs, sampling) -> inline evidence document``: the
      shared ``trace`` adapter's runs for a kind whose runs need more than ``trace`` takes (its mode
      ``"region"``, ``"reference"`` or ``"probe"``: argus.region_intervals/1, argus.iteration_waits/1 or
      argus.op_events/1; ``inputs``: the task's input files, e.g. a probe's ``ttgir``); used instead of
      ``trace`` when set;
    * ``check_compiles(program)``: plan time, raises a one-line error;
    * ``mapping_provenance(program) -> dict``: extra provenance of the mapping run;
    * ``runner_facts(result) -> dict``: extras of a run_once result the runner prints;
    * ``compiler() -> str``: the version of what compiles this kind ("unknown" when it is not
      installed); part of a program version's identity, so evidence is not reused across an upgrade;
    * ``discover_async_sites(program, region, outdir) -> (argus.async_sites/1 document, {output: path})``:
      the async operation sites of ``region`` (None: the whole kernel), for the ``async_discovery``
      Control; the paths are extra outputs it wrote under ``outdir``;
    * ``forced_wait_probe(program, probe, outdir) -> {output: path}``: build ``probe``, the forced-wait
      probe variant of one (async site, iteration) (``probe.params``: ``op_id``, ``iteration``), under
      ``outdir``, for the ``forced_wait_probe`` Transform;
    * ``environment_problem() -> str | None``: why this kind cannot run on this machine (a known-broken
      pair of its toolchain's versions), as one line naming the fix; None: nothing known;
    * ``prebuild(variant) -> object``: build the program variant ``variant`` (a ProgramVersion) into
      the kind's build cache ahead of its collection, on the CPU worker of the ``variant`` Transform
      where collections run; it must not raise for a failed build (the collection builds again and
      reports it); what it returns is not read;
    * ``warm_up() -> bool``: in a device worker as it starts, import what this kind's build and run
      import, so that the first collection does not pay for it; False when that is not installed;
    * ``adapters``: backend name -> ``"module:Class"`` of an adapter used for this kind instead of the
      shared one (instantiated and registered on first use);
    * ``input_errors``: ``"module:Class"`` of the kind's bad-input exceptions that do not derive from
      :class:`~argus_rt.errors.ArgusInputError` (looked up only in modules already imported);
    * ``launch_schema``: ``"<schema>#<JSON pointer>"``, the node of a published schema
      (``argus_rt/schemas/<schema>.schema.json``) that a program file's ``launch`` of this kind must
      match (checked by :func:`argus_rt.program.load_program`); None: the kind checks its launch itself.
    """

    name: str
    traced: bool = False
    runner_variants: tuple[str, ...] = ()  # variants its profiled runner launches (first: the default)
    hands_over: bool = False
    # The profiled runner builds the variant itself (no hand-over), and two processes may build it at
    # once without seeing each other's partial files: the mapping run starts Nsight Compute before it
    # builds and reads the variant, and the two run side by side.
    builds_alongside_ncu: bool = False
    # Its trace adapter runs the traced reference with per-iteration consumer waits
    # (config {"reference": "iteration_waits"}, output argus.iteration_waits/1).
    traces_iteration_waits: bool = False
    runner_says: str = ""  # what the profiled run does, for its progress line
    variant_cubin: str | None = None
    kernel: str | None = None
    run_once: str | None = None
    saves_outputs: str | None = None
    check_saved_run: str | None = None
    trace: str | None = None
    trace_run: str | None = None
    check_compiles: str | None = None
    mapping_provenance: str | None = None
    runner_facts: str | None = None
    compiler: str | None = None
    discover_async_sites: str | None = None
    forced_wait_probe: str | None = None
    environment_problem: str | None = None
    prebuild: str | None = None
    warm_up: str | None = None
    adapters: Mapping[str, str] = field(default_factory=dict)
    launch_schema: str | None = None
    # "module:Class" of this kind's bad-input errors that do not derive from ArgusInputError: the CLI's
    # one line and exit 2, the MCP server's tool error (argus_rt.errors.input_error_classes)
    input_errors: tuple[str, ...] = ()

    def has(self, capability: str) -> bool:
        """Whether this kind has ``capability`` (one of :data:`CAPABILITIES`): the flag is true or the
        hook is set."""
        check_capabilities([capability])
        return bool(getattr(self, capability))

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The hook ``name`` (imported now), or None when this kind has none."""
        ref = getattr(self, name)
        return None if ref is None else resolve(ref)

    def call(self, name: str, *args, **kwargs):
        fn = self.hook(name)
        if fn is None:
            raise UnknownKindError(f"program kind {self.name!r} has no {name!r} (kinds with one: "
                                   f"{', '.join(k.name for k in kinds() if getattr(k, name) is not None)})")
        return fn(*args, **kwargs)


# Kind fields that are capabilities (a flag or a hook); these are not.
_NOT_CAPABILITIES = ("name", "runner_says", "adapters", "launch_schema", "input_errors")
CAPABILITIES: tuple[str, ...] = tuple(f.name for f in fields(Kind) if f.name not in _NOT_CAPABILITIES)


def check_capabilities(names) -> frozenset[str]:
    """``names`` as a frozenset, or a one-line error naming the unknown ones and the valid ones."""
    names = frozenset(names)
    bad = names - frozenset(CAPABILITIES)
    if bad:
        raise ValueError(f"unknown kind capabilit{'y' if len(bad) == 1 else 'ies'} {sorted(bad)}; "
                         f"valid: {', '.join(CAPABILITIES)}")
    return names


def resolve(ref: str):
    """The object ``"module:attr"`` names."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


# Kinds without a folder: programs run by their own argv (python) and test stand-ins (standin).
_PLAIN = (Kind("python"), Kind("standin"))
_KINDS: dict[str, Kind] | None = None


def _table() -> dict[str, Kind]:
    global _KINDS
    if _KINDS is None:
        table = {}
        for module in KIND_MODULES:
            kind = importlib.import_module(module).KIND
            table[kind.name] = kind
        table.update((k.name, k) for k in _PLAIN)
        _KINDS = table
    return _KINDS


def register_kind(kind: Kind, *, replace: bool = False) -> Kind:
    """Add ``kind`` (``replace=True`` to override one of the same name)."""
    table = _table()
    if kind.name in table and not replace:
        raise ValueError(f"program kind {kind.name!r} is already registered; pass replace=True")
    table[kind.name] = kind
    return kind


def unregister_kind(name: str) -> None:
    _table().pop(name, None)


def kinds() -> list[Kind]:
    return list(_table().values())


def kind_names() -> tuple[str, ...]:
    """Every registered kind's name, in registration order."""
    return tuple(_table())


def kinds_with(capabilities) -> frozenset[str]:
    """The names of the registered kinds that have every one of ``capabilities``."""
    needed = check_capabilities(capabilities)
    return frozenset(k.name for k in kinds() if all(getattr(k, c) for c in needed))


def kind_input_errors() -> tuple[type[BaseException], ...]:
    """Every kind's ``input_errors`` classes whose module is already imported (an error of a module
    nobody imported cannot have been raised; importing it here would load a compiler)."""
    found = []
    for kind in kinds():
        for ref in kind.input_errors:
            module, _, name = ref.partition(":")
            loaded = sys.modules.get(module)
            if loaded is not None and hasattr(loaded, name):
                found.append(getattr(loaded, name))
    return tuple(found)


def find_kind(name: str | None) -> Kind | None:
    """The kind ``name``, or None when none is registered."""
    return _table().get(name) if name is not None else None


def get_kind(name: str) -> Kind:
    kind = _table().get(name)
    if kind is None:
        raise UnknownKindError(f"unknown program kind {name!r}; valid: {', '.join(kind_names())}")
    return kind
