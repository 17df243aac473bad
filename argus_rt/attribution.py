"""Count-weighted PC-to-region attribution with ownership entropy.

With n(r, p) the executions of the instruction at PC p under region r in the mapping run:

    alpha(r, p) = n(r, p) / sum_r' n(r', p)            share of PC p owned by region r
    m(r)        = sum_p alpha(r, p) * m(p)             an additive PC-keyed metric lifted to regions
    H(p)        = -sum_{r: alpha > 0} alpha ln alpha   ownership entropy of PC p (nats)

H(p) is ambiguity metadata, not an error bound: 0 when one region owns every execution of p,
ln k when k regions share it equally. A region's entropy is the n-weighted mean of H(p) over the
PCs it executes (0 when none of its PCs is shared). Ratio metrics (e.g. predicated-off / executed)
are lifted by attributing numerator and denominator separately and dividing per region.

Counts from a metric at PCs the map never saw are not dropped: they go to :data:`UNMAPPED`.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Hashable, Iterable, Mapping

from .pc_regions import UNMAPPED  # the one name for unattributed values, as argus_rt.pc_regions uses it


class AttributionError(ValueError):
    """Malformed ownership counts (negative, non-finite)."""


class PcRegionMap:
    """n(r, p) and everything derived from it. Regions and PCs are any hashable keys."""

    def __init__(self, entries: Iterable[tuple[Hashable, Hashable, float]], method: str = "unknown") -> None:
        self.method = method
        self._by_pc: dict[Hashable, dict[Hashable, float]] = defaultdict(dict)
        for pc, region, n in entries:
            n = float(n)
            if not math.isfinite(n) or n < 0:
                raise AttributionError(f"n(region={region!r}, pc={pc!r}) = {n!r}: counts must be finite and >= 0")
            if n > 0:
                row = self._by_pc[pc]
                row[region] = row.get(region, 0.0) + n
        self._by_pc = {pc: row for pc, row in self._by_pc.items() if row}

    @classmethod
    def from_doc(cls, doc: dict) -> "PcRegionMap":
        """From an ``argus.pc_region_counts/1`` document."""
        if doc.get("format") != "argus.pc_region_counts/1":
            raise AttributionError(f"expected format 'argus.pc_region_counts/1', got {doc.get('format')!r}")
        return cls(((pc, region, n) for pc, region, n in doc["entries"]), method=doc.get("method", "unknown"))

    @property
    def pcs(self) -> list:
        return list(self._by_pc)

    @property
    def regions(self) -> set:
        return {r for row in self._by_pc.values() for r in row}

    def alpha(self, pc: Hashable) -> dict[Hashable, float]:
        row = self._by_pc.get(pc, {})
        total = sum(row.values())
        return {r: n / total for r, n in row.items()} if total > 0 else {}

    def entropy(self, pc: Hashable) -> float:
        """H(p) in nats; 0.0 for a PC with one owner (or unknown)."""
        shares = [a for a in self.alpha(pc).values() if a > 0]
        if len(shares) <= 1:
            return 0.0
        return -sum(a * math.log(a) for a in shares)

    def owners(self, pc: Hashable) -> list:
        return sorted(self._by_pc.get(pc, {}), key=str)

    def attribute(self, metric: Mapping[Hashable, float], regions: Iterable | None = None) -> dict:
        """m(r) for every region (or the given ones); PCs absent from the map go to UNMAPPED."""
        out: dict = defaultdict(float)
        for pc, value in metric.items():
            shares = self.alpha(pc)
            if not shares:
                out[UNMAPPED] += float(value)
                continue
            for r, a in shares.items():
                out[r] += a * float(value)
        if regions is not None:
            keep = set(regions) | {UNMAPPED}
            return {r: v for r, v in out.items() if r in keep}
        return dict(out)

    def attribute_ratio(self, numerator: Mapping, denominator: Mapping) -> dict:
        """Per region: (numerator_r, denominator_r, numerator_r / denominator_r or None)."""
        num = self.attribute(numerator)
        den = self.attribute(denominator)
        out = {}
        for r in set(num) | set(den):
            n, d = num.get(r, 0.0), den.get(r, 0.0)
            out[r] = (n, d, n / d if d else None)
        return out

    def region_entropy(self) -> dict:
        """n-weighted mean of H(p) over each region's PCs (nats)."""
        weighted: dict = defaultdict(float)
        total: dict = defaultdict(float)
        for pc, row in self._by_pc.items():
            h = self.entropy(pc)
            for r, n in row.items():
                weighted[r] += n * h
                total[r] += n
        return {r: weighted[r] / total[r] for r in total if total[r] > 0}

    def shared_pcs(self) -> list:
        return [pc for pc, row in self._by_pc.items() if len(row) > 1]

    def to_doc(self) -> dict:
        return {"format": "argus.pc_region_counts/1", "method": self.method,
                "entries": [[pc, r, n] for pc, row in self._by_pc.items() for r, n in sorted(row.items(), key=str)]}
