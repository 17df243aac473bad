"""Handlers for the CPU-side task kinds: Transform, Control (+ expanders) and Synthesize.

A handler is a plain function ``fn(ctx: TaskContext) -> dict[str, Path]`` that writes its outputs
under ``ctx.outdir`` and returns them by name (the runtime hashes them into the workspace after it
returns). Handlers are looked up by ``(task.op, program kind)`` first, then ``(task.op, None)``; the
built-in ones are registered for every kind and reach kind-specific work through the kind registry
(:mod:`argus_rt.kinds.registry`), so this table names no kind::

    from argus_rt.runtime.handlers import register_transform, register_control, register_expander

    @register_transform("forced_wait_probe")
    def make_probe(ctx):                     # ctx.config: {"op_id": ..., "iteration": ...}
        probe = ctx.program.variant_of("probe", op_id=..., iteration=...)
        ...                                  # the kind's forced_wait_probe hook builds it
        return {"program": ctx.write_program(probe), "cubin": ctx.outdir / "probe.cubin"}

    @register_control("async_discovery")
    def discover(ctx):                       # ctx.region: the queried region (walk its subtree)
        return {"async_sites": ctx.write_json("async_sites", {"format": "argus.async_sites/1", "sites": [...]})}

    @register_expander("forced_wait_probes")
    def expand(ctx, builder):                # after the Control task: add run-time branches
        for site in ctx.read_json("async_sites")["sites"]: ...
            builder.add(task); builder.feed(task)   # fed tasks become inputs of the Control's dependents

The built-in handlers are registered by the modules :data:`argus_rt.builtin_handlers.BUILTIN_HANDLER_MODULES`
lists (references, not names); the first lookup that misses imports that table, and with it those
modules. Synthesis rules are registered the same way with ``register_synthesis`` (``argus_rt.synthesis``
holds the built-in rules).

A Transform that makes a program variant publishes a ``"program"`` output (``ctx.write_program``):
the JSON of the :class:`ProgramVersion` it built, whose ``id`` must equal the id the planner
expected (``task.config["expect_program"]`` when set) — the runtime checks it.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HANDLER_KINDS = ("transform", "control", "expander", "synthesize")
# The table of built-in handler modules. It sits above the runtime (its modules import this one to
# register), so it is the one module the runtime imports by name, on the first lookup that misses.
BUILTIN_HANDLERS = "argus_rt.builtin_handlers"


class HandlerError(RuntimeError):
    """A task whose handler is missing or returned something invalid."""


class UnknownHandlerError(HandlerError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class TaskContext:
    """What a CPU-side handler gets. ``inputs`` maps ``"<dep id>/<output>"`` and unambiguous bare
    output names to files; ``input_list(name)`` returns every dependency output of that name."""

    task: Any  # argus_rt.tasks.Task
    program: Any  # argus_rt.program.ProgramVersion named by task.program
    programs: Callable[[str], Any]  # program id -> ProgramVersion
    inputs: dict[str, Path]
    outdir: Path
    deps: dict = field(default_factory=dict)  # dependency task id -> Task (static and run-time deps)
    log: Callable[[str], None] = field(default=lambda msg: None)

    def deps_with_op(self, op: str) -> list:
        """Dependency tasks whose ``op`` is ``op`` (e.g. the ``trace`` collects), in id order."""
        return [t for tid, t in sorted(self.deps.items()) if t.op == op]

    def input_of(self, dep_id: str, name: str) -> Path:
        key = f"{dep_id}/{name}"
        if key not in self.inputs:
            raise HandlerError(f"task {self.task.describe()} has no input {name!r} from {dep_id}")
        return self.inputs[key]

    @property
    def config(self) -> dict:
        return self.task.config

    @property
    def region(self) -> str | None:
        return self.task.region

    def input_list(self, name: str) -> list[tuple[str, Path]]:
        """(dep task id, path) of every dependency output called ``name``, in dep-id order."""
        out = []
        for key, path in sorted(self.inputs.items()):
            dep, sep, out_name = key.partition("/")
            if sep and out_name == name:
                out.append((dep, path))
        return out

    def read_json(self, name: str) -> Any:
        if name not in self.inputs:
            have = sorted(k for k in self.inputs if "/" not in k)
            raise HandlerError(f"task {self.task.describe()} has no single input {name!r}; inputs: {have}")
        return json.loads(Path(self.inputs[name]).read_text(encoding="utf-8"))

    def write_json(self, name: str, doc: Any) -> Path:
        path = self.outdir / f"{_safe(name)}.json"
        path.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
        return path

    def write_program(self, program: Any) -> Path:
        return self.write_json("program", program.to_dict())


def _safe(name: str) -> str:
    # output names are identifiers chosen by code, but never let one become a path
    if not name.replace("_", "").replace("-", "").isalnum():
        raise HandlerError(f"output name {name!r} must be letters, digits, '_' or '-'")
    return name


_HANDLERS: dict[tuple[str, str, str | None], Callable] = {}
# (kind, name, program kind) -> module, so that a spawned CPU process imports the module of the
# handler the program's kind needs (two kinds may register the same name in different modules)
_HANDLER_MODULES: dict[tuple[str, str, str | None], str] = {}


def _register(kind: str, name: str, fn: Callable, program_kind: str | None) -> Callable:
    if kind not in HANDLER_KINDS:
        raise ValueError(f"unknown handler kind {kind!r}; valid: {', '.join(HANDLER_KINDS)}")
    _HANDLERS[(kind, name, program_kind)] = fn
    _HANDLER_MODULES[(kind, name, program_kind)] = fn.__module__
    return fn


def _decorator(kind: str):
    def register(name: str, fn: Callable | None = None, *, kind: str | None = None):
        if fn is not None:
            return _register(_kind, name, fn, kind)
        return lambda f: _register(_kind, name, f, kind)

    _kind = kind
    register.__doc__ = f"Register a {kind} handler: ``register_{kind}(name, fn, kind=None)`` or as a decorator."
    return register


register_transform = _decorator("transform")
register_control = _decorator("control")
register_expander = _decorator("expander")
register_synthesis = _decorator("synthesize")


def unregister(kind: str, name: str) -> None:
    for key in [k for k in _HANDLERS if k[0] == kind and k[1] == name]:
        del _HANDLERS[key]
    for key in [k for k in _HANDLER_MODULES if k[0] == kind and k[1] == name]:
        del _HANDLER_MODULES[key]


def load_builtin_handlers() -> tuple:
    """Import the built-in handler modules (registering their handlers); returns them."""
    return importlib.import_module(BUILTIN_HANDLERS).BUILTIN_HANDLER_MODULES


def _lookup(table: dict, kind: str, name: str, program_kind: str | None):
    return table.get((kind, name, program_kind)) or table.get((kind, name, None))


def get_handler(kind: str, name: str, program_kind: str | None = None) -> Callable:
    """The handler for ``(kind, name)``, specialised for ``program_kind`` when one is registered."""
    fn = _lookup(_HANDLERS, kind, name, program_kind)
    if fn is None:
        load_builtin_handlers()
        fn = _lookup(_HANDLERS, kind, name, program_kind)
    if fn is not None:
        return fn
    names = sorted({k[1] for k in _HANDLERS if k[0] == kind})
    kinds = sorted({str(k[2]) for k in _HANDLERS if k[0] == kind and k[1] == name})
    extra = f" (registered for program kinds {kinds}, not {program_kind!r})" if kinds else ""
    raise UnknownHandlerError(f"unknown {kind} handler {name!r}{extra}; registered: {', '.join(names) or 'none'}")


def handler_module(kind: str, name: str, program_kind: str | None = None) -> str | None:
    """Module to import in a fresh process so that the handler ``get_handler`` would pick is registered."""
    module = _lookup(_HANDLER_MODULES, kind, name, program_kind)
    if module is None:
        load_builtin_handlers()
        module = _lookup(_HANDLER_MODULES, kind, name, program_kind)
    return module
