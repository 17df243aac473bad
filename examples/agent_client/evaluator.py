"""Candidates measured through the MCP tools: ``fork`` makes the version, ``query`` measures it.

End-to-end time, for both policies alike, is ``kernel_time``'s ``untraced_median`` (see
:mod:`.kernel_time`), asked together with ``latency`` so that one collection run serves both: that
run checks the candidate's output against the module's PyTorch reference before timing it, so a
candidate that computes the wrong thing is an unanswered query, i.e. a failed measurement.

Diagnoses (policy b) ask, of the incumbent at one shape, the region signals in the order of the
rules that read them (:mod:`.evidence`), and stop asking once a rule decides: ``latency`` first (the
trace is reused from the trial: no new collection), then ``async_completion_latency`` scoped to
iteration 1 (one forced-wait probe per async site instead of one per site and iteration, plus the
traced reference), then ``stall_reasons`` (a new Nsight Compute mapping run, the slowest). The
rules are first-match and each reads only signals asked before it, so the bottleneck is the one
asking all three at once would give; what changes is that a diagnosis decided early carries no
values of the signals it did not need (``asked`` in its evidence lists the ones it asked).

Measurements are kept per (configuration, shape) for the whole run, so two policies that try the
same candidate, and the held-out baseline, are measured once (the workspace would reuse the
evidence anyway; this also saves the round trip).
"""
from __future__ import annotations

import time
from dataclasses import replace

from .evidence import Diagnosis, diagnose
from .kernels import KernelSpec, shape_label
from .mcp_session import ArgusTools, ToolCallError
from .search import Measurement, config_key

TIME_SIGNALS = ["latency", "kernel_time"]
TIME_METRIC = "untraced_median"
REGION_SIGNALS = ("latency", "stall_reasons", "async_completion_latency")
# the signals in the order of the rules that read them (evidence.diagnose: epilogue, exposed loads, stalls)
RULE_ORDER = ("latency", "async_completion_latency", "stall_reasons")
PROBE_SCOPE = {"iterations": [1, 2]}  # one steady-state trip (trip 0 is the pipeline's prologue)


class McpEvaluator:
    def __init__(self, spec: KernelSpec, tools: ArgusTools, region_signals=REGION_SIGNALS) -> None:
        self.spec, self.tools = spec, tools
        self.region_signals = tuple(region_signals)
        self.base_launch = spec.base_launch()
        self.program = str(spec.program_dir)
        self._measured: dict = {}

    async def version(self, config: dict, shape: dict) -> str:
        edits, launch = self.spec.candidate(config, shape, self.base_launch)
        return (await self.tools.fork(self.program, edits, launch))["id"]

    async def measure(self, config: dict, shape: dict) -> Measurement:
        key = (config_key(config), shape_label(shape))
        if key not in self._measured:
            self._measured[key] = await self._measure(config, shape)
        return self._measured[key]

    async def _measure(self, config: dict, shape: dict) -> Measurement:
        label, start = shape_label(shape), time.perf_counter()
        why = self.spec.valid(config, shape)
        if why:
            return Measurement(label, None, f"not run: {why}")
        version = None
        try:
            version = await self.version(config, shape)
            report = await self.tools.query(version, self.spec.root_region, TIME_SIGNALS)
        except ToolCallError as exc:
            return Measurement(label, None, str(exc), version, seconds=time.perf_counter() - start)
        seconds = time.perf_counter() - start
        values = {v["metric"]: v["value"] for v in report["values"] if v["signal"] == "kernel_time"}
        unanswered = [u["reason"] for u in report["unanswered"] if u["signal"] == "kernel_time"]
        if unanswered or values.get(TIME_METRIC) is None:
            return Measurement(label, None, "; ".join(unanswered) or f"kernel_time has no {TIME_METRIC}", version,
                               seconds=seconds)
        return Measurement(label, values[TIME_METRIC], None, version, values.get("reference_rel_error"), seconds)

    async def diagnose(self, config: dict, shape: dict) -> tuple[Diagnosis, float]:
        start = time.perf_counter()
        values, unanswered, asked = [], [], []
        num_stages = config.get("num_stages", 1)
        found = None
        try:
            version = await self.version(config, shape)
            for signal in (s for s in RULE_ORDER if s in self.region_signals):
                scope = PROBE_SCOPE if signal == "async_completion_latency" else None
                asked.append(signal)
                try:
                    report = await self.tools.query(version, self.spec.root_region, [signal], scope)
                    values += report["values"]
                    unanswered += report["unanswered"]
                except ToolCallError as exc:
                    unanswered.append({"signal": signal, "reason": str(exc)})
                found = diagnose(values, self.spec.root_region, num_stages, unanswered)
                if found.bottleneck is not None:
                    break  # a later signal feeds only later rules: it cannot change this answer
        except ToolCallError as exc:
            unanswered.append({"signal": "fork", "reason": str(exc)})
        if found is None or found.bottleneck is None:
            found = diagnose(values, self.spec.root_region, num_stages, unanswered)
        found = replace(found, evidence={**found.evidence, "asked": asked})
        return found, time.perf_counter() - start
