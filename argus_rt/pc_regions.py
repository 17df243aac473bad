"""The PC-to-region map n(r, p) of one kernel: per PC, executions per region stack, and what follows
from it (ownership shares alpha, entropy H(p), metrics lifted to regions).

How the map is built (SASS markers + per-PC counts) is :mod:`argus_rt.backends.pcmap`'s job; this
module only holds the map, so that analyses and synthesis need no backend to read one.

**Unknown PCs.** A metric value at a PC the map does not know, or at a PC that never ran in the
mapping run (no owner to share it by), is never dropped and never an error: :meth:`PcRegionMap.attribute`
gives it to :data:`UNMAPPED`, so the lifted values still add up to the metric's total and the
report can say how much was not attributed. This is also what :mod:`argus_rt.attribution` does.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from .fsutil import atomic_write_text
from .sass import pc_key

UNMAPPED = "<unmapped>"
NO_REGION = 0  # region ID of code outside every region
PC_METHODS = ("static_cfg", "call_site_split", "unexecuted", "unreachable")
UNMAPPED_METHOD = "PCs absent from the map"

Stack = tuple[int, ...]


class PcMapError(ValueError):
    """The SASS or the counts cannot give a consistent PC-to-region map; the message says where."""


@dataclass
class PcOwnership:
    """n(stack, p) for one PC: execution count per full region stack, and how it was obtained."""

    pc: int
    stacks: dict[Stack, float]
    method: str  # one of PC_METHODS

    def leaf_counts(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for stack, n in self.stacks.items():
            r = stack[-1] if stack else NO_REGION
            out[r] = out.get(r, 0.0) + n
        return out

    def inclusive_counts(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for stack, n in self.stacks.items():
            for r in (set(stack) or {NO_REGION}):
                out[r] = out.get(r, 0.0) + n
        return out

    @property
    def total(self) -> float:
        return sum(self.stacks.values())

    def alpha(self) -> dict[int, float]:
        """alpha(r, p) over leaf owners; empty when the PC never ran."""
        leaf = self.leaf_counts()
        tot = sum(leaf.values())
        return {r: n / tot for r, n in leaf.items() if n > 0} if tot > 0 else {}

    def entropy(self) -> float:
        """H(p) in nats (0 for a PC with one owner or no executions)."""
        return -sum(a * math.log(a) for a in self.alpha().values() if 0 < a < 1)


@dataclass
class PcRegionMap:
    """n(r, p) for every PC of one kernel of one program variant."""

    kernel: str  # kernel_key of the function
    method: str
    pcs: dict[int, PcOwnership]
    opcodes: dict[int, str] = field(default_factory=dict)

    # ---- lookups --------------------------------------------------------------------------
    def entropy(self, pc: int) -> float:
        return self.pcs[pc].entropy()

    def shared_pcs(self) -> list[int]:
        """PCs whose executions belong to more than one leaf region (H(p) > 0)."""
        return sorted(pc for pc, o in self.pcs.items() if o.entropy() > 0)

    def regions(self) -> list[int]:
        return sorted({r for o in self.pcs.values() for s in o.stacks for r in s})

    def counts(self, *, inclusive: bool = False) -> dict[int, float]:
        """Executed instructions per region (warp-level, as counted by the weights' source)."""
        out: dict[int, float] = {}
        for o in self.pcs.values():
            for r, n in (o.inclusive_counts() if inclusive else o.leaf_counts()).items():
                out[r] = out.get(r, 0.0) + n
        return out

    def attribute(self, metric: dict[int, float], *, inclusive: bool = False) -> dict[int | str, "AttributedValue"]:
        """m(r) = sum_p alpha(r, p) m(p) for an additive PC-keyed metric (keys: PCs of this kernel).

        With ``inclusive`` a region also receives its descendants' shares. Each value carries the
        count-weighted mean entropy of the PCs it came from and the share from shared PCs. Values at
        PCs the map does not know or that never ran in the mapping run go to :data:`UNMAPPED`.
        """
        acc: dict[int | str, list[float]] = {}
        unmapped = 0.0
        for pc, value in metric.items():
            if value == 0:
                continue
            own = self.pcs.get(pc)
            if own is None or own.total <= 0:  # no owner to share it by: counted, not dropped
                unmapped += value
                continue
            h = own.entropy()
            counts = own.inclusive_counts() if inclusive else own.leaf_counts()
            for r, n in counts.items():
                share = value * n / own.total
                a = acc.setdefault(r, [0.0, 0.0, 0.0])
                a[0] += share
                a[1] += share * h
                a[2] += share if h > 0 else 0.0
        out: dict[int | str, AttributedValue] = {
            r: AttributedValue(v, hv / v if v else 0.0, sv / v if v else 0.0, self.method) for r, (v, hv, sv) in acc.items()}
        if unmapped:
            out[UNMAPPED] = AttributedValue(unmapped, 0.0, 0.0, UNMAPPED_METHOD)
        return out

    # ---- evidence file --------------------------------------------------------------------
    def to_evidence(self) -> dict:
        """The ``argus.pc_region_counts/1`` document (leaf entries, plus full stacks and per-PC methods)."""
        entries, stacks, methods = [], [], {}
        for pc in sorted(self.pcs):
            o = self.pcs[pc]
            key = pc_key(self.kernel, pc)
            methods[key] = o.method
            for r, n in sorted(o.leaf_counts().items()):
                entries.append([key, r, n])
            for s, n in sorted(o.stacks.items()):
                stacks.append([key, list(s), n])
        return {"format": "argus.pc_region_counts/1", "method": self.method, "kernel": self.kernel,
                "entries": entries, "stacks": stacks, "pc_methods": methods,
                "opcodes": {pc_key(self.kernel, pc): op for pc, op in sorted(self.opcodes.items())}}

    @classmethod
    def from_evidence(cls, doc: dict) -> "PcRegionMap":
        if not isinstance(doc, dict) or doc.get("format") != "argus.pc_region_counts/1":
            got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise PcMapError(f"not an argus.pc_region_counts/1 document (format {got!r})")
        from .sass import parse_pc_key

        pcs: dict[int, PcOwnership] = {}
        # Maps from NVBit carry leaf entries only: a leaf stands for its whole stack then.
        rows = doc.get("stacks") or [[k, [r] if r != NO_REGION else [], n] for k, r, n in doc.get("entries", [])]
        for key, stack, n in rows:
            _, pc = parse_pc_key(key)
            own = pcs.setdefault(pc, PcOwnership(pc, {}, doc.get("pc_methods", {}).get(key, doc["method"])))
            own.stacks[tuple(stack)] = float(n)
        opcodes = {parse_pc_key(k)[1]: v for k, v in doc.get("opcodes", {}).items()}
        return cls(doc.get("kernel", ""), doc["method"], pcs, opcodes)

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_text(Path(path), json.dumps(self.to_evidence()) + "\n")


@dataclass(frozen=True)
class AttributedValue:
    """A PC-keyed metric lifted to a region."""

    value: float
    mean_entropy: float  # value-weighted mean H(p) of the contributing PCs (nats)
    shared_fraction: float  # share of the value that came from PCs with H(p) > 0
    method: str
