"""The ``trace`` tool adapter, for every program kind: each kind's run does the work.

One adapter, three modes, each chosen by the task's config and each publishing one typed evidence
(:mod:`argus_rt.evidence`):

* ``{}`` or ``{"capacity", "clock"}``: **region tracing** (the latency recipe): ``region_intervals``,
  one row per region occurrence, qualification *observed*;
* ``{"reference": "iteration_waits"}``: the **traced reference** (a kind that ``traces_iteration_waits``):
  ``iteration_waits``, the consumer's wait per loop iteration in an unprobed run;
* ``{"probe": {...}}``: one **forced-wait probe** built by the ``forced_wait_probe`` Transform (its
  ``ttgir`` output): ``op_events``, issue and completion of the probed async operation.

The kind does the run, through its hooks in :mod:`argus_rt.kinds.registry`: ``trace(program, outdir,
config)`` for region tracing (CUDA, CuPy, numba: build the ``traced`` variant, launch it once under a
:class:`argus_rt.trace.TraceSession`, check its outputs against the reference, decode and pair the
rings, e.g. :func:`argus_rt.kinds.cuda.run.collect_region_trace`), or ``trace_run(mode, program, outdir,
config=, inputs=, sampling=)`` for a kind whose runs need more (Triton: every mode is its own TTGIR
variant, repeated launches, the probe's TTGIR input; :mod:`argus_rt.kinds.triton.trace_run`).

This module knows the adapter contract (modes, config keys, effects, outputs); how a variant is built and
run is the kind's. Kind modules are imported when a run needs them, so importing the adapter loads
neither torch nor Triton.
"""
from __future__ import annotations

from pathlib import Path

from ..evidence import IterationWaits, OpEvents, RegionIntervals
from ..kinds.errors import ProgramRunError
from ..kinds.registry import get_kind
from .base import BackendAdapter, register_backend

MODES = ("region", "reference", "probe")
# mode -> (the evidence it publishes, effects on the run)
_MODE_EVIDENCE = {"region": RegionIntervals, "reference": IterationWaits, "probe": OpEvents}
_MODE_EFFECTS = {
    # the traced run is the latency recipe's reference execution; its small marker cost is measured
    # separately (benchmarks/trace_overhead.py), not hidden
    "region": frozenset({"perturbs_timing"}),
    "reference": frozenset({"perturbs_timing"}),
    "probe": frozenset({"forces_completion", "changes_overlap", "perturbs_timing"}),
}


class TraceAdapter(BackendAdapter):
    """Backend ``trace`` for every kind (see the module docstring for its three modes). Region-tracing
    config: ``capacity`` (records per warp ring, power of two, default 256), ``clock`` ("globaltimer"
    default, or "clock64"); a kind may take fewer (Triton's records one timer per marker per CTA: none).

    Region tracing by a kind's ``trace`` hook also keeps the raw rings as ``raw_trace`` (.npz): no recipe
    needs them, but ``argus query --chrome`` and ``argus trace`` decode them again (exact nesting)."""

    name = "trace"
    effects = _MODE_EFFECTS["probe"]  # the union; effects_for narrows it per mode
    # What the reference and probe modes publish. region_intervals is not listed: the probe expander
    # (probe_outputs) reads this tuple as what a *probe* run publishes besides op_events.
    outputs = ("op_events", "iteration_waits")
    REGION_KEYS = ("capacity", "clock")
    REFERENCES = ("iteration_waits",)

    def mode(self, config: dict) -> str:
        """The mode ``config`` asks for (one of :data:`MODES`), or a one-line ValueError."""
        if "probe" in config:
            if set(config) == {"probe"}:
                return "probe"
        elif "reference" in config:
            if set(config) == {"reference"} and config["reference"] in self.REFERENCES:
                return "reference"
        else:
            bad = sorted(set(config) - set(self.REGION_KEYS))
            if not bad:
                return "region"
            raise ValueError(f"unknown trace config key(s) {bad}; valid: {', '.join(self.REGION_KEYS)} (region "
                             f"tracing), or alone 'probe' (a forced-wait probe) or 'reference' (one of "
                             f"{list(self.REFERENCES)})")
        raise ValueError(f"trace takes config {{}} or keys {list(self.REGION_KEYS)} (region tracing), "
                         f"{{'probe': {{...}}}} (a forced-wait probe) or {{'reference': one of "
                         f"{list(self.REFERENCES)}}}; got {config!r}")

    def validate_config(self, config: dict) -> None:
        self.mode(config)

    def outputs_for(self, config: dict) -> tuple[str, ...]:
        """What a run with ``config`` publishes: one mode per run, so one evidence."""
        return (_MODE_EVIDENCE[self.mode(config)].OUTPUT,)

    def effects_for(self, config: dict) -> frozenset:
        try:
            return _MODE_EFFECTS[self.mode(config)]
        except ValueError:  # refused by validate_config with its reason; the effect check must not pre-empt it
            return frozenset()

    def available(self) -> tuple[bool, str]:
        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        return torch.cuda.is_available(), f"no CUDA GPU visible to torch {torch.__version__}"

    def collect(self, ctx) -> dict[str, Path]:
        mode = self.mode(ctx.config)
        publishes = self.outputs_for(ctx.config)
        asked = tuple(getattr(ctx.task, "outputs", ()) or ())
        if set(asked) - set(publishes):
            raise ValueError(f"trace run {ctx.task.id} declares outputs {sorted(asked)}, but its config "
                             f"{ctx.config!r} publishes only {list(publishes)}: two trace modes were merged into "
                             "one run (each mode is its own kernel variant and needs its own run)")
        kind = get_kind(ctx.program.kind)
        evidence = _MODE_EVIDENCE[mode]
        where = f"{ctx.program.kind} trace ({mode})"
        if kind.trace_run is not None:
            doc = kind.call("trace_run", mode, ctx.program, Path(ctx.outdir), config=ctx.config,
                            inputs=ctx.inputs, sampling=ctx.sampling)
            return ctx.publish(evidence.from_document(doc, where))
        if mode == "region" and kind.trace is not None:
            doc, raw = kind.call("trace", ctx.program, Path(ctx.outdir), ctx.config)
            # The program's declared warp roles travel with the per-warp intervals (a warp_role scope and the
            # Perfetto tracks read them there); a kind that knows better sets its own.
            if ctx.program.warp_roles and "warp_roles" not in doc:
                doc = {**doc, "warp_roles": ctx.program.warp_roles}
            return {**ctx.publish(evidence.from_document(doc, where)), "raw_trace": raw}
        what = {"region": "region tracing", "reference": "the traced reference",
                "probe": "forced-wait probe runs"}[mode]
        hook = "a 'trace' or 'trace_run'" if mode == "region" else "a 'trace_run'"
        raise ProgramRunError(f"{what} of {ctx.program.kind} programs: not implemented (that kind has no "
                              f"{hook} hook in argus_rt.kinds.registry)")


register_backend(TraceAdapter())
