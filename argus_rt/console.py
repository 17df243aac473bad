"""A rich Console that never wraps a table in a pipe (see :mod:`argus_rt.commands.output`).

Below the CLI: :meth:`argus_rt.report.Report.print` makes its default console here too.
"""
from __future__ import annotations

import sys

PIPE_WIDTH = 100_000  # columns of a non-terminal console: wider than any table row Argus prints


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def make_console(stream=None):
    """A rich Console on ``stream`` (default stdout): terminal-sized on a tty, content-sized otherwise."""
    from rich.console import Console

    stream = stream if stream is not None else sys.stdout
    if _is_terminal(stream):
        return Console(file=stream)
    return Console(file=stream, width=PIPE_WIDTH, no_color=True, highlight=False, soft_wrap=False)
