"""The CuPy kind's ``trace`` and ``pcmap`` adapters, registered for ``kind="cupy"``.

Both are the shared adapters with the CuPy kind's build and run in place of the CUDA kind's:

* ``trace`` (:class:`CupyTrace`, the latency recipe's reference trace): the traced variant launched
  by CuPy under a :class:`argus_rt.trace.TraceSession`, decoded and paired by :mod:`argus_rt.trace`
  and published as ``argus.region_intervals/1`` by the CUDA kind's
  :func:`~argus_rt.kinds.cuda.run.intervals_document`; config, effects and outputs are
  :class:`argus_rt.backends.trace.TraceAdapter`'s.
* ``pcmap`` (:class:`CupyPcMap`, the PC-to-region map and the per-PC counters that instruction_mix and
  barrier_count read): :func:`mapping_run`, the mapping run of :mod:`argus_rt.backends.pcmap` on the
  CuPy marker-only cubin, with Nsight Compute (:mod:`argus_rt.backends.ncu`) profiling
  ``python -m argus_rt.kinds.cupy.run`` (:func:`~argus_rt.kinds.cupy.run.runner_argv`).

The runtime finds these through ``BUILTIN_KIND_BACKEND_MODULES`` in :mod:`argus_rt.backends.base`.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ...backends import ncu
from ...backends.base import register_backend
from ...backends.pcmap import PcMapAdapter, StepClock, check_same_binary, map_document
from ...backends.trace import TraceAdapter
from ...gpu_env import child_env
from ...sass import (
    SassFunction,
    disassemble,
    indirect_branch_targets,
    kernel_key,
    parse_sass,
    sass_arch,
    select_function,
    with_indirect_targets,
)
from ..cuda.run import intervals_document
from ..run_variant import TIMINGS_ENV
from .build import build_variant
from .launch import CupyLaunch
from .run import import_cupy, run_once, runner_argv


class CupyTrace(TraceAdapter):
    """Region tracing of a CuPy program's traced variant (config ``capacity``, ``clock``, as for CUDA)."""

    def available(self) -> tuple[bool, str]:
        ok, why = super().available()
        if not ok:
            return ok, why
        try:
            import_cupy()
        except Exception as exc:  # BackendUnavailableError with the reason
            return False, str(exc)
        return True, ""

    def collect(self, ctx) -> dict[str, Path]:
        self.validate_config(ctx.config)
        cfg = {"capacity": int(ctx.config.get("capacity", 256)), "clock": ctx.config.get("clock", "globaltimer")}
        raw = Path(ctx.outdir) / "raw_trace.npz"
        res = run_once(ctx.program, "traced", trace_config=cfg, raw_trace=raw)
        doc = intervals_document(res["intervals"], res["trace"], CupyLaunch.from_program(ctx.program).coord_kind)
        doc["reference_check"] = res["reference_check"]
        return {"region_intervals": ctx.write_json("region_intervals", doc), "raw_trace": raw}


def _function(listing: str, cubin: Path, kernel: str) -> SassFunction:
    """``kernel``'s SASS from a listing of ``cubin``, with the targets of its jump tables."""
    function = select_function(parse_sass(listing), kernel_key(kernel))
    return with_indirect_targets(function, indirect_branch_targets(cubin).get(function.name, {}))


def _device_capability() -> tuple[int, int]:
    cc = int(import_cupy().cuda.Device().compute_capability)
    return cc // 10, cc % 10


def mapping_run(program, outdir: Path, *, sections: tuple[str, ...] = ("SourceCounters",)):
    """:func:`argus_rt.backends.pcmap.mapping_run` for a CuPy program: the same steps and documents, on
    the cubin :func:`~argus_rt.kinds.cupy.build.build_variant` builds, profiled in the CuPy runner."""
    kernel = CupyLaunch.from_program(program).kernel
    clock = StepClock()
    clock.step(f"{program.name}: building the marker-only variant (NVRTC as CuPy compiles; cached by content)")
    cubin = build_variant(program, "marker_only")
    clock.lap("build")
    clock.step(f"disassembling {cubin.name} (cuobjdump) and reading its CFG")
    listing = disassemble(cubin)
    ncu.check_arch(sass_arch(listing), _device_capability())
    function = _function(listing, cubin, kernel)
    env = child_env({TIMINGS_ENV: str(Path(outdir) / "run_timings.json")})
    order = ("SourceCounters",) + tuple(s for s in sections if s != "SourceCounters")
    cmd = ncu.ncu_command(runner_argv(program, "marker_only", Path(outdir)), kernel, launches=1, sections=order)
    clock.lap("disassemble")
    clock.step(f"Nsight Compute on kernel {kernel} only, its first launch, kernel replay "
               f"({len(function.instructions)} SASS instructions); the CuPy runner's lines follow. Command: "
               + " ".join(cmd))
    raw, profiles = ncu.run_ncu_command(cmd, outdir=outdir, env=env)
    clock.profiled_run(Path(env[TIMINGS_ENV]))
    clock.step(f"mapping {len(function.instructions)} PCs to regions (CFG, -lineinfo view)")
    profile = ncu.select_profile(profiles, kernel)
    check_same_binary(function, profile.function())
    doc = map_document(function, _function(disassemble(cubin, tool="nvdisasm", line_info=True), cubin, kernel), profile)
    clock.lap("map")
    ncu_args = cmd[1:cmd.index(sys.executable)] if sys.executable in cmd else cmd[1:]
    doc["provenance"] = {"cubin": cubin.name, "kernel_symbol": function.name, "ncu_csv": raw.name,
                         "weights": "ncu 'Instructions Executed' (warp-level) of the same cubin, launched by CuPy",
                         "ncu_command": ncu_args, "seconds": clock.seconds}
    return doc, profile


class CupyPcMap(PcMapAdapter):
    """The PC-to-region map of a CuPy program and its mapping run's per-PC counters (config ``sections``
    as for CUDA; the kernel is the launch's)."""

    def collect(self, ctx) -> dict[str, Path]:
        self.validate_config(ctx.config)
        doc, profile = mapping_run(ctx.program, Path(ctx.outdir),
                                   sections=tuple(ctx.config.get("sections", ("SourceCounters",))))
        written = {name: ctx.write_json(name, body) for name, body in
                   (("pc_region_counts", doc), ("pc_counters", profile.to_evidence()))}
        return {**written, "ncu_csv": Path(ctx.outdir) / "ncu_source_sass.csv"}


register_backend(CupyTrace(), kind="cupy")
register_backend(CupyPcMap(), kind="cupy")
