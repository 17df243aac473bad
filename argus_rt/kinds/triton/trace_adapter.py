"""The Triton kind's ``trace`` adapter (named in its :class:`~argus_rt.kinds.registry.Kind`'s ``adapters``):
the tool adapter contract of :mod:`argus_rt.backends.trace` for the three trace runs of a Triton program,
each its own TTGIR variant (:mod:`.region_trace`, :mod:`.probes`). Kept in the kind's folder so that
``backends/`` names no kind; it imports Triton only when a run needs it.
"""
from __future__ import annotations

from pathlib import Path

from ...backends.base import BackendAdapter, BackendUnavailableError
from ...evidence import IterationWaits, OpEvents, RegionIntervals


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
            from .region_trace import collect_triton_region_trace

            doc = collect_triton_region_trace(ctx.program, ctx.outdir / "build",
                                              repeats=int(ctx.sampling.get("repeats", 1)))
            return ctx.publish(RegionIntervals.from_document(doc, "Triton region trace"))
        if "reference" in ctx.config:
            from .probes import collect_triton_reference

            doc = collect_triton_reference(ctx.program, ctx.outdir / "build",
                                           repeats=int(ctx.sampling.get("repeats", 1)))
            return ctx.publish(IterationWaits.from_document(doc, "Triton traced reference"))

        ttgir = ctx.inputs.get("ttgir")
        if ttgir is None:
            raise BackendUnavailableError(f"probe run {ctx.task.id} has no 'ttgir' input from its Transform; "
                                          f"inputs: {sorted(ctx.inputs)}")
        from .probes import collect_triton_probe

        doc = collect_triton_probe(ctx.program, Path(ttgir), ctx.outdir / "build",
                                   repeats=int(ctx.sampling.get("repeats", 1)))["op_events"]
        return ctx.publish(OpEvents.from_document(doc, f"probe run {ctx.task.id}"))
