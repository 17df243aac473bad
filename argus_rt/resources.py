"""Where Argus's shipped files are: the CUDA headers (``csrc/``) and the example programs.

A wheel carries them inside the package as ``argus_rt/data/csrc`` and ``argus_rt/data/examples``
(see ``[tool.setuptools.package-dir]`` in pyproject.toml); an editable install or a plain checkout
has them beside the package. Both are looked up through :mod:`importlib.resources`, the wheel
layout first, so an installed copy never reads a stale checkout by accident.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from .errors import ArgusInputError

SHIPPED = ("csrc", "examples")


class MissingResourceError(FileNotFoundError):
    """The installation lacks a shipped directory (a broken or partial install)."""


def shipped_dir(name: str) -> Path:
    """The directory ``name`` (one of :data:`SHIPPED`) of this installation."""
    if name not in SHIPPED:
        raise ValueError(f"unknown shipped directory {name!r}; valid: {', '.join(SHIPPED)}")
    package = files("argus_rt")
    for candidate in (package / "data" / name, package / ".." / name):
        if candidate.is_dir():
            # A wheel or checkout on disk: both are real directories, so Path() is exact.
            return Path(str(candidate)).resolve()
    raise MissingResourceError(f"argus_rt installation has no {name}/ directory (looked in "
                               f"{package / 'data' / name} and {package / '..' / name}); reinstall argus-rt")


def csrc_dir() -> Path:
    """Include directory holding ``argus/argus.cuh`` and the megakernel sources."""
    return shipped_dir("csrc")


def examples_dir() -> Path:
    """The example program directories (``cuda``, ``ground_truth``, ``triton``, ...)."""
    return shipped_dir("examples")


def example(name: str) -> Path:
    """The shipped example program directory ``name`` (e.g. ``"cuda"``, ``"ground_truth"``)."""
    root = examples_dir()
    names = sorted(p.name for p in root.iterdir() if (p / "argus_program.json").is_file())
    if name not in names:
        raise ArgusInputError(f"unknown example {name!r}; shipped examples: {', '.join(names)}")
    return root / name
