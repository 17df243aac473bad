"""Signal ``kernel_time``: a Triton kernel's end-to-end time, served by ``argus mcp --import`` of this module.

Why a signal of its own: no built-in signal gives a kernel's wall time. ``latency`` of the outermost
region is the duration of each CTA's span (count, mean, p50, ...), so a change of tile size (more or
fewer, longer or shorter CTAs) or of occupancy moves it without moving the kernel's time the same
way. The time is measured all the same: every Triton region-trace collection first checks Argus's
kernel against the JIT (``argus_rt.kinds.triton.jit_equivalence``), timing 15 launches of the plain
(untraced) kernel with CUDA events after a GPU sleep, and keeps the medians in its evidence
(``region_intervals``' ``jit_check``). This recipe publishes them. Its evidence request is the very
one ``latency`` makes, so asking for both costs one collection run, and the run checks the kernel's
output against the module's PyTorch ``reference`` before anything is timed.

Values (region ``null``: whole kernel; unit ns unless stated):

* ``untraced_median``: median CUDA-event time of the plain kernel (launches 2..15);
* ``jit_median``: the same for the launch through Triton's JIT (interleaved with the above);
* ``traced_span``: median over the traced launches of (last region end - first region begin), the
  region-traced variant's own span (it carries the trace's small marker cost);
* ``reference_rel_error``: the kernel output's relative error against the PyTorch reference
  (unit ``relative``; the collection fails above 0.01).

It reads the collection's typed :class:`~argus_rt.evidence.RegionIntervals` (the JIT check and the
reference check are in its ``details``). A region trace without ``jit_check`` (not a Triton program)
leaves the signal unanswered with that reason.
"""
from __future__ import annotations

from argus_rt.evidence import RegionIntervals
from argus_rt.kinds.triton.jit_equivalence import TIMED_ROUNDS
from argus_rt.recipes import REFERENCE_TRACE_SENSITIVE, Evidence, Recipe, get_recipe, register_recipe
from argus_rt.runtime.handlers import HandlerError, register_synthesis
from argus_rt.synthesis import one_evidence

SIGNAL = "kernel_time"
METRICS = ("untraced_median", "jit_median", "traced_span", "reference_rel_error")


def _latency_evidence() -> Evidence:
    """The region-trace request of the built-in latency recipe, so that both share one run."""
    (evidence,) = get_recipe("latency").evidence
    return Evidence(evidence.backend, outputs=evidence.outputs, variant=evidence.variant, config=dict(evidence.config),
                    effects=evidence.effects, sensitive_to=REFERENCE_TRACE_SENSITIVE)


def traced_span_ns(columns: dict) -> float | None:
    """Median over launches of max(end) - min(start) of every region record of that launch."""
    import statistics

    starts, ends, launches = columns.get("start", []), columns.get("end", []), columns.get("launch")
    if not starts:
        return None
    launches = launches if launches is not None else [0] * len(starts)
    spans: dict = {}
    for launch, start, end in zip(launches, starts, ends):
        lo, hi = spans.get(launch, (start, end))
        spans[launch] = (min(lo, start), max(hi, end))
    return float(statistics.median(hi - lo for lo, hi in spans.values()))


def kernel_time_values(ev: RegionIntervals) -> list[tuple[str, float | None, int | None, str, str]]:
    """(metric, value, samples, unit, method) from one collection's region intervals."""
    jit = ev.details.get("jit_check")
    if not isinstance(jit, dict) or "argus_ms" not in jit:
        raise HandlerError("kernel_time: the region trace carries no timed JIT check (jit_check.argus_ms); "
                           "only Triton programs' collections time the plain kernel")
    rounds = TIMED_ROUNDS - 1  # the first launch of each loads its module and is not timed evidence
    rel = (ev.details.get("reference_check") or {}).get("max_rel_err")
    columns = {name: ev.columns[name].tolist() for name in ("start", "end", "launch") if name in ev.columns}
    return [("untraced_median", float(jit["argus_ms"]) * 1e6, rounds, "ns", "CUDA events, plain kernel (JIT check)"),
            ("jit_median", float(jit["jit_ms"]) * 1e6, rounds, "ns", "CUDA events, launch through the JIT"),
            ("traced_span", traced_span_ns(columns), ev.launches, "ns",
             "region trace: last end - first begin per launch"),
            ("reference_rel_error", None if rel is None else float(rel), None, "relative",
             "kernel output vs the module's PyTorch reference")]


@register_synthesis(SIGNAL)
def synth_kernel_time(ctx) -> dict:
    src, ev = one_evidence(ctx, RegionIntervals, "kernel_time synthesis")
    evidence = [{"task": src.id, "backend": src.op, "program_version": src.program}]
    values = [{"signal": SIGNAL, "region": None, "metric": metric, "value": value, "unit": unit,
               "qualification": "observed", "provenance": {"task": ctx.task.id, "evidence": evidence, "method": method},
               "scope": ctx.task.scope, "ambiguity": None, "samples": samples, "notes": []}
              for metric, value, samples, unit, method in kernel_time_values(ev)]
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": SIGNAL, "values": values,
                                              "extra": {}})}


register_recipe(Recipe(
    signal=SIGNAL, unit="ns", qualification="observed", synthesis=SIGNAL,
    description="end-to-end time of the plain kernel (CUDA events, median of the JIT check's timed launches), "
                "from the region-trace collection latency uses",
    evidence=(_latency_evidence(),), scope_fields=frozenset(), collect_filters=frozenset(),
    kinds=frozenset({"triton"}), kinds_reason="the timed JIT check of a Triton region trace",
), replace=True)
