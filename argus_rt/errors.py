"""The one base class for bad input from the user.

Every error that means "this value you gave is wrong" (a program file, a scope item, a region
name, a trace file, a workspace path) derives from :class:`ArgusInputError`. The CLI prints such an
error as one line naming the bad value and what is valid, and exits with status 2, never with a
traceback; the Python API raises it as is.
"""
from __future__ import annotations

import sys


class ArgusInputError(ValueError):
    """A user-supplied value is wrong; the message names it and the valid choices."""


# A file the user named that is missing or unreadable is bad input too.
_FILE_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def input_error_classes(extra: tuple = ()) -> tuple[type[BaseException], ...]:
    """Exception classes that mean "a value the user gave is wrong" (the CLI's exit 2, one line; the
    MCP server's tool error)."""
    found: list[type[BaseException]] = [ArgusInputError, *_FILE_ERRORS, *extra]
    # Program kinds name their other bad-input classes in the kind registry (Kind.input_errors). The
    # registry sits above this module (it imports it), so it is looked up, not imported: kind modules are
    # reached through the registry, and a command that imports one directly (argus discover on a .ttgir
    # file) imports the registry too.
    registry = sys.modules.get("argus_rt.kinds.registry")
    if registry is not None:
        found += registry.kind_input_errors()
    return tuple(found)


def one_line(exc: BaseException) -> str:
    """The error's message on one line (KeyError's repr quotes dropped)."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    parts = [p.strip() for p in str(text).splitlines() if p.strip()]
    return "; ".join(parts) or type(exc).__name__
