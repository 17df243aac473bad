"""Environment every GPU process the project starts runs under: NVLink multicast off.

Multicast (NCCL's NVLS, PyTorch symmetric memory, NVSHMEM) can take a shared host's GPUs out of
service, so it is forced off in every child process and entry point, overriding inherited values.
:func:`child_env` is the whole environment of a Python child that runs Argus code (a runtime
worker, the CUDA runner).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def multicast_off_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with :data:`MULTICAST_OFF` forced over it:
    the ``env=`` of every subprocess that may touch a GPU."""
    env = dict(os.environ if base is None else base)
    env.update(MULTICAST_OFF)
    return env


def force_multicast_off() -> None:
    """Force :data:`MULTICAST_OFF` into this process's environment (entry points: whatever they start inherits it)."""
    os.environ.update(MULTICAST_OFF)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment, this copy of argus_rt importable first (``PYTHONPATH``), ``extra``,
    and multicast forced off."""
    root = str(Path(__file__).resolve().parents[1])  # the directory that holds the argus_rt package
    path = os.environ.get("PYTHONPATH")
    return multicast_off_env({**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else ""), **(extra or {})})
