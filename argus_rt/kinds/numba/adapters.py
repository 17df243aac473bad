"""The ``trace`` and ``pcmap`` tool adapters for numba programs (registered for ``kind="numba"``).

Both are the CUDA kind's adapters with the numba kind's build and run behind them; everything else
(config keys, effects, availability, the Nsight Compute command and its parsing, the SASS CFG, the
PC-to-region map, the trace decoder) is the shared code, called through its public functions:

* ``trace`` (:class:`NumbaTrace`): the traced variant's run, :func:`argus_rt.kinds.numba.run.collect_region_trace`;
* ``pcmap`` (:class:`NumbaPcMap`): the mapping run of :mod:`argus_rt.backends.pcmap` on the marker-only
  cubin of :func:`argus_rt.kinds.numba.build.build_variant`, profiled in the runner
  ``python -m argus_rt.kinds.numba.run`` (instruction_mix, barrier_count and stall_reasons read its
  per-PC counters, as for CUDA programs).

They exist because :func:`argus_rt.kinds.run_variant.variant_cubin` and its ``python -m`` runner pick
between the CUDA and Triton kinds only; once those take a kind from a table, both adapters go and the
generic ones serve numba programs unchanged.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ...backends import ncu
from ...backends.base import register_backend
from ...backends.pcmap import PcMapAdapter, StepClock, check_same_binary, map_document
from ...backends.trace import TraceAdapter


class NumbaTrace(TraceAdapter):
    """Region tracing of a numba program's traced variant (config: ``capacity``, ``clock``)."""

    effects = frozenset({"perturbs_timing"})  # each marker is a call of argus_numba_emit

    def collect(self, ctx) -> dict[str, Path]:
        from .run import collect_region_trace

        self.validate_config(ctx.config)
        doc, raw = collect_region_trace(ctx.program, Path(ctx.outdir), ctx.config)
        return {"region_intervals": ctx.write_json("region_intervals", doc), "raw_trace": raw}


def mapping_run(program, outdir: Path, *, sections: tuple[str, ...] = ("SourceCounters",)):
    """:func:`argus_rt.backends.pcmap.mapping_run` for a numba program: (the ``argus.pc_region_counts/1``
    document of its marker-only cubin, that run's Nsight Compute profile)."""
    import torch

    from ...sass import disassemble, indirect_branch_targets, parse_sass, sass_arch, select_function
    from ...sass import with_indirect_targets as with_targets
    from ..run_variant import TIMINGS_ENV, runner_env
    from .build import build_variant
    from .run import runner_argv

    clock = StepClock()
    clock.step(f"{program.name}: building the marker-only variant (numba, then nvcc; cached by content hash)")
    built = build_variant(program, "marker_only")
    clock.lap("build")
    listing, tables = disassemble(built.cubin), indirect_branch_targets(built.cubin)
    ncu.check_arch(sass_arch(listing), torch.cuda.get_device_capability())

    def function_of(text):
        found = select_function(parse_sass(text), built.symbol)
        return with_targets(found, tables.get(found.name, {}))

    function = function_of(listing)
    env = {**runner_env(), TIMINGS_ENV: str(Path(outdir) / "run_timings.json")}
    sections = ("SourceCounters",) + tuple(s for s in sections if s != "SourceCounters")
    cmd = ncu.ncu_command(runner_argv(program, "marker_only", outdir), built.symbol, launches=1, sections=sections)
    clock.lap("disassemble")
    clock.step(f"Nsight Compute on {built.symbol}, its first launch ({len(function.instructions)} SASS "
               f"instructions): {' '.join(cmd)}")
    raw, profiles = ncu.run_ncu_command(cmd, outdir=outdir, env=env)
    clock.profiled_run(Path(env[TIMINGS_ENV]))
    profile = ncu.select_profile(profiles, built.symbol)
    check_same_binary(function, profile.function())
    doc = map_document(function, function_of(disassemble(built.cubin, tool="nvdisasm", line_info=True)), profile)
    clock.lap("map")
    doc["provenance"] = {"cubin": built.cubin.name, "kernel_symbol": function.name, "ncu_csv": raw.name,
                         "weights": "ncu 'Instructions Executed' (warp-level) of the same cubin",
                         "ncu_command": cmd[1:cmd.index(sys.executable)], "seconds": clock.seconds,
                         "numba_entry": built.compiled.numba_entry}
    return doc, profile


class NumbaPcMap(PcMapAdapter):
    """The mapping run (n(r, p) and per-PC counters) of a numba program's marker-only cubin."""

    def collect(self, ctx) -> dict[str, Path]:
        self.validate_config(ctx.config)
        outdir = Path(ctx.outdir)
        doc, profile = mapping_run(ctx.program, outdir, sections=tuple(ctx.config.get("sections", ())))
        return {"pc_region_counts": ctx.write_json("pc_region_counts", doc),
                "pc_counters": ctx.write_json("pc_counters", profile.to_evidence()),
                "ncu_csv": outdir / "ncu_source_sass.csv"}


register_backend(NumbaTrace(), kind="numba")
register_backend(NumbaPcMap(), kind="numba")
