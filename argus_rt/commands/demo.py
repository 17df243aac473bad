"""`argus demo`: the guided main job.

Runs, in order, every step of a typical region query that this machine can do, by calling the
real subcommands in-process (nothing here is a special demo path):

1. `argus build`    compile the CUDA example in the three Argus modes and check the SASS footprint
2. `argus plan`     plan a latency + instruction-mix + barrier-count query over the ground-truth kernel
3. `argus discover` compile the Triton TMA matmul for sm_90 and list its async operation sites
4. `argus query`    run the query (needs a CUDA GPU; Nsight Compute for the attributed signals)

Steps that need a GPU or a tool this machine lacks are listed as skipped with the reason; a step
that fails makes the demo exit non-zero.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..resources import examples_dir
from ..tools import tool_or_none
from .options import add_workspace, workspace_path
from .output import make_console, rule

EXAMPLES = examples_dir()


@dataclass
class Step:
    title: str
    argv: list[str]
    needs: str = ""  # "" (CPU is enough), "nvcc", "gpu"


def default_steps(workspace: str) -> list[Step]:
    gt = str(EXAMPLES / "ground_truth")
    signals = "latency,instruction_mix,barrier_count"
    return [
        Step("Build the CUDA example in modes off / marker-only / trace",
             ["build", str(EXAMPLES / "cuda" / "nested_regions.cu"), "-I", str(EXAMPLES / "cuda")], "nvcc"),
        Step("Plan a region query (task DAG)",
             ["plan", gt, "--region", "ground_truth/stage_b", "--signals", signals]),
        Step("Discover async sites in the Triton TMA matmul (compiled for sm_90 on this machine)",
             ["discover", str(EXAMPLES / "triton"), "--region", "tma_matmul/kloop"]),
        Step("Run the region query on the GPU",
             ["query", gt, "--region", "ground_truth", "--signals", signals, "--workspace", workspace], "gpu"),
    ]


def register(sub) -> None:
    p = sub.add_parser("demo", help="guided demo: build, plan, discover and (with a GPU) run a region query")
    add_workspace(p, "workspace directory for the query step (default $ARGUS_WORKSPACE or ./.argus_workspace)")
    p.set_defaults(func=run)


def _gpu_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def run(args) -> int:
    from rich.table import Table

    from ..query import default_workspace

    console = make_console()
    gpu = _gpu_name()
    nvcc = tool_or_none("nvcc")
    have = {"": None, "nvcc": None if nvcc else "nvcc is not installed (see argus_rt.tools for where Argus looks)",
            "gpu": None if gpu else "no CUDA GPU visible to torch"}
    rule(console, "Argus demo")
    console.print(f"GPU: {gpu or 'none'}    nvcc: {nvcc or 'not found'}")

    results = []
    for step in default_steps(str(workspace_path(args) or default_workspace())):
        rule(console, step.title)
        missing = have[step.needs]
        if missing:
            console.print(f"[yellow]skipped[/]: {missing}; run `argus {' '.join(step.argv)}` on a machine with it")
            results.append((step, "skipped", missing, 0.0))
            continue
        console.print(f"$ argus {' '.join(step.argv)}")
        start = time.perf_counter()
        try:
            code = args.argus_main(step.argv)  # the CLI's main, set by argus_rt.cli.build_parser
        except Exception as exc:  # a step's crash is reported; the rest of the demo still runs
            console.print(f"[red]{type(exc).__name__}: {exc}[/]")
            code = 1
        elapsed = time.perf_counter() - start
        results.append((step, "ok" if code == 0 else f"failed (exit {code})", "", elapsed))

    table = Table(title="Argus demo summary")
    for col in ("step", "result", "seconds", "note"):
        table.add_column(col)
    for step, status, note, elapsed in results:
        table.add_row(step.title, status, f"{elapsed:.1f}", note)
    console.print(table)
    failed = [s for s, status, _, _ in results if status.startswith("failed")]
    if not gpu:
        console.print("Without a GPU the query step was skipped; on a GPU machine the same command runs it "
                      "and prints the region report.")
    return 1 if failed else 0
