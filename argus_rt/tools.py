"""Find the CUDA command-line tools Argus runs: nvcc, cuobjdump, nvdisasm and ncu.

One search order serves every tool; the first executable file found wins:

1. the tool's environment override, ``$ARGUS_NVCC``, ``$ARGUS_CUOBJDUMP``, ``$ARGUS_NVDISASM`` or
   ``$ARGUS_NCU`` (``$NCU`` is still read for ncu, after ``$ARGUS_NCU``);
2. ``$CUDA_HOME/bin``: naming a toolkit is a stronger choice than whatever PATH happens to hold;
3. ``PATH``;
4. ``/usr/local/cuda/bin``;
5. tool-specific extras: Triton's wheel (``triton/backends/nvidia/bin``) for cuobjdump and nvdisasm,
   which lets SASS be read on machines with no toolkit, and ``/opt/nvidia/nsight-compute/*/ncu``
   (newest version first) for ncu.

An override that names no executable is skipped, not an error, so a stale variable falls back to
the usual places; the error lists it among the places looked at.
"""
from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from .errors import ArgusInputError

TOOLS = ("nvcc", "cuobjdump", "nvdisasm", "ncu")
CUDA_BIN = Path("/usr/local/cuda/bin")
_ENV = {"nvcc": ("ARGUS_NVCC",), "cuobjdump": ("ARGUS_CUOBJDUMP",), "nvdisasm": ("ARGUS_NVDISASM",),
        "ncu": ("ARGUS_NCU", "NCU")}
_LABEL = {"ncu": "Nsight Compute (ncu)"}


class ToolNotFoundError(ArgusInputError):
    """A CUDA tool is not installed where Argus looks; the message names the tool and the places."""


def _triton_bin() -> Path | None:
    import importlib.util

    try:  # where the package is, without importing it (importing triton takes about half a second)
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "backends" / "nvidia" / "bin"


def search_places(tool: str) -> list[tuple[str, str]]:
    """(where, candidate path or "" when that place is unset) for ``tool``, in search order."""
    if tool not in TOOLS:
        raise ArgusInputError(f"unknown tool {tool!r}; valid: {', '.join(TOOLS)}")
    places = [(f"${var}", os.environ.get(var, "")) for var in _ENV[tool]]
    home = os.environ.get("CUDA_HOME", "")
    places.append(("$CUDA_HOME/bin", str(Path(home) / "bin" / tool) if home else ""))
    places.append(("PATH", shutil.which(tool) or ""))
    places.append((str(CUDA_BIN), str(CUDA_BIN / tool)))
    if tool in ("cuobjdump", "nvdisasm"):
        triton_bin = _triton_bin()
        places.append(("Triton's bundled tools", str(triton_bin / tool) if triton_bin else ""))
    if tool == "ncu":
        versions = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True) or [""]
        places += [("/opt/nvidia/nsight-compute/*/ncu", found) for found in versions]
    return places


def find_tool(tool: str) -> Path:
    """Path of ``tool`` (one of :data:`TOOLS`), by the search order in this module's docstring."""
    places = search_places(tool)
    for _, cand in places:
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    looked = ", ".join(f"{where} ({cand or 'unset'})" if where.startswith("$") else where for where, cand in places)
    raise ToolNotFoundError(f"{_LABEL.get(tool, tool)} not found; looked at: {looked}")


def tool_or_none(tool: str) -> Path | None:
    """:func:`find_tool`, or None when the tool is not installed (for optional features and reports)."""
    try:
        return find_tool(tool)
    except ToolNotFoundError:
        return None
