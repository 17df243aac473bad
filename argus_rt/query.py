"""The query entry point: ``query(program, region=..., signals=[...], scope=Scope(...))`` -> Report.

``program`` is a :class:`argus_rt.program.ProgramVersion` or a path to a program directory (with
``argus_program.json``). ``region`` is a qualified or unique leaf region name (``None``: all
regions); a parent region covers its whole subtree. ``signals`` are recipe names
(:func:`argus_rt.recipes.signals` lists them). ``scope`` is a :class:`Scope` or a dict of its fields.
Unknown regions, signals and scope fields raise errors that list the valid ones.

Results go to a workspace (``workspace=`` a path or :class:`Workspace`; default ``$ARGUS_WORKSPACE``
or ``./.argus_workspace``) and are reused: asking the same question again runs no collection, and zooming
into a child region reuses the parent query's runs.
"""
from __future__ import annotations

import os
import sys
import types
from pathlib import Path

from .planner import QueryError, plan_query
from .program import ProgramVersion, load_program
from .recipes import get_recipe
from .report import Report
from .scope import Scope
from .tasks import Plan

DEFAULT_WORKSPACE = ".argus_workspace"  # listed in .gitignore


def default_workspace() -> Path:
    return Path(os.environ.get("ARGUS_WORKSPACE", DEFAULT_WORKSPACE))


def _program(program) -> ProgramVersion:
    if isinstance(program, ProgramVersion):
        return program
    if isinstance(program, (str, os.PathLike)):
        return load_program(program)
    raise QueryError(f"program must be a ProgramVersion or a program directory path, got {type(program).__name__}")


def check_compiles(program) -> None:
    """The program's kind checks, on the CPU, that it compiles (its ``check_compiles`` hook in
    argus_rt.kinds.registry: Triton compiles as the JIT would and parses the TTGIR, CuPy and numba
    compile their marker-only build), so a compile error is one line naming the program and the
    compiler's message, raised before any task runs; a kind without the hook (CUDA) is not built
    (planning stays fast). ``argus plan``, ``query``, ``compare`` and the MCP tools all call this."""
    from .kinds.registry import find_kind

    program = _program(program)
    kind = find_kind(program.kind)
    if kind is not None and kind.check_compiles:
        kind.call("check_compiles", program)


def make_plan(program, region: str | None = None, signals=("latency",), scope=None, *,
              sampling: dict | None = None, workspace=None, timeouts: dict | None = None) -> Plan:
    """Validate the query and plan it (no execution). With a :class:`Workspace`, finished runs that
    cover a request are reused instead of planned again."""
    if isinstance(signals, str):
        signals = [s for s in signals.split(",") if s]
    signals = list(dict.fromkeys(signals))  # keep order, drop repeats
    for s in signals:
        get_recipe(s)  # unknown signal: error listing the valid ones
    if scope is not None and not isinstance(scope, Scope):
        scope = Scope.from_dict(scope)
    existing = None
    if workspace is not None:
        existing = lambda backend, pid: workspace.done_tasks("collect", backend, pid)  # noqa: E731
    return plan_query(_program(program), region, signals, scope, sampling=sampling, existing_runs=existing,
                      timeouts=timeouts)


def query(program, region: str | None = None, signals=("latency",), scope=None, *, workspace=None,
          runtime=None, devices: list[str] | None = None, sampling: dict | None = None,
          progress: bool = False, timeouts: dict | None = None, cpu_pool: str = "process",
          engine: str = "embedded", address: str | None = None, engine_options: dict | None = None) -> Report:
    """Plan, run (reusing what the workspace has) and report. See the module docstring.

    ``timeouts``: seconds per task kind (``{"collect": 900}``), counted from each task's start: a task
    past it is killed and the report comes back with the rest answered. ``cpu_pool``: ``"process"``
    or ``"thread"`` (see :class:`argus_rt.runtime.scheduler.Runtime`). ``engine``: ``"embedded"``
    (here) or ``"ray"`` (a Ray cluster at ``address``; ``engine_options`` as
    :class:`argus_rt.engines.ray_engine.RayRuntime` takes them): the same plan, the same workspace
    (see :mod:`argus_rt.engines`). ``runtime``: an open engine to run on (then ``workspace``,
    ``devices``, ``engine`` and its options are the engine's own)."""
    from .engines import open_engine
    from .workspace import Workspace

    if runtime is not None:
        plan = make_plan(program, region, signals, scope, sampling=sampling, workspace=runtime.ws, timeouts=timeouts)
        return Report.from_run(plan, runtime.run(plan))
    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace or default_workspace())
    try:
        plan = make_plan(program, region, signals, scope, sampling=sampling, workspace=ws, timeouts=timeouts)
        with open_engine(engine, ws, devices=devices, progress=progress, cpu_pool=cpu_pool, address=address,
                         **(engine_options or {})) as rt:
            return Report.from_run(plan, rt.run(plan))
    finally:
        if ws is not workspace:
            ws.close()


class _CallableModule(types.ModuleType):
    """Lets ``argus_rt.query(program, ...)`` call :func:`query` while ``argus_rt.query.make_plan``
    and ``import argus_rt.query`` keep working (the package exposes this module, not the function)."""

    def __call__(self, *args, **kwargs) -> Report:
        return query(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
