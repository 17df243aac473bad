"""``python -m argus_rt.backends.run_variant run --program P --variant V``: build and launch one
variant of a program once, checked against its reference, in a process of its own.

This is what Nsight Compute profiles (see :func:`argus_rt.backends.trace.runner_argv`). It is a
module of its own so that the trace adapter is imported under one name only: run as ``__main__``,
``trace.py`` would register its adapter a second time when the CUDA runner imports it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .trace import VARIANT_MODES, run_once, run_triton_once, runner_facts

# Where the process writes its phase times (``time.time()`` stamps), when the parent asks: how long a
# profiled run spends before, in and after the launch is what makes a query slow or fast.
TIMINGS_ENV = "ARGUS_RUN_TIMINGS"


def _write_timings(stamps: dict) -> None:
    path = os.environ.get(TIMINGS_ENV)
    if path:
        Path(path).write_text(json.dumps(stamps), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    from ..program import ProgramVersion

    stamps = {"main": time.time()}  # interpreter start and Argus imports are before this

    parser = argparse.ArgumentParser(prog="python -m argus_rt.backends.run_variant")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="build and launch one variant of a program once, checked")
    run.add_argument("--program", required=True, help="ProgramVersion JSON (ProgramVersion.to_dict())")
    run.add_argument("--variant", default="marker_only", choices=sorted(VARIANT_MODES))
    args = parser.parse_args(argv)
    program = ProgramVersion.from_dict(json.loads(Path(args.program).read_text()))
    stamps["run"] = time.time()
    res = run_triton_once(program, args.variant) if program.kind == "triton" else run_once(program, args.variant)
    stamps["ran"] = time.time()  # torch import, CUDA context, build (cached), the launch under replay, checks
    _write_timings(stamps)
    jit = res.get("jit_check") or {}
    print(f"argus-run {program.name}:{args.variant} kernel={res['symbol']} max_rel_err={res['max_rel_err']}"
          + (f" jit_ttgir_sha256={jit['ttgir_sha256']}" if jit else "")
          + "".join(f" {k}={json.dumps(v)}" for k, v in runner_facts(res).items() if program.kind == "cuda"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
