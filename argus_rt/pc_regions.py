"""The PC-to-region map n(r, p) of one kernel: per PC, executions per region stack, and what follows
from it (ownership shares alpha, entropy H(p), metrics lifted to regions).

With n(r, p) the executions of the instruction at PC p under leaf region r in the mapping run:

    alpha(r, p) = n(r, p) / sum_r' n(r', p)            share of PC p owned by region r
    m(r)        = sum_p alpha(r, p) * m(p)             an additive PC-keyed metric lifted to regions
    H(p)        = -sum_{r: alpha > 0} alpha ln alpha   ownership entropy of PC p (nats)

H(p) is ambiguity metadata, not an error bound: 0 when one region owns every execution of p,
ln k when k regions share it equally. A region's entropy is the n-weighted mean of H(p) over the
PCs it executes. Ratio metrics (e.g. predicated-off / executed) are lifted by attributing numerator
and denominator separately and dividing per region (:meth:`PcRegionMap.attribute_ratio`).

How the map is built (SASS markers + per-PC counts) is :mod:`argus_rt.pc_region_analysis`'s job, from
what the mapping run (:mod:`argus_rt.backends.pcmap`) collects; this module only holds the map, so that
analyses and synthesis need no backend to read one.

**Unknown PCs.** A PC the map does not know is treated as a PC that never ran in the mapping run:
it has no owner. Its :meth:`PcRegionMap.alpha` is ``{}`` and its :meth:`PcRegionMap.entropy` 0.0,
and a metric value at it is never dropped and never an error: :meth:`PcRegionMap.attribute` gives it
to :data:`UNMAPPED`, so the lifted values still add up to the metric's total and the report can say
how much was not attributed. A PC key naming another kernel is an error (:class:`PcMapError`), since
PCs are offsets inside one function.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .sass import kernel_key, parse_pc_key, pc_key

UNMAPPED = "<unmapped>"
NO_REGION = 0  # region ID of code outside every region
PC_METHODS = ("static_cfg", "call_site_split", "unexecuted", "unreachable")
UNMAPPED_METHOD = "PCs absent from the map"

Stack = tuple[int, ...]


class PcMapError(ValueError):
    """The SASS, the counts or an evidence document cannot give a consistent PC-to-region map; the
    message says where."""


def _count(n: object, where: str) -> float:
    value = float(n)
    if not math.isfinite(value) or value < 0:
        raise PcMapError(f"n({where}) = {n!r}: counts must be finite and >= 0")
    return value


def _parse_key(key: object) -> tuple[str, int]:
    try:
        return parse_pc_key(str(key))
    except ValueError as e:
        raise PcMapError(str(e)) from None


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

    @classmethod
    def from_counts(cls, kernel: str, entries: Iterable[tuple[int, int, float]], *,
                    method: str = "unknown") -> "PcRegionMap":
        """From leaf counts ``(pc, region id, n)``; a leaf stands for its whole stack (NO_REGION: none).
        Counts of one (pc, region) add up; a count that is negative or not finite is a PcMapError."""
        pcs: dict[int, PcOwnership] = {}
        for pc, region, n in entries:
            value = _count(n, f"region={region!r}, pc={pc!r}")
            own = pcs.setdefault(pc, PcOwnership(pc, {}, method))
            stack = (region,) if region != NO_REGION else ()
            own.stacks[stack] = own.stacks.get(stack, 0.0) + value
        return cls(kernel_key(kernel) if kernel else "", method, pcs)

    # ---- lookups (a PC the map does not know has no owner: see the module docstring) ------
    def alpha(self, pc: int) -> dict[int, float]:
        """alpha(r, p) over leaf regions; ``{}`` for a PC that never ran or that the map does not know."""
        own = self.pcs.get(pc)
        return own.alpha() if own is not None else {}

    def entropy(self, pc: int) -> float:
        """H(p) in nats; 0.0 for a PC with one owner, none, or that the map does not know."""
        own = self.pcs.get(pc)
        return own.entropy() if own is not None else 0.0

    def shared_pcs(self) -> list[int]:
        """PCs whose executions belong to more than one leaf region (H(p) > 0)."""
        return sorted(pc for pc, o in self.pcs.items() if o.entropy() > 0)

    def regions(self) -> list[int]:
        """Region IDs on any stack (NO_REGION, code outside every region, is not one)."""
        return sorted({r for o in self.pcs.values() for s in o.stacks for r in s})

    def region_entropy(self) -> dict[int, float]:
        """Per leaf region (NO_REGION included when code outside regions ran): the n-weighted mean
        of H(p) over the PCs it executes, in nats."""
        weighted: dict[int, float] = {}
        total: dict[int, float] = {}
        for o in self.pcs.values():
            h = o.entropy()
            for r, n in o.leaf_counts().items():
                weighted[r] = weighted.get(r, 0.0) + n * h
                total[r] = total.get(r, 0.0) + n
        return {r: weighted[r] / total[r] for r in total if total[r] > 0}

    def pc_of(self, key: str) -> int:
        """The PC of an evidence file's PC key (``"<kernel>@0x<offset>"``) of this map's kernel.

        A key naming another kernel is a PcMapError: its offset means nothing in this function.
        A map read from a document that named no kernel takes any kernel's key."""
        kernel, pc = _parse_key(key)
        if self.kernel and kernel_key(kernel) != self.kernel:
            raise PcMapError(f"PC key {key!r} is of kernel {kernel_key(kernel)!r}; this map is of {self.kernel!r}")
        return pc

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

    def attribute_ratio(self, numerator: Mapping[int, float], denominator: Mapping[int, float]
                        ) -> dict[int | str, tuple[float, float, float | None]]:
        """Per region: (numerator_r, denominator_r, numerator_r / denominator_r, or None where the
        denominator is 0). Both metrics are lifted separately, then divided: averaging per-PC ratios
        would weight a rarely executed PC like a hot one."""
        num = self.attribute(dict(numerator))
        den = self.attribute(dict(denominator))
        out = {}
        for r in set(num) | set(den):
            n = num[r].value if r in num else 0.0
            d = den[r].value if r in den else 0.0
            out[r] = (n, d, n / d if d else None)
        return out

    # ---- evidence file --------------------------------------------------------------------
    def to_evidence(self) -> dict:
        """The ``argus.pc_region_counts/1`` document (leaf entries, plus full stacks and per-PC methods):
        the inline shape; a collection publishes it typed (``PcRegionCounts.from_document(doc)``,
        :mod:`argus_rt.evidence`, which sits above this module), and ``from_evidence`` reads that
        evidence's ``document()``."""
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
        """From an ``argus.pc_region_counts/1`` document of one kernel (its ``kernel``, else the one
        kernel its PC keys name); entries of several kernels, or bad counts, are a PcMapError."""
        if not isinstance(doc, dict) or doc.get("format") != "argus.pc_region_counts/1":
            got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise PcMapError(f"not an argus.pc_region_counts/1 document (format {got!r})")
        method = doc.get("method", "unknown")
        # Maps from NVBit carry leaf entries only: a leaf stands for its whole stack then.
        rows = doc.get("stacks") or [[k, [r] if r != NO_REGION else [], n] for k, r, n in doc.get("entries", [])]
        keyed = [(_parse_key(key), key, stack, n) for key, stack, n in rows]
        kernels = sorted({kernel_key(k) for (k, _), *_ in keyed})
        kernel = kernel_key(doc["kernel"]) if doc.get("kernel") else (kernels[0] if len(kernels) == 1 else "")
        if len(kernels) > 1 or (kernels and kernels != [kernel]):
            raise PcMapError(f"a PC-to-region map is of one kernel ({kernel or 'none named'}); "
                             f"the document's PC keys name {kernels}")
        pcs: dict[int, PcOwnership] = {}
        pc_methods = doc.get("pc_methods", {})
        for (_, pc), key, stack, n in keyed:
            own = pcs.setdefault(pc, PcOwnership(pc, {}, pc_methods.get(key, method)))
            stack = tuple(stack)
            own.stacks[stack] = own.stacks.get(stack, 0.0) + _count(n, f"stack={list(stack)}, pc={key}")
        opcodes = {_parse_key(k)[1]: v for k, v in doc.get("opcodes", {}).items()}
        return cls(kernel, method, pcs, opcodes)


@dataclass(frozen=True)
class AttributedValue:
    """A PC-keyed metric lifted to a region."""

    value: float
    mean_entropy: float  # value-weighted mean H(p) of the contributing PCs (nats)
    shared_fraction: float  # share of the value that came from PCs with H(p) > 0
    method: str
