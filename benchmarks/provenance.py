"""Which code and which software stack a benchmark ran on: the commit and the library / driver versions.

Every value is read, never assumed. What cannot be read is ``None``, with the reason in the
``not_recorded`` dict the functions return next to it (keys ``"commit"``, ``"versions.<name>"``).

The device machine receives a copy of the working tree without ``.git``; there the commit comes from
``$ARGUS_COMMIT`` when the command sets it (e.g. ``ARGUS_COMMIT=<git rev-parse HEAD here>[-dirty]``),
and the record says it came from there.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import platform
import shutil
import subprocess
from pathlib import Path

COMMIT_ENV = "ARGUS_COMMIT"
VERSION_NAMES = ("python", "torch", "triton", "cuda_runtime", "driver", "numpy", "argus_rt")


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        last_line = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
        raise RuntimeError(last_line or f"git exit {proc.returncode}")
    return proc.stdout.strip()


def git_commit(root: Path) -> tuple[str | None, str | None, str | None]:
    """(commit, where it came from, why it is missing): ``git rev-parse HEAD`` plus ``-dirty`` when tracked
    files differ from it (untracked files do not count, as in ``git describe --dirty``), else ``$ARGUS_COMMIT``."""
    why = None
    if shutil.which("git") is None:
        why = "git is not installed"
    elif not (root / ".git").exists():
        why = f"no .git in {root} (the device machine receives the working tree without it)"
    else:
        try:
            head = _git(root, "rev-parse", "HEAD")
            dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
            return head + ("-dirty" if dirty else ""), "git", None
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            why = f"git failed: {exc}"
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV], f"${COMMIT_ENV} ({why})", None
    return None, None, f"{why}; ${COMMIT_ENV} not set"


def _distribution_version(name: str) -> str:
    return importlib.metadata.version(name)


def _cuda_runtime() -> str:
    import torch

    if torch.version.cuda is None:
        raise LookupError(f"torch {torch.__version__} is built without CUDA")
    return torch.version.cuda


def _driver() -> str:
    """nvidia-smi's driver version; without nvidia-smi, the CUDA version libcuda's driver API reports."""
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip().splitlines()[0]
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise LookupError(f"no nvidia-smi and no libcuda.so.1 ({exc})") from None
    version = ctypes.c_int()
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        raise LookupError("cuDriverGetVersion failed")
    return f"CUDA {version.value // 1000}.{version.value % 1000 // 10} (cuDriverGetVersion; nvidia-smi unavailable)"


def _argus_rt() -> str:
    """The version of the argus_rt that this process imports (the checkout's, put first on sys.path)."""
    import argus_rt

    return argus_rt.__version__


def versions() -> tuple[dict[str, str | None], dict[str, str]]:
    """({name: version or None} for VERSION_NAMES, {"versions.<name>": why it is None})."""
    readers = {
        "python": platform.python_version,
        "torch": lambda: _distribution_version("torch"),
        "triton": lambda: _distribution_version("triton"),
        "cuda_runtime": _cuda_runtime,
        "driver": _driver,
        "numpy": lambda: _distribution_version("numpy"),
        "argus_rt": _argus_rt,
    }
    found, missing = {}, {}
    for name in VERSION_NAMES:
        try:
            found[name] = readers[name]()
        except (ImportError, LookupError, OSError, AttributeError, subprocess.TimeoutExpired) as exc:
            found[name] = None
            missing[f"versions.{name}"] = f"{type(exc).__name__}: {exc}"
    return found, missing
