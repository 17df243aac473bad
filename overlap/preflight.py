"""What the overlap entry points check before touching CUDA or NCCL: started by torchrun, one GPU
per rank. A missing piece is reported in one line with exit status 2, not a rendezvous traceback.
"""
from __future__ import annotations

import os
import sys

# Variables torchrun sets for every rank; init_process_group("env://") reads them.
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

#: exit status for a run refused before it started (argparse uses it for bad arguments too).
USAGE_EXIT = 2


def launch_problems(usage: str) -> list[str]:
    """Why this process cannot run an NCCL overlap measurement (empty when it can)."""
    import torch

    problems = []
    if not torch.cuda.is_available():
        problems.append(f"needs one CUDA GPU per rank, but torch sees none (torch {torch.__version__}, "
                        f"CUDA build: {torch.version.cuda or 'none'})")
    missing = [v for v in TORCHRUN_VARS if v not in os.environ]
    if missing:
        problems.append(f"must be started by torchrun ({', '.join(missing)} unset): {usage}")
    elif torch.cuda.is_available() and int(os.environ["LOCAL_RANK"]) >= torch.cuda.device_count():
        problems.append(f"LOCAL_RANK={os.environ['LOCAL_RANK']} but only {torch.cuda.device_count()} GPU(s) "
                        f"are visible: use --nproc_per_node <= {torch.cuda.device_count()}")
    return problems


def refuse(prog: str, message: str) -> int:
    """Print ``prog: message`` as one line on stderr; return :data:`USAGE_EXIT` for ``main`` to return."""
    rank = os.environ.get("RANK")
    print(f"{prog}: {message}" if rank is None else f"{prog} [rank {rank}]: {message}", file=sys.stderr, flush=True)
    return USAGE_EXIT
