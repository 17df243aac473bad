"""Per-region statistics over the intervals of a trace."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .intervals import Intervals


@dataclass(frozen=True)
class RegionStats:
    """Durations of one region's occurrences, in ``unit`` ("ns" or "cycles").

    sm_mean_min / sm_mean_max: lowest and highest per-SM mean duration; sm_spread is their
    difference (how much the region's time depends on where it ran). sms: SMs it ran on.
    incomplete: the trace lost occurrences, so count and total are lower bounds.
    """

    region_id: int
    name: str
    count: int
    total: float
    mean: float
    p50: float
    p99: float
    min: float
    max: float
    sm_mean_min: float
    sm_mean_max: float
    sm_spread: float
    sms: int
    unit: str
    incomplete: bool

    def to_json(self) -> dict:
        return asdict(self)


def duration_summary(d: np.ndarray) -> dict:
    """count, mean, p50, p99, min, max, total of a non-empty array of durations (same unit as ``d``)."""
    d = np.asarray(d, dtype=np.float64)
    return {"count": int(d.size), "mean": float(d.mean()), "p50": float(np.percentile(d, 50)),
            "p99": float(np.percentile(d, 99)), "min": float(d.min()), "max": float(d.max()),
            "total": float(d.sum())}


def region_stats(intervals: Intervals, names=None) -> list[RegionStats]:
    """Statistics per region ID, ordered by total time (largest first).

    names: optional RegionTree or {id: name} mapping used to label the rows.
    """
    rows = intervals.rows
    out = []
    for rid in np.unique(rows["region_id"]):
        sel = rows[rows["region_id"] == rid]
        d = sel["duration"].astype(np.float64)
        sm_means = [float(d[sel["sm"] == sm].mean()) for sm in np.unique(sel["sm"])]
        out.append(
            RegionStats(
                region_id=int(rid),
                name=_name(names, int(rid)),
                **duration_summary(d),
                sm_mean_min=min(sm_means),
                sm_mean_max=max(sm_means),
                sm_spread=max(sm_means) - min(sm_means),
                sms=len(sm_means),
                unit=intervals.unit,
                incomplete=intervals.incomplete,
            )
        )
    out.sort(key=lambda s: -s.total)
    return out


def _name(names, rid: int) -> str:
    if names is None:
        return f"0x{rid:08x}"
    if isinstance(names, dict):
        return names.get(rid, f"0x{rid:08x}")
    try:
        return names[rid].name
    except (KeyError, ValueError):
        return f"0x{rid:08x}"
