"""The ``trace`` tool adapter, for every program kind: each kind's run does the work.

Region tracing (backend ``trace``, evidence ``argus.region_intervals/1``, qualification *observed*).
For a program of a kind with a ``trace`` hook (:mod:`argus_rt.kinds.registry`; CUDA, CuPy, numba)
:class:`TraceAdapter` calls it: the kind builds its ``traced`` variant, launches it once under a
:class:`argus_rt.trace.TraceSession`, checks its outputs against the program's reference, decodes the
rings, pairs begin/end per warp and returns one row per region occurrence (e.g.
:func:`argus_rt.kinds.cuda.run.collect_region_trace`). A kind may name an adapter of its own instead
(the registry's ``adapters``), kept in its own folder: Triton's is
:class:`argus_rt.kinds.triton.trace_adapter.TritonProbeTrace` (the region-traced TTGIR variant, the
traced reference or one forced-wait probe).

This module knows the adapter contract (config keys, effects, outputs); how a variant is built and
run is the kind's. Kind modules are imported when a run needs them, so importing the adapter loads
neither torch nor Triton.
"""
from __future__ import annotations

from pathlib import Path

from ..evidence import RegionIntervals
from ..kinds.errors import ProgramRunError
from ..kinds.registry import get_kind
from .base import BackendAdapter, register_backend


class TraceAdapter(BackendAdapter):
    """Region tracing of a program's traced variant, by its kind's ``trace`` hook. Config: ``capacity``
    (records per warp ring, power of two, default 256), ``clock`` ("globaltimer" default, or "clock64").

    Besides ``region_intervals`` it keeps the raw rings as ``raw_trace`` (.npz): no recipe needs
    them, but ``argus query --chrome`` and ``argus trace`` decode them again (exact nesting)."""

    name = "trace"
    # The traced run is the reference execution of the latency recipe (which declares no effects):
    # its small marker cost is measured separately (benchmarks/trace_overhead.py), not hidden.
    effects = frozenset()
    outputs = ("region_intervals",)
    VALID_KEYS = ("capacity", "clock")

    def validate_config(self, config: dict) -> None:
        bad = sorted(set(config) - set(self.VALID_KEYS))
        if bad:
            raise ValueError(f"unknown trace config key(s) {bad}; valid: {', '.join(self.VALID_KEYS)}")

    def available(self) -> tuple[bool, str]:
        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        return torch.cuda.is_available(), "no CUDA GPU visible to torch"

    def collect(self, ctx) -> dict[str, Path]:
        self.validate_config(ctx.config)
        kind = get_kind(ctx.program.kind)
        if kind.trace is None:
            raise ProgramRunError(f"region tracing of {ctx.program.kind} programs is not implemented (that kind "
                                  "has no 'trace' hook in argus_rt.kinds.registry)")
        doc, raw = kind.call("trace", ctx.program, Path(ctx.outdir), ctx.config)
        return {**ctx.publish(RegionIntervals.from_document(doc, f"{ctx.program.kind} trace")), "raw_trace": raw}


register_backend(TraceAdapter())
