"""The region occurrences behind a query's latency values, as a Chrome/Perfetto trace
(``argus query --chrome FILE``).

The latency values cite one region-trace collection. Its workspace outputs are ``raw_trace`` (the
device rings, as :func:`argus_rt.trace.save_raw` wrote them, where the backend keeps them) and
``region_intervals`` (one row per occurrence). The raw rings are decoded and paired again, which
gives the exact nesting depth; without them the occurrence rows are used (depth 0). Only the query's
region subtree and scope are exported, so the timeline shows what the report's numbers count.
"""
from __future__ import annotations

import json

import numpy as np

from ..errors import ArgusInputError

RAW_TRACE = "raw_trace"
REGION_INTERVALS = "region_intervals"


def require_latency(signals: list[str]) -> None:
    """Refuse ``--chrome`` before running a query that will not have a region trace."""
    if "latency" not in signals:
        raise ArgusInputError(f"--chrome exports the region trace of the latency signal; add latency to --signals "
                              f"(got {','.join(signals) or 'none'})")


def trace_evidence(report) -> dict:
    """The one region-trace collection that the report's latency values cite."""
    cited = {}
    for value in report.select(signal="latency"):
        for ev in value["provenance"].get("evidence", []):
            if ev.get("backend") == "trace":
                cited[ev["task"]] = ev
    if not cited:
        raise ArgusInputError("--chrome exports the region trace of the latency signal, and this report has no "
                              "latency values; add latency to --signals")
    if len(cited) > 1:
        raise ArgusInputError(f"--chrome: the latency values cite {len(cited)} region traces "
                              f"({', '.join(sorted(cited))}); query one region trace at a time")
    return next(iter(cited.values()))


def _rows_from_columns(doc: dict):
    from ..trace import INTERVAL_DTYPE

    cols = doc["columns"]
    rows = np.zeros(len(cols["region_id"]), dtype=INTERVAL_DTYPE)
    for name in ("region_id", "start", "end", "sm", "cta", "warp", "coord"):
        rows[name] = np.asarray(cols.get(name, [0] * len(rows)), dtype=np.int64)
    rows["duration"] = rows["end"] - rows["start"]
    rows["parent"] = -1
    return rows


def occurrences(outputs: dict, tree):
    """(Intervals, source name, region_intervals document) from a trace collection's outputs."""
    from ..evidence import RegionIntervals
    from ..trace import Intervals, load_raw, pair_intervals

    if REGION_INTERVALS not in outputs:
        raise ArgusInputError(f"--chrome: the cited trace collection has no {REGION_INTERVALS!r} output "
                              f"(outputs: {', '.join(sorted(outputs))})")
    doc = RegionIntervals.from_records(outputs).document()
    if RAW_TRACE in outputs:
        trace = load_raw(outputs[RAW_TRACE].path, known_ids=[r.id for r in tree])
        return pair_intervals(trace, strict=False), RAW_TRACE, doc
    return Intervals(_rows_from_columns(doc), doc.get("clock", "ns"), list(doc.get("problems", []))), \
        REGION_INTERVALS, doc


def scope_columns(rows, doc: dict) -> dict:
    """The columns :func:`argus_rt.synthesis.scope_mask` reads, for occurrence ``rows``: their own, plus one
    per field of a packed coordinate (``doc``'s ``coord_fields``), as region_intervals holds them for the
    latency rule; without those a ``step``/``layer`` scope the report answered would be refused here."""
    from ..trace.intervals import coordinate_columns

    arrays = {k: rows[k].astype(np.int64) for k in ("region_id", "start", "end", "sm", "cta", "warp", "coord")}
    fields = doc.get("coord_fields") or {}
    arrays.update(coordinate_columns(arrays["coord"], [(name, low, width) for name, (low, width) in fields.items()]))
    return arrays


ATTRIBUTED_SIGNALS = ("instruction_mix", "barrier_count", "stall_reasons", "branch_profile")
METRICS_PER_SIGNAL = 8  # per region and signal, the largest values go on its slices


def region_metrics(report) -> dict[str, dict[str, float]]:
    """{region: {"<signal>:<metric>": value}} of the report's attributed per-PC signals, each
    region's own values (not its subtree's) and its largest :data:`METRICS_PER_SIGNAL` per signal."""
    per: dict = {}
    for value in report.values:
        metric = str(value.get("metric", ""))
        if value.get("signal") in ATTRIBUTED_SIGNALS and value.get("region") and value.get("value") is not None \
                and "(inclusive)" not in metric:
            per.setdefault(value["region"], {}).setdefault(value["signal"], []).append((float(value["value"]), metric))
    out = {}
    for region, signals in per.items():
        out[region] = {f"{signal}:{metric}": round(v, 3) for signal, pairs in sorted(signals.items())
                       for v, metric in sorted(pairs, key=lambda p: (-p[0], p[1]))[:METRICS_PER_SIGNAL] if v}
    return out


