"""The numba kind's checked run: launch a variant's cubin once, on fresh NumPy inputs, checked.

:func:`run_once` builds the variant (:mod:`argus_rt.kinds.numba.build`), loads the cubin with the
project's driver-API launcher (:class:`argus_rt.launch.CubinModule`, cuda-python), copies the launch's
NumPy inputs to the GPU, packs them as numba's kernel ABI lays them out
(:func:`~argus_rt.kinds.numba.launch.kernel_arguments`), launches once (under a
:class:`argus_rt.trace.TraceSession` when traced), copies the arrays back and compares the outputs the
NumPy reference names with it. The cubin launched is the one Argus built, not one numba's JIT makes.

``python -m argus_rt.kinds.run_variant run --program P --variant V`` does the same in a process of its
own (the kind registry's ``run_once`` hook): the run Nsight Compute profiles for the PC-to-region map.
:func:`collect_region_trace` is the traced run as ``argus.region_intervals/1`` evidence, decoded by the
CUDA kind's decoder (the ring protocol is argus.cuh's).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...backends.base import BackendUnavailableError
from .build import build_variant, check_abi
from .launch import NumbaLaunch, check_reference, kernel_arguments, make_inputs


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
    from ..cuda.run import intervals_document, traced_run

    res, raw = traced_run(run_once, program, outdir, config)
    doc = intervals_document(res["intervals"], res["trace"], NumbaLaunch.from_program(program).coord_kind)
    doc["reference_check"] = {"max_rel_err": res["max_rel_err"]}
    doc["cubin"] = {"symbol": res["symbol"], "name": Path(res["cubin"]).name}
    return doc, raw
