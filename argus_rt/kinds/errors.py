"""Errors of building and running one program variant, the same for every kind."""
from __future__ import annotations

from ..backends.base import BackendError


class ProgramRunError(BackendError):
    """The program variant could not be built or launched, or its launch description is wrong."""


class ReferenceMismatchError(ProgramRunError):
    """The kernel's outputs differ from the plain PyTorch reference beyond the stated tolerance."""
