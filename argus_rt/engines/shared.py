"""One embedded engine kept open across many queries (``argus mcp``'s tool calls).

A query that opens its own engine starts the device workers (torch, the CUDA context, Triton) and the
CPU pool every time: on an H200 that was most of an agent's ~8 s per measured candidate. A
:class:`SharedEngine` opens the engine on the first run that needs one and keeps it until
:meth:`close`. Runs are serialised (one plan at a time on its workers). A run that fails with anything
but bad input closes the engine, so the next run starts from fresh workers instead of broken ones.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, TypeVar

from ..errors import input_error_classes

T = TypeVar("T")


class SharedEngine:
    def __init__(self, workspace_dir: str | Path, *, opener: Callable | None = None) -> None:
        self.workspace_dir = Path(workspace_dir)
        self._opener = opener or _open_embedded  # (workspace_dir) -> an open engine (its .ws is the workspace)
        self._engine = None
        self._lock = threading.Lock()
        self.opened = 0  # engines opened so far (a test and the server's log read it)

    def run(self, fn: Callable[[object], T]) -> T:
        """``fn(engine)`` on the shared engine, opened first if none is open."""
        with self._lock:
            if self._engine is None:
                self._engine = self._opener(self.workspace_dir)
                self.opened += 1
            try:
                return fn(self._engine)
            except Exception as exc:
                if not isinstance(exc, input_error_classes()):
                    self._close_locked()
                raise

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            try:
                engine.close()
            finally:
                engine.ws.close()


def _open_embedded(workspace_dir: Path):
    from ..workspace import Workspace
    from . import open_engine

    ws = Workspace(workspace_dir)
    try:
        return open_engine("embedded", ws)
    except BaseException:
        ws.close()
        raise
