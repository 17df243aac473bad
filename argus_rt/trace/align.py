"""Put a region trace on torch.profiler's clock: the offset from %globaltimer, with its uncertainty.

torch.profiler (Kineto over CUPTI) stamps each kernel's start and end on the host's clock; a region
trace stamps its markers with the GPU's %globaltimer. Both clocks tick in nanoseconds, so one offset
maps one onto the other: ``profiler_ns = globaltimer_ns + offset``. The offset is found from launches
that were both traced and profiled: every marker of a launch ran inside that launch's kernel slice,
so for a launch whose region occurrences span ``[s0, s1]`` (first begin, last end) inside a kernel
slice ``[k0, k1]``:

    k0 - (s0 + step) <= offset <= k1 - s1

(``step``: one %globaltimer step, 32 ns; a stamp says the marker ran at or up to one step after it).
Every launch gives one such interval and the offset lies in all of them: their intersection
``[low, high]`` is the estimate, reported as its midpoint +- half its width. The width is what the
kernel slice holds beyond the markers (launch prologue, the CTAs' start and drain before the first
and after the last marker) plus one timer step, at the tightest launch; more launches only narrow it.
An empty intersection means the two clocks do not differ by a fixed offset over those launches (or the
slices are not the traced launches): :class:`ClockAlignmentError`, never a guess.

This assumes both clocks run at the same rate over the profiled window (CUPTI derives its GPU
timestamps from the GPU timer and maps them to the host clock); a drift larger than the width
shows up as that error.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .anchors import TIMER_STEP_NS
from .intervals import Intervals

PROFILER_CATEGORY = "torch.profiler"
PROFILER_PID_BASE = 1 << 21  # above the region tracks (SMs) and the probe runs


class ClockAlignmentError(ValueError):
    """The region trace and the profiler's kernel slices cannot be put on one clock; the message says why."""


@dataclass(frozen=True)
class ClockOffset:
    """``profiler_ns = globaltimer_ns + offset_ns``, known to within ``+- uncertainty_ns``."""

    offset_ns: float
    uncertainty_ns: float
    low_ns: int
    high_ns: int
    launches: int
    kernel: str

    def to_dict(self) -> dict:
        return dict(asdict(self), method="intersection over launches of [k0 - s0 - step, k1 - s1]: region span "
                                         "[s0, s1] (%globaltimer) inside kernel slice [k0, k1] (profiler clock)",
                    timer_step_ns=TIMER_STEP_NS)


def launch_span(intervals: Intervals) -> tuple[int, int]:
    """(first begin, last end) in ns of one traced launch's region occurrences."""
    if intervals.unit != "ns":
        raise ClockAlignmentError(f"aligning needs a %globaltimer region trace (ns); this one is in {intervals.unit} "
                                  "(trace with clock='globaltimer' or 'anchored')")
    if not len(intervals.rows):
        raise ClockAlignmentError("the traced launch has no region occurrence to align")
    return int(intervals.rows["start"].min()), int(intervals.rows["end"].max())


def kernel_slices(events, kernel: str) -> list:
    """The profiler's kernel events (``category == "kernel"``) whose name contains ``kernel``, by start.
    ``events``: :func:`argus_rt.backends.systrace.parse_kineto_trace`'s result (or anything with
    ``name``, ``category``, ``start_ns``, ``end_ns``, ``device``, ``stream``)."""
    hits = sorted((e for e in events if e.category == "kernel" and kernel in e.name), key=lambda e: e.start_ns)
    if not hits:
        names = sorted({e.name for e in events if e.category == "kernel"})
        raise ClockAlignmentError(f"no kernel slice named like {kernel!r} in the profiler trace; its kernels: "
                                  f"{', '.join(names[:8]) or 'none'}")
    return hits


def globaltimer_offset(spans: list[tuple[int, int]], kernels: list, kernel: str = "") -> ClockOffset:
    """The offset from the traced launches' ``spans`` and their kernel slices (same order, one each)."""
    if len(spans) != len(kernels) or not spans:
        raise ClockAlignmentError(f"{len(spans)} traced launch(es) and {len(kernels)} profiled kernel slice(s) of "
                                  f"{kernel!r}: profile exactly the traced launches, one slice each")
    low = max(int(k.start_ns) - (s0 + TIMER_STEP_NS) for (s0, _), k in zip(spans, kernels))
    high = min(int(k.end_ns) - s1 for (_, s1), k in zip(spans, kernels))
    if low > high:
        raise ClockAlignmentError(f"no single offset puts every traced launch inside its kernel slice of {kernel!r} "
                                  f"(offsets {low} > {high} ns): the slices are not the traced launches, or the "
                                  "clocks drift apart")
    return ClockOffset((low + high) / 2, (high - low) / 2, low, high, len(spans), kernel)


def profiler_events(events, offset: ClockOffset, origin_ns: int) -> list[dict]:
    """The profiler's device-side events as Chrome trace events on a region trace's axis (its ts 0 is
    ``origin_ns`` of %globaltimer): one process per device, one thread per stream."""
    out, named = [], set()
    for e in events:
        pid, tid = PROFILER_PID_BASE + int(e.device), int(e.stream)
        if pid not in named:
            named.add(pid)
            out.append({"ph": "M", "name": "process_name", "pid": pid,
                        "args": {"name": f"torch.profiler GPU {int(e.device)}"}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
        if (pid, tid) not in named:
            named.add((pid, tid))
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"stream {tid}"}})
        out.append({"ph": "X", "cat": f"{PROFILER_CATEGORY}.{e.category}", "name": e.name, "pid": pid, "tid": tid,
                    "ts": (e.start_ns - offset.offset_ns - origin_ns) * 1e-3, "dur": (e.end_ns - e.start_ns) * 1e-3,
                    "args": {"profiler_start_ns": int(e.start_ns)}})
    return out


def align_with_profiler(doc: dict, spans: list[tuple[int, int]], events, kernel: str) -> ClockOffset:
    """Add torch.profiler's device timeline to the Chrome trace ``doc`` of a %globaltimer region trace
    (:func:`argus_rt.trace.chrome_trace`), on its clock; ``spans``: :func:`launch_span` of each traced
    launch, in launch order. The offset and its uncertainty go in ``otherData.clock_alignment``."""
    from .chrome import add_events

    if doc["otherData"].get("unit") != "us":
        raise ClockAlignmentError("aligning needs a %globaltimer region trace (ns); this timeline is in "
                                  f"{doc['otherData'].get('unit')}")
    offset = globaltimer_offset(spans, kernel_slices(events, kernel), kernel)
    add_events(doc, profiler_events(events, offset, int(doc["otherData"]["origin"])))
    doc["otherData"]["clock_alignment"] = offset.to_dict()
    return offset


def spans_of(*intervals: Intervals) -> list[tuple[int, int]]:
    """:func:`launch_span` of each launch's intervals."""
    return [launch_span(iv) for iv in intervals]


def concat(*intervals: Intervals) -> Intervals:
    """The occurrences of several traced launches as one timeline."""
    parts, base = [], 0
    for iv in intervals:
        rows = iv.rows.copy()
        rows["parent"] = np.where(rows["parent"] >= 0, rows["parent"] + base, -1)  # rows of the joined array
        parts.append(rows)
        base += len(rows)
    return Intervals(np.concatenate(parts), intervals[0].unit, [p for iv in intervals for p in iv.problems])
