"""One variant of a program of any kind: its cubin (:func:`variant_cubin`), and
``python -m argus_rt.kinds.run_variant run --program P --variant V``, which builds and launches it
once, checked against its reference, in a process of its own.

That process is what Nsight Compute profiles (:func:`runner_argv`, :func:`runner_env`; the ``ncu``
and ``pcmap`` tool adapters run it). Each kind does the work (:mod:`argus_rt.kinds.cuda.run`,
:mod:`argus_rt.kinds.triton.run`); this module only picks the kind. It registers no backend adapter,
so running it as ``__main__`` never registers one twice.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from ..fsutil import atomic_write_text
from .cuda.run import VARIANT_MODES, build_variant, run_once, runner_facts
from .triton.run import run_triton_once, triton_cubin

# Where the process writes its phase times (``time.time()`` stamps), when the parent asks: how long a
# profiled run spends before, in and after the launch is what makes a query slow or fast. The file
# holds {"main", "run", "ran"} and, for a CUDA program with a runner that stamps its phases
# (``ctx.phase``), {"phases": {name: stamp at that phase's end}}.
TIMINGS_ENV = "ARGUS_RUN_TIMINGS"


def _write_timings(stamps: dict) -> None:
    path = os.environ.get(TIMINGS_ENV)
    if path:
        Path(path).write_text(json.dumps(stamps), encoding="utf-8")


def variant_cubin(program, variant: str) -> Path:
    """The cubin of ``variant`` for a CUDA or Triton program."""
    if program.kind == "triton":
        return triton_cubin(program, variant)
    return build_variant(program, variant)


def runner_argv(program, variant: str, outdir: Path) -> list[str]:
    """argv of a separate process that runs ``variant`` once (what Nsight Compute profiles)."""
    path = Path(outdir) / "program.json"
    prog = dataclasses.replace(program, root=str(Path(program.root).resolve())) if program.root else program
    atomic_write_text(path, json.dumps(prog.to_dict()))
    return [sys.executable, "-m", "argus_rt.kinds.run_variant", "run", "--program", str(path), "--variant", variant]


def runner_env() -> dict:
    """Environment for :func:`runner_argv`: the same as a worker child's (this copy of argus_rt
    importable, multicast off)."""
    from ..gpu_env import child_env

    return child_env()


def main(argv: list[str] | None = None) -> int:
    from ..program import ProgramVersion

    stamps = {"main": time.time()}  # interpreter start and Argus imports are before this

    parser = argparse.ArgumentParser(prog="python -m argus_rt.kinds.run_variant")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="build and launch one variant of a program once, checked")
    run.add_argument("--program", required=True, help="ProgramVersion JSON (ProgramVersion.to_dict())")
    run.add_argument("--variant", default="marker_only", choices=sorted(VARIANT_MODES))
    args = parser.parse_args(argv)
    program = ProgramVersion.from_dict(json.loads(Path(args.program).read_text()))
    stamps["run"] = time.time()
    print(f"argus-run {program.name}:{args.variant}: running (build unless cached, torch, CUDA context, launch, "
          "reference check)", file=sys.stderr, flush=True)
    res = run_triton_once(program, args.variant) if program.kind == "triton" else run_once(program, args.variant)
    stamps["ran"] = time.time()  # torch import, CUDA context, build (cached), the launch under replay, checks
    if isinstance(res.get("phase_stamps"), dict):
        stamps["phases"] = res.pop("phase_stamps")
    _write_timings(stamps)
    print(f"argus-run {program.name}:{args.variant}: done in {stamps['ran'] - stamps['run']:.1f} s",
          file=sys.stderr, flush=True)
    jit = res.get("jit_check") or {}
    print(f"argus-run {program.name}:{args.variant} kernel={res['symbol']} max_rel_err={res['max_rel_err']}"
          + (f" jit_ttgir_sha256={jit['ttgir_sha256']}" if jit else "")
          + "".join(f" {k}={json.dumps(v)}" for k, v in runner_facts(res).items() if program.kind == "cuda"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
