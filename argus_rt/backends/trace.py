"""The ``trace`` tool adapter, for every program kind: each kind's run does the work.

Region tracing (backend ``trace``, evidence ``argus.region_intervals/1``, qualification *observed*).
For a program of a kind with a ``trace`` hook (:mod:`argus_rt.kinds.registry`; CUDA, CuPy, numba)
:class:`TraceAdapter` calls it: the kind builds its ``traced`` variant, launches it once under a
:class:`argus_rt.trace.TraceSession`, checks its outputs against the program's reference, decodes the
rings, pairs begin/end per warp and returns one row per region occurrence (e.g.
:func:`argus_rt.kinds.cuda.run.collect_region_trace`). A kind may name an adapter of its own instead
(the registry's ``adapters``): Triton names :class:`TritonProbeTrace`, for the region-traced TTGIR
variant, the traced reference or one forced-wait probe (:mod:`argus_rt.kinds.triton.region_trace`,
:mod:`argus_rt.kinds.triton.probes`).

This module knows the adapter contract (config keys, effects, outputs); how a variant is built and
run is the kind's. Kind modules are imported when a run needs them, so importing the adapter loads
neither torch nor Triton.
"""
from __future__ import annotations

from pathlib import Path

from ..evidence import IterationWaits, OpEvents, RegionIntervals
from ..kinds.errors import ProgramRunError
from ..kinds.registry import get_kind
from .base import BackendAdapter, BackendUnavailableError, register_backend


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


class TritonProbeTrace(BackendAdapter):
    """Backend ``trace`` for Triton programs, three configurations:

    * ``{"probe": {...}}``: runs the probe built by the ``forced_wait_probe`` Transform (its
      ``ttgir`` output) and publishes ``argus.op_events/1`` (effects: forces completion, changes
      overlap, perturbs timing);
    * ``{"reference": "iteration_waits"}``: runs the traced reference (consumer wait timed per
      iteration) and publishes ``argus.iteration_waits/1`` (effect: perturbs timing);
    * ``{}`` (the latency recipe): runs the region-traced variant
      (:mod:`argus_rt.kinds.triton.region_trace`, one %globaltimer record per marker per CTA)
      and publishes ``argus.region_intervals/1`` (effect: perturbs timing)."""

    name = "trace"
    effects = frozenset({"forces_completion", "changes_overlap", "perturbs_timing"})
    # The region-tracing config also publishes "region_intervals"; it is not listed here because
    # the planner (probe_outputs) reads this tuple as what a *probe* run publishes besides op_events.
    outputs = ("op_events", "iteration_waits")
    REFERENCES = ("iteration_waits",)

    def available(self) -> tuple[bool, str]:
        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        if not torch.cuda.is_available():
            return False, f"no CUDA GPU visible to torch {torch.__version__}"
        if torch.cuda.get_device_capability(0)[0] != 9:
            return False, f"TMA probes need a Hopper GPU, found {torch.cuda.get_device_name(0)}"
        return True, ""

    def validate_config(self, config: dict) -> None:
        if set(config) == {"probe"}:
            return
        if set(config) == {"reference"} and config["reference"] in self.REFERENCES:
            return
        if not config:  # region tracing
            return
        raise ValueError(f"trace for Triton programs takes config {{}} (region tracing), {{'probe': {{...}}}} "
                         f"(a forced-wait probe) or {{'reference': one of {list(self.REFERENCES)}}}; got {config!r}")

    def outputs_for(self, config: dict) -> tuple[str, ...]:
        """What a run with ``config`` publishes: one mode per run, so one output."""
        self.validate_config(config)
        if "probe" in config:
            return ("op_events",)
        return ("iteration_waits",) if "reference" in config else ("region_intervals",)

    def effects_for(self, config: dict) -> frozenset:
        # only a probe forces completion; anything else is refused by validate_config with its
        # reason, so the worker's effect check must not pre-empt that message
        return frozenset(self.effects) if "probe" in config else frozenset({"perturbs_timing"})

    def collect(self, ctx):
        publishes = self.outputs_for(ctx.config)
        asked = tuple(getattr(ctx.task, "outputs", ()) or ())
        if set(asked) - set(publishes):
            raise ValueError(f"Triton trace run {ctx.task.id} declares outputs {sorted(asked)}, but its config "
                             f"{ctx.config!r} publishes only {list(publishes)}: two trace modes were merged into "
                             "one run (each mode is its own kernel variant and needs its own run)")
        if not ctx.config:
            from ..kinds.triton.region_trace import collect_triton_region_trace

            doc = collect_triton_region_trace(ctx.program, ctx.outdir / "build",
                                              repeats=int(ctx.sampling.get("repeats", 1)))
            return ctx.publish(RegionIntervals.from_document(doc, "Triton region trace"))
        if "reference" in ctx.config:
            from ..kinds.triton.probes import collect_triton_reference

            doc = collect_triton_reference(ctx.program, ctx.outdir / "build",
                                           repeats=int(ctx.sampling.get("repeats", 1)))
            return ctx.publish(IterationWaits.from_document(doc, "Triton traced reference"))

        ttgir = ctx.inputs.get("ttgir")
        if ttgir is None:
            raise BackendUnavailableError(f"probe run {ctx.task.id} has no 'ttgir' input from its Transform; "
                                          f"inputs: {sorted(ctx.inputs)}")
        from ..kinds.triton.probes import collect_triton_probe

        doc = collect_triton_probe(ctx.program, Path(ttgir), ctx.outdir / "build",
                                   repeats=int(ctx.sampling.get("repeats", 1)))["op_events"]
        return ctx.publish(OpEvents.from_document(doc, f"probe run {ctx.task.id}"))


register_backend(TraceAdapter())
# TritonProbeTrace is registered for the Triton kind by the kind registry (its ``adapters``); the
# Transform handler that builds the probes is argus_rt.runtime.async_handlers
