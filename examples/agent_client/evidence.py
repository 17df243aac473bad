"""Policy (b)'s reading of region reports: which bottleneck the incumbent configuration has.

Input: the ``values`` of ``query`` summaries (``latency`` and ``stall_reasons`` per region, and
``async_completion_latency`` per async site), as the MCP tools return them. Output: a
:class:`Diagnosis` naming one bottleneck class, which the kernel's ``remedies`` turn into the knob
moves tried first. The rules, in order (the first that applies decides):

1. **epilogue**: a child region of the root whose name ends in ``epilogue`` takes more than
   :data:`EPILOGUE_SHARE` of the root's time (latency: mean x count, summed over occurrences).
2. **memory (exposed async loads)**: an async site in a load region (last name part contains
   ``load``) has an issue-to-completion latency (``async_completion_latency``, mean over its probed
   iteration) above what the pipeline covers, ``(num_stages - 1)`` x the p50 of one occurrence of
   the region whose name ends in ``mma``.
3. **stalls**: in the region with the most stall samples (leaves only, since parents include their
   children), the largest reason's class (:data:`STALL_CLASSES`); a reason of no class is skipped.

No rule applies (e.g. the region signals were unanswered) -> ``Diagnosis(None, ...)``: the policy
then tries moves in policy (a)'s order. Every diagnosis keeps the numbers it used (``evidence``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

EPILOGUE_SHARE = 0.35
# ncu's warp-stall reasons (source-counter column suffixes) by what a knob can do about them
STALL_CLASSES = {
    "long_sb": "memory", "lg": "memory", "tex": "memory", "imc": "memory", "drain": "memory",
    "barrier": "sync", "membar": "sync", "sleeping": "sync",
    "math": "compute", "wait": "compute", "mio": "compute", "short_sb": "compute", "tensor": "compute",
    "selected": "issue", "not_selected": "issue", "dispatch": "issue", "no_inst": "issue",
    "branch_resolving": "issue",
}


@dataclass(frozen=True)
class Diagnosis:
    bottleneck: str | None           # a key of the kernel's remedies, or None
    rule: str                        # which rule decided (or why none did)
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"bottleneck": self.bottleneck, "rule": self.rule, "evidence": self.evidence}


def _values(values, signal: str) -> list[dict]:
    return [v for v in values if v["signal"] == signal and v.get("value") is not None]


def _region_time(values, root: str) -> dict[str, float]:
    """Total occurrence time per child of ``root`` (mean x count), from latency values."""
    stats: dict = {}
    for v in _values(values, "latency"):
        if v["metric"] in ("mean", "count"):
            stats.setdefault(v["region"], {})[v["metric"]] = v["value"]
    children = {r for r in stats if r and r.startswith(root + "/") and "/" not in r[len(root) + 1:]}
    return {r: stats[r]["mean"] * stats[r]["count"] for r in children if {"mean", "count"} <= set(stats[r])}


def _epilogue(values, root: str) -> Diagnosis | None:
    times = _region_time(values, root)
    total = sum(times.values())
    for region, t in times.items():
        if region.endswith("epilogue") and total > 0 and t / total > EPILOGUE_SHARE:
            return Diagnosis("epilogue", f"{region} takes {t / total:.0%} of the root's child-region time "
                                         f"(> {EPILOGUE_SHARE:.0%})", {"share": round(t / total, 3)})
    return None


def _exposed_loads(values, num_stages: int) -> Diagnosis | None:
    p50 = {v["region"]: v["value"] for v in _values(values, "latency") if v["metric"] == "p50"}
    mma = [r for r in p50 if r and r.endswith("mma")]
    if not mma:
        return None
    covered = (num_stages - 1) * p50[mma[0]]
    loads = [v for v in _values(values, "async_completion_latency")  # metric: "<op id>@<iteration>"
             if "load" in str(v["region"]).rsplit("/", 1)[-1]]
    if not loads:
        return None
    worst = max(loads, key=lambda v: v["value"])
    if worst["value"] <= covered:
        return None
    return Diagnosis("memory", f"async load {worst['metric']} completes in {worst['value']:.0f} ns, more than the "
                               f"{num_stages - 1} stage(s) x {p50[mma[0]]:.0f} ns of {mma[0]} that hide it",
                     {"load_ns": worst["value"], "covered_ns": covered, "site": worst["metric"]})


def _stalls(values, root: str) -> Diagnosis | None:
    per_region: dict = {}
    for v in _values(values, "stall_reasons"):
        per_region.setdefault(v["region"], {})[str(v["metric"]).removeprefix("stall:")] = v["value"]
    parents = {r.rsplit("/", 1)[0] for r in per_region if r and "/" in r}
    leaves = {r: s for r, s in per_region.items() if r and r not in parents and r != root}
    if not leaves:
        return None
    region, stalls = max(leaves.items(), key=lambda kv: sum(kv[1].values()))
    for reason, samples in sorted(stalls.items(), key=lambda kv: -kv[1]):
        if samples > 0 and reason in STALL_CLASSES:
            return Diagnosis(STALL_CLASSES[reason], f"{region} has the most stall samples; its largest reason is "
                                                    f"{reason} ({STALL_CLASSES[reason]})",
                             {"region": region, "reason": reason, "samples": samples,
                              "region_samples": sum(stalls.values())})
    return None


def diagnose(values: list[dict], root: str, num_stages: int, unanswered: list[dict] = ()) -> Diagnosis:
    """The incumbent's bottleneck from its region report values (see the module docstring)."""
    for rule in (lambda: _epilogue(values, root), lambda: _exposed_loads(values, num_stages),
                 lambda: _stalls(values, root)):
        found = rule()
        if found is not None:
            return found
    why = "; ".join(f"{u['signal']}: {u['reason']}" for u in unanswered)
    return Diagnosis(None, "no rule applies" + (f" (unanswered: {why})" if why else ""))
