"""Terminal progress for a run (rich), or nothing when disabled or not on a terminal."""
from __future__ import annotations

from collections import Counter


class Progress:
    def __init__(self, *, enabled: bool, total: int) -> None:
        self.enabled = enabled
        self.total = total
        self.counts: Counter = Counter()
        self._progress = None

    def __enter__(self) -> "Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._progress = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                          TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self._progress.start()
            self._bar = self._progress.add_task("argus", total=self.total)
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._update()
            self._progress.stop()

    def _update(self) -> None:
        if self._progress is not None:
            c = self.counts
            desc = (f"run {c['running']} | done {c['done']} reused {c['reused']} "
                    f"failed {c['failed']} blocked {c['blocked']}")
            self._progress.update(self._bar, total=self.total, completed=c["done"] + c["reused"] + c["failed"]
                                  + c["blocked"], description=desc)

    def started(self, task) -> None:
        self.counts["running"] += 1
        self._update()

    def advance(self, task, status: str) -> None:
        if status in ("done", "failed") and self.counts["running"] > 0:
            self.counts["running"] -= 1
        self.counts[status] += 1
        self._update()

    def grow(self, n: int) -> None:
        self.total += n
        self._update()
