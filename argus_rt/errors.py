"""The one base class for bad input from the user.

Every error that means "this value you gave is wrong" (a program file, a scope item, a region
name, a trace file, a workspace path) derives from :class:`ArgusInputError`. The CLI prints such an
error as one line naming the bad value and what is valid, and exits with status 2, never with a
traceback; the Python API raises it as is.
"""
from __future__ import annotations


class ArgusInputError(ValueError):
    """A user-supplied value is wrong; the message names it and the valid choices."""
