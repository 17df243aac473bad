"""Chrome / Perfetto trace JSON (the "traceEvents" format) from intervals.

One process per SM, one thread per (CTA, warp), named with the warp's role when the program declares
warp roles (``CTA 3 warp 1 (producer)``); complete events ("ph": "X") with microsecond
timestamps relative to the earliest occurrence. clock64 traces are per-SM cycle counters: their
events are placed in cycles, labelled as such, and are not comparable across SMs.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..fsutil import atomic_write_text
from ..warp_roles import role_of_warp
from .intervals import Intervals
from .stats import _name


def chrome_trace(intervals: Intervals, names=None, *, coordinates: dict | None = None,
                 region_metrics: dict | None = None, warp_roles: dict | None = None) -> dict:
    """The trace as a dict ready for json.dump (open in ui.perfetto.dev or chrome://tracing).
    ``otherData.origin`` is the trace clock's value (ns or cycles) at ts 0.

    ``coordinates``: {arg name: one value per interval row} shown on each slice (a packed
    coordinate's fields, ``layer``/``step``; the loop ``iteration``); without them the raw ``coord``
    is shown. ``region_metrics``: {region name: {metric: value}} put on every slice of that region
    under ``args.metrics`` (the query's attributed instruction mix, barriers and stalls). ``warp_roles``:
    {role: [warp index within a CTA, ...]} (the program's declaration): each slice of a warp with a role
    gets ``args.warp_role`` and its thread is named ``CTA c warp w (role)``; warps without one get neither."""
    rows = intervals.rows
    scale = 1e-3 if intervals.unit == "ns" else 1.0  # ns -> us; cycles stay cycles
    t0 = int(rows["start"].min()) if len(rows) else 0
    events = []
    seen_threads = set()
    coordinates = coordinates or {}
    region_metrics = region_metrics or {}
    role_of = role_of_warp(warp_roles)
    for i, r in enumerate(rows):
        pid, tid = int(r["sm"]), int(r["cta"]) * 64 + int(r["warp"])
        role = role_of.get(int(r["warp"]))
        if (pid, tid) not in seen_threads:
            seen_threads.add((pid, tid))
            thread = f"CTA {int(r['cta'])} warp {int(r['warp'])}" + (f" ({role})" if role else "")
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        name = _name(names, int(r["region_id"]))
        args = {"region_id": f"0x{int(r['region_id']):08x}", "depth": int(r["depth"])}
        if coordinates:
            args.update({k: int(v[i]) for k, v in coordinates.items()})
        elif int(r["coord"]) != 0xFFFFFFFF:
            args["coord"] = int(r["coord"])
        if role:
            args["warp_role"] = role
        if name in region_metrics:
            args["metrics"] = region_metrics[name]
        events.append({
            "ph": "X",
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": (int(r["start"]) - t0) * scale,
            "dur": int(r["duration"]) * scale,
            "args": args,
        })
    for pid in sorted({int(s) for s in np.unique(rows["sm"])} if len(rows) else []):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"SM {pid}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"unit": "us" if intervals.unit == "ns" else "cycles", "incomplete": intervals.incomplete,
                      "problems": intervals.problems[:50], "origin": t0},
    }


def add_events(doc: dict, events: list[dict]) -> dict:
    """Append ``events`` (their ``ts`` on ``doc``'s axis, possibly negative: something that ran before
    the first region occurrence) and shift the whole axis so that every ``ts`` is >= 0; ``otherData.origin``
    (the trace clock's value at ts 0) moves with it."""
    doc["traceEvents"].extend(events)
    first = min((ev["ts"] for ev in doc["traceEvents"] if "ts" in ev), default=0.0)
    if first < 0:
        for ev in doc["traceEvents"]:
            if "ts" in ev:
                ev["ts"] -= first
        scale = 1e3 if doc["otherData"]["unit"] == "us" else 1.0  # origin is in the trace clock's unit
        doc["otherData"]["origin"] = doc["otherData"]["origin"] + round(first * scale)
    return doc


def nesting_problems(doc: dict, limit: int = 20) -> list[str]:
    """Slices of one track (pid, tid) that overlap without one containing the other: a timeline
    viewer would draw them wrongly. Empty for a well-formed trace."""
    tracks: dict = {}
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") == "X":
            tracks.setdefault((ev["pid"], ev["tid"]), []).append((ev["ts"], ev["ts"] + ev["dur"], ev["name"]))
    problems = []
    for track, slices in sorted(tracks.items()):
        open_ends: list[tuple[float, str]] = []
        for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1][0] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1][0] + 1e-6:  # 1e-6 us: float rounding of ns times
                problems.append(f"track {track}: {name!r} [{start}, {end}] crosses the end of "
                                f"{open_ends[-1][1]!r} at {open_ends[-1][0]}")
                if len(problems) >= limit:
                    return problems
            open_ends.append((end, name))
    return problems


def write_chrome_trace(intervals: Intervals, path: str | os.PathLike, names=None, *,
                       warp_roles: dict | None = None) -> Path:
    """Write the Chrome/Perfetto JSON atomically and return its path."""
    path = Path(path)
    atomic_write_text(path, json.dumps(chrome_trace(intervals, names, warp_roles=warp_roles)))
    return path
