"""Synthesis rules: evidence -> qualified facts.

Every rule writes one ``facts`` output, an ``argus.facts/1`` document::

    {"format": "argus.facts/1", "signal": str, "values": [value, ...], "extra": {...}}

and every value is::

    {"signal", "region" (qualified name, "<unmapped>", or null for whole-program values),
     "metric" (e.g. "mean", "FFMA", "stall:long_scoreboard"), "value" (number or null),
     "unit", "qualification": "observed"|"attributed"|"derived",
     "provenance": {"task": synthesis task id, "evidence": [{"task", "backend", "program_version"}],
                    "method": str}, "scope": {...}, "ambiguity": {"entropy_nats", "shared_pcs"} or null,
     "samples": int or null, "notes": [str, ...]}

Exact joins: evidence is joined only across compatible program versions (same base; PC-keyed joins
need the very same binary) and by scope coordinates (op ID + iteration), never by timestamps taken
in different runs. Register more rules with ``argus_rt.runtime.handlers.register_synthesis``.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import TypeVar

import numpy as np

from .evidence import (
    AsyncSites,
    Evidence,
    EvidenceError,
    IterationWaits,
    OpEvents,
    PcCounters,
    PcRegionCounts,
    RegionIntervals,
    SystemTimeline,
    check_recording_ctas,
)
from .pc_regions import UNMAPPED, PcMapError, PcRegionMap
from .program import IncompatibleVersionsError, check_joinable
from .runtime.handlers import HandlerError, register_synthesis
from .sass import pc_key
from .scope import Scope, ScopeError
from .trace.stats import duration_summary

FACTS_FORMAT = "argus.facts/1"
E = TypeVar("E", bound=Evidence)


def _evidence(ctx, cls: type[E]) -> list[tuple[object, E]]:
    """(dependency task, its evidence) for every dependency that published evidence of type ``cls``,
    whichever backend, kind or configuration made it; in dependency-id order."""
    return [(ctx.deps[dep], _evidence_of(ctx, dep, cls)) for dep, _path in ctx.input_list(cls.OUTPUT)]


def _evidence_of(ctx, dep_id: str, cls: type[E]) -> E:
    """The evidence of type ``cls`` that dependency ``dep_id`` published."""
    return cls.from_outputs(lambda name: ctx.inputs.get(f"{dep_id}/{name}"))


def one_evidence(ctx, cls: type[E], needed_by: str) -> tuple[object, E]:
    """The one dependency that published evidence of type ``cls``, with it; :class:`HandlerError` unless one did.
    Rules outside Argus (``argus mcp --import`` modules) read their evidence through it too."""
    found = ctx.input_list(cls.OUTPUT)
    if len(found) != 1:
        raise HandlerError(f"{needed_by} needs exactly one {cls.OUTPUT} evidence ({cls.FORMAT}), got {len(found)}")
    return _evidence(ctx, cls)[0]


class _Facts:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        cfg = ctx.config
        self.signal = cfg.get("signal", ctx.task.op)
        self.unit = cfg.get("unit", "")
        self.qualification = cfg.get("qualification", "observed")
        self.values: list[dict] = []
        self.extra: dict = {}
        self.evidence: list[dict] = []

    def cite(self, task, source: dict | None = None) -> None:
        """Cite ``task``'s evidence; ``source``: the tool that made it, as its document names it
        (a Proton trace's ``source``), when that is not the backend's own."""
        entry = {"task": task.id, "backend": task.op, "program_version": task.program}
        if source:
            entry["source"] = source
        if entry not in self.evidence:
            self.evidence.append(entry)

    def add(self, region, metric, value, *, method="", samples=None, ambiguity=None, notes=(), unit=None,
            qualification=None, extra=None) -> None:
        value = None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value
        item = {"signal": self.signal, "region": region, "metric": metric,
                "value": float(value) if value is not None else None, "unit": unit or self.unit,
                "qualification": qualification or self.qualification,
                "provenance": {"task": self.ctx.task.id, "evidence": list(self.evidence), "method": method},
                "scope": self.ctx.task.scope, "ambiguity": ambiguity,
                "samples": int(samples) if samples is not None else None, "notes": list(notes)}
        if extra:
            item["join"] = extra
        self.values.append(item)

    def write(self) -> dict:
        doc = {"format": FACTS_FORMAT, "signal": self.signal, "values": self.values, "extra": self.extra}
        return {"facts": self.ctx.write_json("facts", doc)}


def _one_dep_with_output(ctx, output: str, needed_by: str, what: str):
    """The single dependency of this task that gave it ``output``, whichever collection made it."""
    deps = [ctx.deps[dep] for dep, _path in ctx.input_list(output)]
    if len(deps) != 1:
        raise HandlerError(f"{needed_by} needs exactly one {what}, got {len(deps)}")
    return deps[0]


def _one_dep(ctx, op: str, needed_by: str, what: str):
    """The single dependency of this task that ran ``op``; :class:`HandlerError` unless exactly one did."""
    deps = ctx.deps_with_op(op)
    if len(deps) != 1:
        raise HandlerError(f"{needed_by} needs exactly one {what}, got {len(deps)}")
    return deps[0]


def _subtree(ctx) -> list:
    """Regions the query covers: the region and its descendants (all regions for None)."""
    regions = ctx.program.regions
    return regions.subtree(ctx.region) if ctx.region else list(regions)


def scope_mask(arrays: dict, doc: dict, scope: Scope, where: str) -> np.ndarray:
    """Rows of region-interval evidence (``arrays``: its columns, ``doc``: its coord_kind, coord_fields and
    warp_roles, as :meth:`RegionIntervals.document` gives them) that ``scope`` selects; the latency rule
    and ``argus query --chrome`` filter the same way."""
    n = len(next(iter(arrays.values()))) if arrays else 0
    mask = np.ones(n, dtype=bool)
    coord_kind = doc.get("coord_kind")
    for name, col in (("sms", "sm"), ("ctas", "cta")):
        chosen = getattr(scope, name)
        if chosen is not None:
            if col not in arrays:
                raise ScopeError(f"{where}: scope {name} needs column {col!r}, which the evidence lacks")
            mask &= np.isin(arrays[col], chosen)
    fields = doc.get("coord_fields") or {}  # a packed coordinate's fields, each its own column
    for name in ("iterations", "step", "layer"):
        chosen = getattr(scope, name)
        if chosen is None:
            continue
        kind = "iteration" if name == "iterations" else name
        column = kind if kind in fields and kind in arrays else "coord"
        if column == "coord" and (coord_kind != kind or "coord" not in arrays):
            raise ScopeError(f"{where}: scope {name} needs records whose coordinate is the {kind}; "
                             f"this evidence's coordinate is {coord_kind!r}"
                             + (f" with fields {', '.join(fields)}" if fields else ""))
        lo, hi = chosen if name == "iterations" else (chosen, chosen + 1)
        mask &= (arrays[column] >= lo) & (arrays[column] < hi)
    if scope.warp_role is not None:
        roles = doc.get("warp_roles") or {}
        if scope.warp_role not in roles:
            raise ScopeError(f"{where}: unknown warp role {scope.warp_role!r}; roles the program declares: "
                             f"{', '.join(sorted(roles)) or 'none'}")
        mask &= np.isin(arrays["warp"], roles[scope.warp_role])
    return mask


def occurrences_method(doc: dict) -> str:
    """How a region_intervals document's occurrences were recorded: its own ``method``, else the tool its
    ``source`` names (a Proton trace: its scope records, Triton version and mode), else Argus's region trace."""
    if isinstance(doc.get("method"), str) and doc["method"]:
        return doc["method"]
    src = doc.get("source")
    if isinstance(src, dict) and src.get("tool"):
        details = ", ".join(f"{k} {src[k]}" for k in ("triton", "mode", "file") if src.get(k))
        return f"{src['tool']} scope records" + (f" ({details})" if details else "")
    return "region trace"


@register_synthesis("latency")
def synth_latency(ctx) -> dict:
    """Per region in the subtree: count, mean, p50, p99, min, max, total of occurrence durations."""
    facts = _Facts(ctx)
    src, ev = one_evidence(ctx, RegionIntervals, "latency synthesis")
    method = occurrences_method({"method": ev.method, "source": ev.source})
    facts.cite(src, ev.source)
    arrays = ev.columns
    mask = scope_mask(arrays, ev.document(), Scope.from_dict(ctx.task.scope), "latency")
    notes = []
    if ev.dropped:
        notes.append(f"{ev.dropped} records were dropped by full trace buffers")
    if ev.incomplete:
        notes.append("the trace is marked incomplete (unpaired begin/end)")
    clock = ev.clock
    by_coord: dict = {}
    fields = [f for f in ev.coord_fields if f in arrays]
    by_field: dict = {f: {} for f in fields}  # {field: {region: {value: mean duration}}}
    for region in _subtree(ctx):
        sel = mask & (arrays["region_id"] == region.id)
        d = (arrays["end"][sel] - arrays["start"][sel]).astype(np.float64)
        if d.size == 0:
            facts.add(region.name, "count", 0, method=method, samples=0, unit="occurrences",
                      notes=notes + ["no occurrence of this region under the scope"])
            continue
        for metric, value in duration_summary(d).items():
            facts.add(region.name, metric, value, method=method, samples=d.size, notes=notes,
                      unit="occurrences" if metric == "count" else clock)
        if ev.coord_kind == "iteration" and "coord" in arrays:
            coords = arrays["coord"][sel]
            by_coord[region.name] = {str(int(c)): float(d[coords == c].mean()) for c in np.unique(coords)}
        for f in fields:  # one report value per coordinate value: "mean_by_layer" with join {"layer": 3}
            values = arrays[f][sel]
            by_field[f][region.name] = {str(int(v)): float(d[values == v].mean()) for v in np.unique(values)}
            for v, mean in by_field[f][region.name].items():
                facts.add(region.name, f"mean_by_{f}", mean, method=method, samples=int((values == int(v)).sum()),
                          notes=notes, unit=clock, extra={f: int(v)})
    facts.extra = {"clock": clock, "mean_by_iteration": by_coord}
    if fields:
        facts.extra["mean_by_coordinate"] = by_field
    return facts.write()


@register_synthesis("pc_region_map")
def synth_pc_region_map(ctx) -> dict:
    """Validate n(r,p) and publish it with per-region entropy (whole program)."""
    facts = _Facts(ctx)
    src, counts = one_evidence(ctx, PcRegionCounts, "pc_region_map synthesis")
    facts.cite(src)
    pmap = _map_of(counts.document())
    names = {r.id: r.name for r in ctx.program.regions}
    for rid, h in sorted(pmap.region_entropy().items(), key=lambda kv: str(kv[0])):
        facts.add(names.get(rid, f"0x{int(rid):08x}"), "entropy", h, method=pmap.method, unit="nats")
    facts.extra = {"map": pmap.to_evidence(), "map_program": src.program, "shared_pcs": len(pmap.shared_pcs()),
                   # plain -lineinfo view of the mapping run's counts {metric: {file: count}} ({} = none)
                   "source_file_attribution": counts.source_file_attribution,
                   "map_notes": list(counts.notes),
                   # H(p) of every shared PC (all others are 0), with its owners' shares
                   "pc_entropy": {pc_key(pmap.kernel, pc): {"entropy_nats": pmap.entropy(pc),
                                            "alpha": {names.get(r, str(r)): a for r, a in pmap.alpha(pc).items()}}
                                  for pc in pmap.shared_pcs()}}
    return facts.write()


def _map_of(doc: dict) -> PcRegionMap:
    try:
        return PcRegionMap.from_evidence(doc)
    except PcMapError as e:
        raise EvidenceError(f"PC-to-region map: {e}") from None


def _find_map(ctx) -> tuple[PcRegionMap, str, object, dict]:
    map_task = _one_dep(ctx, "pc_region_map", "attribution", "pc_region_map input")
    doc = json.loads(ctx.input_of(map_task.id, "facts").read_text(encoding="utf-8"))
    return _map_of(doc["extra"]["map"]), doc["extra"]["map_program"], map_task, doc["extra"]


def _source_file_metric(cfg: dict) -> tuple[str, str] | None:
    """(per-PC metric whose -lineinfo view matches this attribution, label) or None when none does."""
    if "metric_prefix" in cfg or "metrics" in cfg:
        return None  # stall samples, branch and predication counts: the mapping run has no per-file view of them
    if set(cfg.get("opcodes", [])) == {"BAR"}:
        return "barrier_inst_executed", "BAR"
    return "inst_executed", "all instructions" if cfg.get("group_by") == "opcode" else cfg.get("metric", "")


def _add_source_file_view(facts: _Facts, cfg: dict, map_extra: dict) -> None:
    """One value per source file: what plain -lineinfo attribution says next to the region values.

    The file view comes from the mapping run's counts of the same binary (a separate Nsight Compute
    run of the marker-only build); files have no region identity, so a shared helper's whole count
    lands in its own file whichever region called it.
    """
    chosen = _source_file_metric(cfg)
    view = map_extra.get("source_file_attribution") or {}
    if chosen is None:
        return
    source_metric, label = chosen
    if source_metric not in view:
        why = "; ".join(map_extra.get("map_notes", [])) or (
            f"the mapping run recorded no per-file {source_metric}" if view else "the map has no -lineinfo view")
        facts.extra["source_file_view"] = {"metric": source_metric, "files": {}, "missing": why}
        return
    files = {str(f): float(v) for f, v in view[source_metric].items()}
    for name, value in sorted(files.items()):
        facts.add(None, f"{label} [file {name}]", value, method="source file (-lineinfo)",
                  notes=[f"whole-kernel {source_metric} at PCs whose line info names {name} (mapping run); "
                         "no region identity"], extra={"source_file": name, "source_metric": source_metric})
    facts.extra["source_file_view"] = {"metric": source_metric, "label": label, "files": files}


@register_synthesis("attributed_metric")
def synth_attributed_metric(ctx) -> dict:
    """Lift PC-keyed counters to regions through n(r,p).

    Config: ``metric`` (a pc_counters metric) with optional ``group_by: "opcode"`` (one value per
    opcode family) or ``opcodes`` (only PCs whose opcode family is listed); or ``metric_prefix``
    (every metric with that prefix, e.g. ``"stall:"``, one value each); or ``metrics`` (these named
    metrics, one value each).
    """
    facts = _Facts(ctx)
    pmap, map_program, map_task, map_extra = _find_map(ctx)
    found = ctx.input_list(PcCounters.OUTPUT)
    if len(found) != 1:
        raise HandlerError(f"attribution needs exactly one PC-counter collection, got {len(found)}")
    src = ctx.deps[found[0][0]]
    facts.cite(src)
    facts.cite(map_task)
    if src.program != map_program:
        # PC keys are offsets in one binary: counters and map must come from the very same variant
        raise IncompatibleVersionsError(f"PC counters from {src.program} cannot be joined with a PC-to-region "
                                        f"map of {map_program}: PCs differ between binaries")
    counters = _evidence(ctx, PcCounters)[0][1]
    try:  # the counters' PC keys as offsets in the map's kernel
        pcs = [pmap.pc_of(str(key)) for key in counters.pcs["pc"]]
    except PcMapError as e:
        raise EvidenceError(f"PC counters cannot be joined with the PC-to-region map: {e}") from None
    metrics = {name: values.tolist() for name, values in counters.by_metric().items()}
    opcodes = counters.pcs["opcode"].tolist() if "opcode" in counters.pcs else [""] * len(pcs)
    families = [str(op).split(".")[0] for op in opcodes]
    cfg = ctx.config
    series: dict[str, dict] = {}
    if "metric_prefix" in cfg:
        for name, values in metrics.items():
            if name.startswith(cfg["metric_prefix"]):
                series[name[len(cfg["metric_prefix"]):]] = dict(zip(pcs, values))
        if not series:
            raise EvidenceError(f"no metric starts with {cfg['metric_prefix']!r}; metrics: {sorted(metrics)}")
    elif "metrics" in cfg:
        missing = [name for name in cfg["metrics"] if name not in metrics]
        if missing:
            raise EvidenceError(f"PC counters lack metric(s) {missing}; present: {sorted(metrics)}")
        series = {name: dict(zip(pcs, metrics[name])) for name in cfg["metrics"]}
    else:
        name = cfg["metric"]
        if name not in metrics:
            raise EvidenceError(f"PC counters lack metric {name!r}; present: {sorted(metrics)}")
        values = metrics[name]
        if cfg.get("group_by") == "opcode":
            for pc, fam, v in zip(pcs, families, values):
                series.setdefault(fam, {})[pc] = v
        else:
            keep = set(cfg.get("opcodes", [])) or None
            series[keep and "+".join(sorted(keep)) or name] = {
                pc: v for pc, fam, v in zip(pcs, families, values) if keep is None or fam in keep}
    names = {r.id: r.name for r in ctx.program.regions}
    subtree = _subtree(ctx)
    wanted = {r.id for r in subtree}
    entropy = pmap.region_entropy()
    shared = set(pmap.shared_pcs())
    for metric, per_pc in sorted(series.items()):
        lifted = {r: v.value for r, v in pmap.attribute(per_pc).items()}
        for region in subtree:
            owned = [pc for pc in per_pc if region.id in pmap.alpha(pc)]
            facts.add(region.name, metric, lifted.get(region.id, 0.0), method=f"count-weighted ({pmap.method})",
                      ambiguity={"entropy_nats": entropy.get(region.id, 0.0),
                                 "shared_pcs": sum(1 for pc in owned if pc in shared)})
        if ctx.region:
            inclusive = sum(v for rid, v in lifted.items() if rid in wanted)
            facts.add(ctx.region, f"{metric} (inclusive)", inclusive, method=f"count-weighted ({pmap.method})",
                      notes=["sum over the region's subtree"])
        if lifted.get(UNMAPPED):
            facts.add(UNMAPPED, metric, lifted[UNMAPPED], method="PCs absent from the map",
                      notes=["counts at PCs the mapping run never executed"])
        other = sum(v for rid, v in lifted.items() if rid not in wanted and rid != UNMAPPED)
        facts.extra.setdefault("outside_subtree", {})[metric] = other
    facts.extra["regions_in_map"] = sorted(names.get(r, str(r)) for r in pmap.regions())
    _add_source_file_view(facts, cfg, map_extra)
    return facts.write()


@register_synthesis("iteration_waits")
def synth_iteration_waits(ctx) -> dict:
    """Per traced loop and iteration: median, over the CTAs that ran the iteration (and launches), of
    the consumer's wait in the traced reference run (observed). A loop's trip count may differ per CTA
    (causal attention), so each value says over how many of the grid's CTAs it is; an iteration no CTA
    ran has no value.

    ``extra.loops``: per traced loop ``{"loop", "wait_line", "median_by_iteration" {str(it): ns},
    "ctas_by_iteration" {str(it): n}, "trips_by_cta" {str(cta): trips}}`` (trips of every CTA, zeros
    included, whatever the scope: the probe join checks its CTAs against them); ``extra.ctas``: the
    grid; ``extra.median_by_iteration``: the one loop's medians when one loop is traced."""
    facts = _Facts(ctx)
    src, ev = one_evidence(ctx, IterationWaits, "iteration_waits synthesis")
    facts.cite(src)
    path = ctx.input_of(src.id, IterationWaits.OUTPUT)
    cols = ev.columns
    n = len(cols["cta"])
    loop_col = cols["loop"].astype(np.int64) if "loop" in cols else np.zeros(n, dtype=np.int64)
    launch_col = cols["launch"].astype(np.int64) if "launch" in cols else np.zeros(n, dtype=np.int64)
    loops = ev.loops or [{"loop": 0, "wait_line": None}]  # evidence without "loops": one loop
    known = {int(lp["loop"]) for lp in loops}
    if n and not set(np.unique(loop_col).tolist()) <= known:
        raise EvidenceError(f"{path}: rows of loop(s) {sorted(set(np.unique(loop_col).tolist()) - known)}, "
                            f"which 'loops' does not list ({sorted(known)})")
    trips = _trips_by_cta(ev, cols, loop_col, launch_col, str(path))
    n_ctas = ev.ctas
    if n_ctas is None:
        n_ctas = int(cols["cta"].max()) + 1 if n else 0
    sel = np.ones(n, dtype=bool)
    window, ctas = ctx.task.scope.get("iterations"), ctx.task.scope.get("ctas")
    if window:
        sel &= (cols["iteration"] >= window[0]) & (cols["iteration"] < window[1])
    if ctas is not None:
        sel &= np.isin(cols["cta"], ctas)
    waits = (cols["end"] - cols["begin"]).astype(np.float64)
    if (waits[sel] < 0).any():
        raise EvidenceError(f"{path}: a wait ends before it begins (iteration "
                            f"{int(cols['iteration'][sel][waits[sel] < 0][0])})")
    out_loops = []
    for lp in loops:
        j, line = int(lp["loop"]), lp.get("wait_line")
        medians, counts = {}, {}
        here = sel & (loop_col == j)
        for it in np.unique(cols["iteration"][here]):
            rows = here & (cols["iteration"] == it)
            w = waits[rows]
            ran = int(np.unique(cols["cta"][rows]).size)
            medians[str(int(it))] = float(np.median(w))
            counts[str(int(it))] = ran
            metric = f"wait@{int(it)}" if len(loops) == 1 else f"line{line}:wait@{int(it)}"
            facts.add(None, metric, medians[str(int(it))], samples=w.size, unit=ev.clock,
                      method="traced reference (median over the CTAs that ran the iteration, and launches)",
                      notes=[ev.wait, f"over {ran} of {n_ctas} CTAs"
                             + ("" if ran == n_ctas else " (the others do not run this iteration)")],
                      extra={"loop": j, "wait_line": line, "iteration": int(it), "ctas": ran, "of_ctas": n_ctas})
        out_loops.append({"loop": j, "wait_line": line, "loop_trips": lp.get("loop_trips"),
                          "median_by_iteration": medians, "ctas_by_iteration": counts,
                          "trips_by_cta": {str(c): t for c, t in sorted(trips.get(j, {}).items())}})
    facts.extra = {"loops": out_loops, "ctas": n_ctas, "wait": ev.wait, "clock": ev.clock}
    if len(out_loops) == 1:
        facts.extra["median_by_iteration"] = out_loops[0]["median_by_iteration"]
    return facts.write()


def _trips_by_cta(ev: IterationWaits, cols: dict, loop_col, launch_col, where: str) -> dict[int, dict[int, int]]:
    """{loop: {cta: trips}} of a traced reference: its ``trips`` table (every (CTA, loop), zeros too),
    or, in a document without one, the rows each (CTA, loop) has. Trips are fixed by the kernel, not by
    timing: a (CTA, loop) with different trips in two launches is refused."""
    table = ev.trips
    if table:
        t = {k: table[k].astype(np.int64) for k in ("cta", "loop", "trips")}
        launches = table["launch"].astype(np.int64) if "launch" in table else np.zeros(len(t["cta"]), dtype=np.int64)
    else:
        keys = np.stack([launch_col, loop_col, cols["cta"].astype(np.int64)], axis=1) if len(loop_col) else \
            np.zeros((0, 3), dtype=np.int64)
        uniq, count = np.unique(keys, axis=0, return_counts=True)
        launches, t = uniq[:, 0], {"loop": uniq[:, 1], "cta": uniq[:, 2], "trips": count}
    out: dict[int, dict[int, int]] = {}
    for launch, lp, c, n in zip(launches.tolist(), t["loop"].tolist(), t["cta"].tolist(), t["trips"].tolist()):
        seen = out.setdefault(lp, {}).setdefault(c, n)
        if seen != n:
            raise EvidenceError(f"{where}: CTA {c} ran {seen} trip(s) of loop {lp} in one launch and {n} in "
                                f"launch {launch}")
    return out


def _probe_reference(ctx):
    """(reference task, per-iteration lookup(region, iteration) -> number, join key name, loops).

    The reference is either region latency facts (mean occurrence duration of the site's region in
    iteration i) or a Triton kernel's traced iteration waits (median consumer wait in iteration i of
    the site's own loop: ``loops`` is the iteration_waits facts' ``extra``, None for latency)."""
    refs = ctx.deps_with_op("latency") + ctx.deps_with_op("iteration_waits")
    if len(refs) != 1:
        raise HandlerError("async completion latency needs one reference (latency or iteration_waits facts), "
                           f"got {len(refs)}: {[t.op for t in refs]}")
    extra = json.loads(ctx.input_of(refs[0].id, "facts").read_text(encoding="utf-8")).get("extra", {})
    if refs[0].op == "iteration_waits":
        if "loops" not in extra:  # facts written before per-loop waits: one loop, every CTA ran every trip
            extra = {"loops": [{"loop": 0, "wait_line": None,
                                "median_by_iteration": extra.get("median_by_iteration", {})}], "ctas": None}
        return refs[0], None, "reference_wait_ns", extra
    by_iter = extra.get("mean_by_iteration", {})
    return refs[0], lambda region, it: by_iter.get(region or "", {}).get(str(it)), "reference_region_mean", None


def _site_loop(reference: dict, site: dict, op_id: str) -> dict | None:
    """The traced loop a probed site belongs to (by its consumer wait line), None for a site outside
    every traced loop (a load before the loop). A reference of one unnamed loop serves every site with
    a consumer wait."""
    line = (site.get("completion") or {}).get("consumer_wait_line")
    if not line:
        return None
    loops = reference["loops"]
    for lp in loops:
        if lp.get("wait_line") == line:
            return lp
    if len(loops) == 1 and loops[0].get("wait_line") is None:
        return loops[0]
    raise EvidenceError(f"probe site {op_id} ({site.get('kind', '?')}) waits at TTGIR line {line}, a loop the traced "
                        f"reference did not trace (traced: {[lp.get('wait_line') for lp in loops]}); a traced "
                        "reference kept from an Argus that timed TMA waits only lacks the cp.async and WGMMA waits: "
                        "collect it again (argus workspace clean)")


@register_synthesis("async_completion_latency")
def synth_async_completion(ctx) -> dict:
    """Per (op, iteration): issue-to-completion latency from its forced-wait probe (derived), joined
    to the reference run's same iteration by (op ID, iteration) — never by timestamps. Every probed
    family (TMA load, cp.async, WGMMA) is joined the same way; ``join.kind`` names it.

    With a Triton traced reference the join is on the site's own loop (its consumer wait), and the
    CTAs that recorded the probe must be exactly the CTAs whose loop runs the iteration (trip count >
    iteration) in every probe launch, else :class:`EvidenceError`. An iteration no CTA runs (and no
    CTA recorded) is reported as not reached: no value, ``join.reached`` false."""
    facts = _Facts(ctx)
    ref_task, reference, ref_key, loops_ref = _probe_reference(ctx)
    refs = [ref_task]
    found = _evidence(ctx, AsyncSites)
    sites = found[0][1].by_op_id() if found else {}
    probes = [ctx.deps[dep] for dep, _path in ctx.input_list(OpEvents.OUTPUT)]
    for t in probes:  # what a probe run probed is its task's record (config "probe": op_id, iteration)
        if not isinstance(t.config.get("probe"), dict):
            raise EvidenceError(f"op_events of task {t.id} come from a run whose config names no probe "
                                f"(config {t.config!r}); async completion latency needs forced-wait probe runs")
    programs = [ctx.programs(refs[0].program)] + [ctx.programs(t.program) for t in probes]
    check_joinable(programs)
    window = ctx.task.scope.get("iterations")
    for t in sorted(probes, key=lambda t: (str(t.config["probe"]["op_id"]), t.config["probe"]["iteration"])):
        facts.cite(t)
        op_id, it = t.config["probe"]["op_id"], t.config["probe"]["iteration"]
        if window and not window[0] <= it < window[1]:
            continue
        path = ctx.input_of(t.id, OpEvents.OUTPUT)
        ev = _evidence_of(ctx, t.id, OpEvents)
        cols = ev.columns
        sel = (cols["op_id"] == op_id) & (cols["iteration"] == it)
        in_ctas = sel  # the CTA-set check looks at the chosen CTAs, on whichever SM they ran
        for name, col in (("ctas", "cta"), ("sms", "sm")):
            chosen = ctx.task.scope.get(name)
            if chosen is not None:
                if col not in cols:
                    raise ScopeError(f"{path}: scope {name} needs column {col!r}, which the probe events lack")
                sel = sel & np.isin(cols[col], chosen)
            if name == "ctas":
                in_ctas = sel
        d = (cols["complete"][sel] - cols["issue"][sel]).astype(np.float64)
        region = sites.get(op_id, {}).get("region", ctx.region)
        extra = {"op_id": op_id, "iteration": it, "reference_task": refs[0].id, "probe_program": t.program}
        if op_id in sites:  # the probed family: tma_load, cp_async or wgmma
            extra["kind"] = sites[op_id].get("kind")
        notes = []
        if loops_ref is None:
            extra[ref_key] = reference(region, it)
            if not d.size:
                notes = [f"the probe run recorded no event for {op_id} at iteration {it}"]
        else:
            reached, ref_wait, join_notes, join_extra = _join_traced_loop(
                ctx, loops_ref, sites.get(op_id, {}), op_id, it, ev, cols, in_ctas, str(path))
            extra.update(join_extra)
            extra[ref_key] = ref_wait
            notes = join_notes
            if not reached:
                facts.add(region, f"{op_id}@{it}", None, samples=0, method="forced-wait probe", notes=notes,
                          unit=ev.clock, extra=extra)
                continue
        facts.add(region, f"{op_id}@{it}", float(d.mean()) if d.size else None, samples=d.size,
                  method="forced-wait probe", notes=notes, unit=ev.clock, extra=extra)
    return facts.write()


def _join_traced_loop(ctx, reference: dict, site: dict, op_id: str, it: int, ev: OpEvents, cols: dict, sel, where: str):
    """(reached, reference wait ns, notes, join extra) of one probe against a Triton traced reference.
    ``sel``: the probe's rows in the scope's CTAs (not narrowed to SMs: which SM a CTA ran on is per run).

    Checks that each probe launch was recorded by exactly the CTAs (within the scope's ``ctas``) whose
    loop runs iteration ``it`` in the reference. A site outside every traced loop has no reference and
    no CTA set to check against: it must be recorded by the same, non-empty set of CTAs in every launch."""
    chosen = ctx.task.scope.get("ctas")
    n_ctas = ev.ctas or reference.get("ctas")
    launches = ev.launches
    launch_col = cols["launch"] if "launch" in cols else np.zeros(len(cols["op_id"]), dtype=np.int64)
    cta_col = cols["cta"] if "cta" in cols else None
    if cta_col is None:
        raise EvidenceError(f"{where}: the probe events have no 'cta' column, so the CTAs that recorded probe "
                            f"{op_id}@{it} cannot be checked against the traced reference")
    launch_ids = range(int(launches)) if launches else sorted(set(launch_col[sel].tolist())) or [0]
    recorded = {int(la): set(cta_col[sel & (launch_col == la)].astype(int).tolist()) for la in launch_ids}
    loop = _site_loop(reference, site, op_id)
    if loop is None:
        sets = list(recorded.values())
        if not sets or not sets[0] or any(s != sets[0] for s in sets):
            raise EvidenceError(f"probe {op_id}@{it} (outside every traced loop) was recorded by "
                                f"{[len(s) for s in sets]} CTAs per launch: with no traced loop to say which CTAs "
                                "run it, it must be recorded by the same CTAs, at least one, in every launch")
        n = len(sets[0])
        notes = [f"over {n} of {n_ctas} CTAs; outside the traced loops: no reference wait"]
        return True, None, notes, {"ctas": n, "of_ctas": n_ctas, "reached": True}
    trips = {int(c): int(v) for c, v in (loop.get("trips_by_cta") or {}).items()}
    if not trips:  # facts written before per-CTA trips: every CTA of the probe ran every trip
        trips = {c: it + 1 for s in recorded.values() for c in s}
    expected = {c for c in trips if trips[c] > it and (chosen is None or c in chosen)}
    try:
        reached = check_recording_ctas(op_id, it, expected, recorded, n_ctas)
    except EvidenceError as exc:
        raise EvidenceError(f"{where}: {exc}") from None
    line = loop.get("wait_line")
    where_loop = f"the loop waiting at TTGIR line {line}" if line else "the traced loop"
    if not reached:
        of = f"{len(trips)} CTAs" if chosen is None else f"the {len(chosen)} CTAs in scope"
        notes = [f"not reached: no CTA runs iteration {it} of {where_loop} (traced reference: 0 of {of}; probe: "
                 f"none recorded in {len(recorded)} launch(es))"]
        return False, None, notes, {"ctas": 0, "of_ctas": n_ctas, "reached": False, "wait_line": line}
    wait = loop.get("median_by_iteration", {}).get(str(it))
    n = len(expected)
    note = f"over {n} of {n_ctas} CTAs" + ("" if n == n_ctas else f" (the CTAs whose loop runs iteration {it})")
    return True, wait, [note], {"ctas": n, "of_ctas": n_ctas, "reached": True, "wait_line": line}


@register_synthesis("system_timeline")
def synth_system_timeline(ctx) -> dict:
    """Total time and count per (category, name) of system events; optional ``step`` selection."""
    facts = _Facts(ctx)
    src, timeline = one_evidence(ctx, SystemTimeline, "system timeline synthesis")
    facts.cite(src)
    events = timeline.events
    step = ctx.task.scope.get("step")
    if step is not None and "step" not in events:
        raise ScopeError("system_timeline: scope step needs events tagged with their step; this timeline has none")
    groups: dict = defaultdict(list)
    for row in range(timeline.rows):
        if step is not None and events["step"][row] != step:
            continue
        groups[(str(events["category"][row]), str(events["name"][row]))].append(
            float(events["end_ns"][row]) - float(events["start_ns"][row]))
    for (cat, name), durs in sorted(groups.items()):
        facts.add(None, f"{cat}:{name}", sum(durs), samples=len(durs), method="system trace",
                  notes=[f"mean {sum(durs) / len(durs):.1f} ns per event"])
    return facts.write()
