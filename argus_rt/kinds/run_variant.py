"""One variant of a program of any kind: its cubin (:func:`variant_cubin`), and
``python -m argus_rt.kinds.run_variant run --program P --variant V``, which builds and launches it
once, checked against its reference, in a process of its own.

That process is what Nsight Compute profiles (:func:`runner_argv`, :func:`runner_env`; the ``ncu``
and ``pcmap`` tool adapters run it). Each kind does the work (its ``variant_cubin`` and ``run_once``
hooks in the kind registry, :mod:`argus_rt.kinds.registry`); this module only looks the kind up. It
registers no backend adapter, so running it as ``__main__`` never registers one twice.

For a kind that ``hands_over`` (CUDA) the parent may hand over what it already has: ``--cubin`` and
``--symbol`` (the variant it built and read: nothing is built or disassembled again) and ``--outputs
PATH`` (save the launch's arguments there instead of checking them; the parent checks them with the
kind's ``check_saved_run``). With ``--outputs`` and a launch described in JSON, a CUDA program's
process imports neither torch nor Triton: numpy inputs, the driver API, the launch.
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
from ..program import VARIANTS
from .registry import get_kind, kinds

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
    """The cubin of ``variant`` of a program of any kind (its kind's ``variant_cubin`` hook)."""
    return get_kind(program.kind).call("variant_cubin", program, variant)


def runner_argv(program, variant: str, outdir: Path, *, cubin: Path | None = None, symbol: str | None = None,
                outputs: Path | None = None) -> list[str]:
    """argv of a separate process that runs ``variant`` once (what Nsight Compute profiles); the
    keywords are the hand-overs of a kind that takes them (module docstring)."""
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
    run.add_argument("--variant", default="marker_only", choices=[v for v in VARIANTS if v != "probe"])
    run.add_argument("--cubin", help="the variant's cubin, as the parent built it (not built again)")
    run.add_argument("--symbol", help="the kernel's symbol in --cubin, as the parent read it")
    run.add_argument("--outputs", help="save the launch's arguments here (.npz) for the parent's reference "
                                       "check instead of checking them (no torch in this process)")
    args = parser.parse_args(argv)
    program = ProgramVersion.from_dict(json.loads(Path(args.program).read_text()))
    kind = get_kind(program.kind)
    handovers = {k: v for k, v in (("cubin", args.cubin and Path(args.cubin)), ("symbol", args.symbol),
                                   ("outputs", args.outputs and Path(args.outputs))) if v}
    if handovers and not kind.hands_over:
        takers = " or ".join(k.name for k in kinds() if k.hands_over)
        parser.error(f"--cubin, --symbol and --outputs are for {takers} programs; a {program.kind} program's run "
                     "builds its kernel and checks it itself")
    if args.variant not in kind.runner_variants:
        parser.error(f"a {program.kind} program's runner runs {', '.join(kind.runner_variants)}, not {args.variant!r}")
    stamps["run"] = time.time()
    what = kind.runner_says
    if kind.hands_over:
        what = ", ".join(["cubin given" if args.cubin else "build unless cached", what,
                          "outputs saved for the parent's check" if args.outputs else "reference check"])
    print(f"argus-run {program.name}:{args.variant}: running ({what})", file=sys.stderr, flush=True)
    res = kind.call("run_once", program, args.variant, **handovers)
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
          + "".join(f" {k}={json.dumps(v)}" for k, v in (kind.call("runner_facts", res) if kind.runner_facts else {}).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
