"""The numba kind's checked run: launch a variant's cubin once, on fresh NumPy inputs, checked.

:func:`run_once` builds the variant (:mod:`argus_rt.kinds.numba.build`), loads the cubin with the
project's driver-API launcher (:class:`argus_rt.launch.CubinModule`, cuda-python), copies the launch's
NumPy inputs to the GPU, packs them as numba's kernel ABI lays them out
(:func:`~argus_rt.kinds.numba.launch.kernel_arguments`), launches once (under a
:class:`argus_rt.trace.TraceSession` when traced), copies the arrays back and compares the outputs the
NumPy reference names with it. The cubin launched is the one Argus built, not one numba's JIT makes.

``python -m argus_rt.kinds.numba.run run --program P --variant V`` does the same in a process of its
own: the run Nsight Compute profiles for the PC-to-region map (:mod:`argus_rt.kinds.numba.adapters`).
:func:`collect_region_trace` is the traced run as ``argus.region_intervals/1`` evidence, decoded by the
CUDA kind's decoder (the ring protocol is argus.cuh's).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ...backends.base import BackendUnavailableError
from .build import build_variant, check_abi
from .launch import VARIANT_MODES, NumbaLaunch, check_reference, kernel_arguments, make_inputs


def run_once(program, variant: str, *, trace_config: dict | None = None, raw_trace: Path | None = None,
             check: bool = True, seed: int | None = None) -> dict:
    """Build ``variant``, launch it once, check it; with ``trace_config`` ({capacity, clock}: a traced
    variant) also decode its rings (saved to ``raw_trace``, .npz, when given).
    Returns {"cubin", "symbol", "max_rel_err", "trace"?, "intervals"?}."""
    import torch

    from ...launch import CubinModule

    if not torch.cuda.is_available():
        raise BackendUnavailableError(f"no CUDA GPU visible to torch {torch.__version__}")
    launch = NumbaLaunch.from_program(program)
    built = build_variant(program, variant)
    check_abi(program, built.compiled)
    module = CubinModule.load(built.cubin)
    inputs = make_inputs(launch, seed)
    device = {n: torch.from_numpy(v).cuda() for n, v in inputs.items() if isinstance(v, np.ndarray)}
    args = kernel_arguments(launch, list(built.params), inputs, {n: t.data_ptr() for n, t in device.items()})
    session = None
    if trace_config is not None:
        from ...trace import TraceConfig, TraceSession

        session = TraceSession(module, TraceConfig(**launch.trace_geometry(), **trace_config))
        session.arm()
    module.launch(built.symbol, launch.grid, launch.block, args)  # the launch ncu -c 1 records
    torch.cuda.synchronize()
    result = {"cubin": str(built.cubin), "symbol": built.symbol, "max_rel_err": None}
    if check:
        result["max_rel_err"] = check_reference(launch, inputs, {n: t.cpu().numpy() for n, t in device.items()})
    if session is not None:
        from ...trace import pair_intervals

        result["trace"] = session.decode(known_ids=[r.id for r in program.regions])
        if raw_trace is not None:
            session.save(raw_trace)
        result["intervals"] = pair_intervals(result["trace"])
    return result


def collect_region_trace(program, outdir: Path, config: dict) -> tuple[dict, Path]:
    """The traced variant's run as ``argus.region_intervals/1`` (and the raw rings' .npz path).
    ``config``: the trace adapter's (``capacity``, default 256; ``clock``, default "globaltimer")."""
    from ..cuda.run import intervals_document

    raw = Path(outdir) / "raw_trace.npz"
    trace_config = {"capacity": int(config.get("capacity", 256)), "clock": config.get("clock", "globaltimer")}
    res = run_once(program, "traced", trace_config=trace_config, raw_trace=raw)
    doc = intervals_document(res["intervals"], res["trace"], NumbaLaunch.from_program(program).coord_kind)
    doc["reference_check"] = {"max_rel_err": res["max_rel_err"]}
    doc["cubin"] = {"symbol": res["symbol"], "name": Path(res["cubin"]).name}
    return doc, raw


def runner_argv(program, variant: str, outdir: Path) -> list[str]:
    """argv of a process that runs ``variant`` once (what Nsight Compute profiles)."""
    from ...fsutil import atomic_write_text

    path = Path(outdir) / "program.json"
    prog = dataclasses.replace(program, root=str(Path(program.root).resolve())) if program.root else program
    atomic_write_text(path, json.dumps(prog.to_dict()))
    return [sys.executable, "-m", "argus_rt.kinds.numba.run", "run", "--program", str(path), "--variant", variant]


def main(argv: list[str] | None = None) -> int:
    from ...program import ProgramVersion
    from ..run_variant import TIMINGS_ENV

    stamps = {"main": time.time()}
    parser = argparse.ArgumentParser(prog="python -m argus_rt.kinds.numba.run")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="build and launch one variant of a numba program once, checked")
    run.add_argument("--program", required=True, help="ProgramVersion JSON (ProgramVersion.to_dict())")
    run.add_argument("--variant", default="marker_only", choices=sorted(VARIANT_MODES))
    args = parser.parse_args(argv)
    program = ProgramVersion.from_dict(json.loads(Path(args.program).read_text(encoding="utf-8")))
    stamps["run"] = time.time()
    res = run_once(program, args.variant)
    stamps["ran"] = time.time()
    if os.environ.get(TIMINGS_ENV):  # the mapping run's step split (argus_rt.backends.pcmap.StepClock)
        Path(os.environ[TIMINGS_ENV]).write_text(json.dumps(stamps), encoding="utf-8")
    print(f"argus-run {program.name}:{args.variant} kernel={res['symbol']} max_rel_err={res['max_rel_err']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
