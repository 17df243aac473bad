"""One variant of a program of any kind: its cubin (:func:`variant_cubin`), and
``python -m argus_rt.kinds.run_variant run --program P --variant V``, which builds and launches it
once, checked against its reference, in a process of its own.

That process is what Nsight Compute profiles (:func:`runner_argv`, :func:`runner_env`; the ``ncu``
and ``pcmap`` tool adapters run it). Each kind does the work (:mod:`argus_rt.kinds.cuda.run`,
:mod:`argus_rt.kinds.triton.run`); this module only picks the kind. It registers no backend adapter,
so running it as ``__main__`` never registers one twice.

For a CUDA program the parent may hand over what it already has: ``--cubin`` and ``--symbol`` (the
variant it built and read: nothing is built or disassembled again) and ``--outputs PATH`` (save the
launch's arguments there instead of checking them; the parent checks them with
:func:`argus_rt.kinds.cuda.run.check_saved_run`). With ``--outputs`` and a launch described in
JSON, the process imports neither torch nor Triton: numpy inputs, the driver API, the launch.
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


def runner_argv(program, variant: str, outdir: Path, *, cubin: Path | None = None, symbol: str | None = None,
                outputs: Path | None = None) -> list[str]:
    """argv of a separate process that runs ``variant`` once (what Nsight Compute profiles); the
    keywords are the CUDA kind's hand-overs (module docstring)."""
    path = Path(outdir) / "program.json"
    prog = dataclasses.replace(program, root=str(Path(program.root).resolve())) if program.root else program
    atomic_write_text(path, json.dumps(prog.to_dict()))
    argv = [sys.executable, "-m", "argus_rt.kinds.run_variant", "run", "--program", str(path), "--variant", variant]
    for flag, value in (("--cubin", cubin), ("--symbol", symbol), ("--outputs", outputs)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


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
    run.add_argument("--cubin", help="CUDA: the variant's cubin, as the parent built it (not built again)")
    run.add_argument("--symbol", help="CUDA: the kernel's symbol in --cubin, as the parent read it")
    run.add_argument("--outputs", help="CUDA: save the launch's arguments here (.npz) for the parent's reference "
                                       "check instead of checking them (no torch in this process)")
    args = parser.parse_args(argv)
    program = ProgramVersion.from_dict(json.loads(Path(args.program).read_text()))
    if program.kind == "triton" and (args.cubin or args.symbol or args.outputs):
        parser.error("--cubin, --symbol and --outputs are for CUDA programs; a Triton program's run compiles "
                     "its kernel and checks it itself")
    stamps["run"] = time.time()
    if program.kind == "triton":
        what = "compile (cached), torch, CUDA context, launch, reference check, JIT check"
    else:
        what = ", ".join(["cubin given" if args.cubin else "build unless cached", "CUDA context", "launch",
                          "outputs saved for the parent's check" if args.outputs else "reference check"])
    print(f"argus-run {program.name}:{args.variant}: running ({what})", file=sys.stderr, flush=True)
    if program.kind == "triton":
        res = run_triton_once(program, args.variant)
    else:
        res = run_once(program, args.variant, cubin=Path(args.cubin) if args.cubin else None, symbol=args.symbol,
                       outputs=Path(args.outputs) if args.outputs else None)
    stamps["ran"] = time.time()  # CUDA context, build (cached) or the given cubin, the launch under replay, checks
    if isinstance(res.get("phase_stamps"), dict):
        stamps["phases"] = res.pop("phase_stamps")
    _write_timings(stamps)
    print(f"argus-run {program.name}:{args.variant}: done in {stamps['ran'] - stamps['run']:.1f} s",
          file=sys.stderr, flush=True)
    jit = res.get("jit_check") or {}
    print(f"argus-run {program.name}:{args.variant} kernel={res['symbol']} max_rel_err={res['max_rel_err']}"
          + (f" outputs={res['outputs']}" if res.get("outputs") else "")
          + (f" jit_ttgir_sha256={jit['ttgir_sha256']}" if jit else "")
          + "".join(f" {k}={json.dumps(v)}" for k, v in runner_facts(res).items() if program.kind == "cuda"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
