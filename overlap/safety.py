"""Set-up every overlap entry point runs first: multicast off, bounded waits.

NVLink multicast can take a shared host's GPUs out of service, so it is switched off in NCCL
(``NCCL_NVLS_ENABLE=0``) and in PyTorch's symmetric memory (``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``)
before torch.distributed or NCCL is initialised. A rank that dies must end the others with a
timeout error, not a hang: the process group gets a finite timeout, NCCL's watchdog tears down a
communicator whose collective exceeds it, and the entry points exit non-zero on any exception so
torchrun stops the remaining ranks.
"""
from __future__ import annotations

import datetime as _dt
import os
import sys
import traceback

from argus_rt.gpu_env import MULTICAST_OFF

SAFE_ENV = {
    **MULTICAST_OFF,
    # Abort communicators on error/timeout instead of leaving ranks blocked (PyTorch's default, stated).
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
}

#: seconds a collective may wait for a peer before every rank raises.
DEFAULT_TIMEOUT_S = 120.0


def set_safe_env() -> None:
    """Force the multicast-off variables (overriding any other value) before anything initialises."""
    for k, v in SAFE_ENV.items():
        os.environ[k] = v


def init_distributed(backend: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
    """Initialise the default process group from torchrun's env variables; return (rank, world, device).

    ``backend``: "nccl" (one CUDA device per rank, LOCAL_RANK selects it) or "gloo" (CPU);
    None picks nccl when CUDA is available.
    """
    set_safe_env()
    import torch
    import torch.distributed as dist

    valid = ("nccl", "gloo")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in valid:
        raise ValueError(f"backend must be one of {valid}, got {backend!r}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
    timeout = _dt.timedelta(seconds=timeout_s)
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    return dist.get_rank(), dist.get_world_size(), device


def run_entry_point(main, argv=None) -> int:
    """Run ``main(argv)``; on any exception print it with the rank and exit non-zero (torchrun then
    stops the other ranks, which otherwise end on their collective timeout)."""
    set_safe_env()
    rank = os.environ.get("RANK", "?")
    try:
        return int(main(argv) or 0)
    except BaseException as exc:  # noqa: BLE001 - any failure must end this rank loudly
        if isinstance(exc, SystemExit) and not exc.code:
            return 0
        print(f"[rank {rank}] failed: {exc!r}", file=sys.stderr, flush=True)
        traceback.print_exc()
        os._exit(1)  # skip atexit hooks that could block on a collective
