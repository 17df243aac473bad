"""What one traced launch records: ring geometry, clock and scope filters; validated, and packed
into the ``argus_ctl`` control block the device reads."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import layout
from .errors import TraceConfigError


def _check_u32(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) < 2**32:
        raise TraceConfigError(f"{name} must be an integer in [0, 2**32), got {value!r}")
    return int(value)


@dataclass(frozen=True)
class TraceConfig:
    """Geometry and filters of a traced launch.

    ctas:           CTAs in the launch grid (product of the grid dimensions).
    threads_per_cta: threads per CTA (product of the block dimensions), 1..1024.
    capacity:       records per warp ring, a power of two (16 bytes each).
    clock:          "globaltimer" (ns, common to all SMs), "clock64" (SM cycles, per SM) or
                    "anchored" (ns from clock64 + globaltimer anchors; only for modules built with
                    -DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED, which accept nothing else).
    sms:            SM indices to trace (None = all).
    cta_range:      (begin, end) linear CTA indices to trace (None = all); rings exist only for these.
    warp_mask:      bit w traces warp w of each CTA (default: all warps).
    coord_window:   (begin, end) scope coordinates recorded by *_AT markers (None = all);
                    plain markers (no coordinate) are always recorded.
    seq:            arm sequence number (set by TraceSession.arm; 0 here means "not armed yet").
    """

    ctas: int
    threads_per_cta: int
    capacity: int = 256
    clock: str = "globaltimer"
    sms: tuple[int, ...] | None = None
    cta_range: tuple[int, int] | None = None
    warp_mask: int = 0xFFFFFFFF
    coord_window: tuple[int, int] | None = None
    seq: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        _check_u32("ctas", self.ctas)
        if self.ctas < 1:
            raise TraceConfigError(f"ctas must be >= 1, got {self.ctas}")
        if not isinstance(self.threads_per_cta, int) or not 1 <= self.threads_per_cta <= 1024:
            raise TraceConfigError(f"threads_per_cta must be an integer in [1, 1024], got {self.threads_per_cta!r}")
        cap = self.capacity
        if not isinstance(cap, int) or cap < 1 or cap & (cap - 1) or cap > 2**26:
            raise TraceConfigError(f"capacity must be a power of two in [1, 2**26] records, got {cap!r}")
        if self.clock not in layout.CLOCK_MODES:
            raise TraceConfigError(f"unknown clock {self.clock!r}; valid: {', '.join(layout.CLOCK_MODES)}")
        if self.sms is not None:
            for sm in self.sms:
                if not isinstance(sm, int) or not 0 <= sm < layout.MAX_SMS:
                    raise TraceConfigError(f"SM index {sm!r} out of range [0, {layout.MAX_SMS})")
        if self.cta_range is not None:
            lo, hi = self.cta_range
            if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo < hi <= self.ctas):
                raise TraceConfigError(f"cta_range {self.cta_range!r} must satisfy 0 <= begin < end <= ctas={self.ctas}")
        _check_u32("warp_mask", self.warp_mask)
        if self.coord_window is not None:
            lo, hi = self.coord_window
            _check_u32("coord_window begin", lo)
            _check_u32("coord_window end", hi)
            if lo >= hi:
                raise TraceConfigError(f"coord_window {self.coord_window!r} is empty; need begin < end")
        _check_u32("seq", self.seq)

    # ---- derived geometry -----------------------------------------------------------------
    @property
    def warps_per_cta(self) -> int:
        return (self.threads_per_cta + 31) // 32

    @property
    def cta_begin(self) -> int:
        return 0 if self.cta_range is None else self.cta_range[0]

    @property
    def cta_end(self) -> int:
        return self.ctas if self.cta_range is None else self.cta_range[1]

    @property
    def num_rings(self) -> int:
        return (self.cta_end - self.cta_begin) * self.warps_per_cta

    @property
    def clock_mode(self) -> int:
        return layout.CLOCK_MODES[self.clock]

    @property
    def unit(self) -> str:
        """Unit of timestamps and durations: "ns" or "cycles"."""
        return layout.CLOCK_UNITS[self.clock_mode]

    @property
    def buffer_bytes(self) -> int:
        return layout.buffer_bytes(self.num_rings, self.capacity, self.clock_mode)

    def ring_of(self, cta: int, warp: int) -> int:
        """Ring index of warp ``warp`` of linear CTA ``cta`` (the device's formula)."""
        return (cta - self.cta_begin) * self.warps_per_cta + warp

    def sm_mask_words(self) -> np.ndarray:
        words = np.zeros(layout.SM_MASK_WORDS, dtype=np.uint32)
        if self.sms is None:
            words[:] = 0xFFFFFFFF
        else:
            for sm in self.sms:
                words[sm >> 5] |= np.uint32(1 << (sm & 31))
        return words

    def ctl_block(self, buffers: int, enabled: bool = True) -> np.ndarray:
        """The ``argus_ctl`` bytes (one CTL_DTYPE element) for buffer region address ``buffers``."""
        ctl = np.zeros((), dtype=layout.CTL_DTYPE)
        ctl["buffers"] = buffers
        ctl["enabled"] = 1 if enabled else 0
        ctl["seq"] = self.seq
        ctl["capacity"] = self.capacity
        ctl["num_rings"] = self.num_rings
        ctl["warps_per_cta"] = self.warps_per_cta
        ctl["clock_mode"] = self.clock_mode
        ctl["cta_begin"] = self.cta_begin
        ctl["cta_end"] = self.cta_end
        ctl["warp_mask"] = self.warp_mask
        lo, hi = self.coord_window if self.coord_window is not None else (0, 0xFFFFFFFF)
        ctl["coord_begin"] = lo
        ctl["coord_end"] = hi
        ctl["version"] = layout.LAYOUT_VERSION
        ctl["sm_mask"] = self.sm_mask_words()
        return ctl

    def to_json(self) -> dict:
        return {
            "ctas": self.ctas,
            "threads_per_cta": self.threads_per_cta,
            "capacity": self.capacity,
            "clock": self.clock,
            "sms": list(self.sms) if self.sms is not None else None,
            "cta_range": list(self.cta_range) if self.cta_range is not None else None,
            "warp_mask": self.warp_mask,
            "coord_window": list(self.coord_window) if self.coord_window is not None else None,
            "seq": self.seq,
        }

    @classmethod
    def from_json(cls, data: dict) -> "TraceConfig":
        known = {"ctas", "threads_per_cta", "capacity", "clock", "sms", "cta_range", "warp_mask", "coord_window", "seq"}
        extra = set(data) - known
        if extra:
            raise TraceConfigError(f"unknown trace config keys {sorted(extra)}; valid: {sorted(known)}")
        kw = dict(data)
        for key in ("sms", "cta_range", "coord_window"):
            if kw.get(key) is not None:
                kw[key] = tuple(kw[key])
        return cls(**kw)
