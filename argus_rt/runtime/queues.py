"""Queue helpers shared by the runtime's pools and scheduler."""
from __future__ import annotations

import queue


def drain(jobs: queue.Queue) -> list:
    """Take every item queued now, without waiting, and return them oldest first (``[]`` for an
    empty queue). Items other threads put while it runs may or may not be taken."""
    taken = []
    while True:
        try:
            taken.append(jobs.get_nowait())
        except queue.Empty:
            return taken