def slice_coordinates(arrays: dict, doc: dict) -> dict:
    """The named coordinates each slice shows: the packed coordinate's fields (``layer``, ``step``),
    or the loop ``iteration`` when the markers count iterations; empty otherwise."""
    fields = doc.get("coord_fields") or {}
    if fields:
        return {name: arrays[name] for name in fields}
    if doc.get("coord_kind") in ("iteration", "layer", "step"):
        return {doc["coord_kind"]: arrays["coord"]}
    return {}


def query_chrome_trace(report, workspace) -> dict:
    """The Chrome/Perfetto ``traceEvents`` document of ``report``'s region occurrences: one process per
    SM, one thread per (CTA, warp), each occurrence a slice nested as it ran, with its coordinates, its
    warp's declared role and its region's attributed metrics from the same report as arguments."""
    from ..scope import Scope
    from ..synthesis import scope_mask
    from ..trace import Intervals, chrome_trace

    ev = trace_evidence(report)
    outputs = workspace.outputs(ev["task"])
    if outputs is None:
        raise ArgusInputError(f"--chrome: trace collection {ev['task']} is not in workspace {workspace.root}")
    program = workspace.get_program(ev["program_version"])
    tree = program.regions
    intervals, source, doc = occurrences(outputs, tree)
    rows = intervals.rows
    region = report.query.get("region")
    ids = [r.id for r in (tree.subtree(region) if region else tree)]
    arrays = scope_columns(rows, doc)
    keep = np.isin(arrays["region_id"], ids) & scope_mask(arrays, doc, Scope.from_dict(report.query.get("scope") or {}),
                                                         "--chrome")
    coords = {k: np.asarray(v)[keep] for k, v in slice_coordinates(arrays, doc).items()}
    # a per-CTA trace (Triton's: one thread records for the CTA) has no warps to give roles to
    roles = program.warp_roles if doc.get("granularity") != "cta" else {}
    out = chrome_trace(Intervals(rows[keep], intervals.unit, intervals.problems), names=tree, coordinates=coords,
                       region_metrics=region_metrics(report), warp_roles=roles)
    out["otherData"].update({"argus_query": report.query, "trace_task": ev["task"], "source": source,
                             "occurrences": int(keep.sum())})
    add_probe_tracks(out, report, workspace, intervals.unit)
    return out


def probe_runs(report, workspace) -> list[dict]:
    """The forced-wait probe runs behind the report's ``async_completion_latency`` values: their
    ``op_events`` documents, each labelled with its task and the async family the values name."""
    from ..evidence import OpEvents

    family, tasks = {}, set()
    for value in report.select(signal="async_completion_latency"):
        join = value.get("join") or {}
        if join.get("op_id") and join.get("kind"):
            family[join["op_id"]] = join["kind"]
        tasks.update(e["task"] for e in value["provenance"].get("evidence", []) if e.get("backend") == "trace")
    runs = []
    for task in sorted(tasks):
        outputs = workspace.outputs(task)
        if outputs and "op_events" in outputs:
            doc = OpEvents.from_records(outputs).document(lists=True)
            ops = {str(o) for o in doc.get("columns", {}).get("op_id", [])}
            kinds = {family[o] for o in ops if o in family}
            runs.append({"doc": doc, "label": task, "kind": kinds.pop() if len(kinds) == 1 else None})
    return runs


def add_probe_tracks(doc: dict, report, workspace, unit: str) -> None:
    """Append the report's probe runs (:mod:`argus_rt.trace.probe_tracks`). On a %globaltimer region trace
    they sit on its clock (the same GPU timer, in later or earlier runs); on a cycle trace, which has no
    common clock with them, on an axis of their own that starts at their first issue."""
    from ..trace.chrome import add_events
    from ..trace.probe_tracks import probe_events

    runs = probe_runs(report, workspace)
    if not runs:
        return
    if unit == "ns":
        origin, axis = int(doc["otherData"]["origin"]), "the region trace's %globaltimer axis"
    else:
        origin = min((int(i) for r in runs for i in r["doc"]["columns"]["issue"]), default=0)
        axis = f"their own %globaltimer axis from {origin} ns (the region trace is in {unit})"
    add_events(doc, probe_events(runs, origin))
    doc["otherData"]["probe_runs"] = {"tasks": [r["label"] for r in runs], "axis": axis}


def write_query_chrome_trace(report, workspace, target: str) -> int:
    """Write the document to ``target`` (a path, or ``-`` for stdout); returns the occurrences written."""
    from .output import write_text

    doc = query_chrome_trace(report, workspace)
    write_text(target, json.dumps(doc))
    return doc["otherData"]["occurrences"]
