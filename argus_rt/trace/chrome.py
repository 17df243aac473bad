"""Chrome / Perfetto trace JSON (the "traceEvents" format) from intervals.

One process per SM, one thread per (CTA, warp); complete events ("ph": "X") with microsecond
timestamps relative to the earliest occurrence. clock64 traces are per-SM cycle counters: their
events are placed in cycles, labelled as such, and are not comparable across SMs.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..fsutil import atomic_write_text
from .intervals import Intervals
from .stats import _name


def chrome_trace(intervals: Intervals, names=None) -> dict:
    """The trace as a dict ready for json.dump (open in ui.perfetto.dev or chrome://tracing)."""
    rows = intervals.rows
    scale = 1e-3 if intervals.unit == "ns" else 1.0  # ns -> us; cycles stay cycles
    t0 = int(rows["start"].min()) if len(rows) else 0
    events = []
    seen_threads = set()
    for r in rows:
        pid, tid = int(r["sm"]), int(r["cta"]) * 64 + int(r["warp"])
        if (pid, tid) not in seen_threads:
            seen_threads.add((pid, tid))
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": f"CTA {int(r['cta'])} warp {int(r['warp'])}"}})
        args = {"region_id": f"0x{int(r['region_id']):08x}", "depth": int(r["depth"])}
        if int(r["coord"]) != 0xFFFFFFFF:
            args["coord"] = int(r["coord"])
        events.append({
            "ph": "X",
            "name": _name(names, int(r["region_id"])),
            "pid": pid,
            "tid": tid,
            "ts": (int(r["start"]) - t0) * scale,
            "dur": int(r["duration"]) * scale,
            "args": args,
        })
    for pid in sorted({int(s) for s in np.unique(rows["sm"])} if len(rows) else []):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"SM {pid}"}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"unit": "us" if intervals.unit == "ns" else "cycles", "incomplete": intervals.incomplete,
                      "problems": intervals.problems[:50]},
    }


def write_chrome_trace(intervals: Intervals, path: str | os.PathLike, names=None) -> Path:
    """Write the Chrome/Perfetto JSON atomically and return its path."""
    path = Path(path)
    atomic_write_text(path, json.dumps(chrome_trace(intervals, names)))
    return path
