"""The embedded engine: the runtime's own scheduler, CPU pool and device worker processes, here."""
from __future__ import annotations

from ..runtime.scheduler import Runtime


def open_embedded(workspace, *, devices: list[str] | None = None, progress: bool = False,
                  cpu_pool: str = "process") -> Runtime:
    return Runtime(workspace, devices=devices, progress=progress, cpu_pool=cpu_pool)
