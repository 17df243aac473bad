"""Engines: what executes a plan. The plan (DAG + JSON runtime descriptor) is the same for all.

An engine is opened on a :class:`argus_rt.workspace.Workspace` and is a context manager with
``ws`` (that workspace), ``run(plan) -> RunResult`` and ``close()``: the interface of
:class:`argus_rt.runtime.scheduler.Runtime`, which *is* the embedded engine. Every engine
publishes through that workspace's one commit path (:meth:`Workspace.commit`, on the driver), so
the workspace is the single source of truth and a result produced by one engine is reused by the
other.

``embedded`` (default)  one process here: CPU pool + one worker process per GPU (:mod:`.embedded`)
``ray``                 a Ray cluster executes the tasks; the scheduler and the commit stay on the
                        driver (:mod:`.ray_engine`; needs the ``[ray]`` extra)

    with open_engine("ray", ws, address="auto") as rt:
        result = rt.run(plan)
"""
from __future__ import annotations

from ..errors import ArgusInputError

ENGINES = ("embedded", "ray")
DEFAULT_ENGINE = "embedded"


class EngineError(ArgusInputError):
    """An unknown engine, an option the chosen engine does not take, or a missing optional dependency."""


def open_engine(name: str, workspace, *, devices: list[str] | None = None, progress: bool = False,
                cpu_pool: str = "process", address: str | None = None, **options):
    """An engine executing plans against ``workspace`` (close it, or use it as a context manager).

    ``devices``: embedded, the CUDA device indices of its workers; ray, how many device workers
    (their count; Ray picks the GPUs). ``address``: the Ray cluster (``None``: ``$RAY_ADDRESS`` or a
    new local instance; ``"auto"``: the cluster started on this machine by ``ray start``).
    ``options``: engine-specific (:class:`argus_rt.engines.ray_engine.RayRuntime` lists the Ray ones).
    """
    if name == "embedded":
        if address is not None:
            raise EngineError("--address names a Ray cluster; it needs --engine ray (the embedded engine runs here)")
        if options:
            raise EngineError(f"the embedded engine takes no option(s) {', '.join(sorted(options))} "
                              "(they are Ray engine options)")
        from .embedded import open_embedded

        return open_embedded(workspace, devices=devices, progress=progress, cpu_pool=cpu_pool)
    if name == "ray":
        if cpu_pool != "process":
            raise EngineError(f"cpu_pool={cpu_pool!r} is an embedded engine option: the ray engine runs "
                              "Transform/Synthesize as Ray tasks and Control tasks in processes on the driver")
        from .ray_engine import RayRuntime

        return RayRuntime(workspace, address=address, devices=devices, progress=progress, **options)
    raise EngineError(f"unknown engine {name!r}; valid: {', '.join(ENGINES)}")


__all__ = ["DEFAULT_ENGINE", "ENGINES", "EngineError", "open_engine"]
