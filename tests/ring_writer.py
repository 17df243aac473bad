"""A pure-Python writer with the device's ring semantics, for tests (no GPU).

It follows ``argus_detail::claim_ring`` / ``emit`` in csrc/argus/argus_shared_cursor.cuh step for step for a
converged warp (one record per marker; tests that need a lane group's ARGUS_KIND_LANES record write it themselves,
tests/test_marker_paths.py), so a decoder test can state what the device would have written without a GPU. It lays the bytes out with
argus_rt.trace.layout, the module the decoder reads them with, so a layout bug they share cannot show
in tests built on it: tests/test_trace_literal_bytes.py decodes bytes written out by hand from
csrc/argus/argus_layout.h for that (and checks this writer against them).
"""
from __future__ import annotations

import numpy as np

from argus_rt.trace import layout
from argus_rt.trace.config import TraceConfig


class RingWriter:
    """Build the buffer region of one arm: ``emit(cta, warp, sm, kind, region_id, time, coord)``.

    With ``config.clock == "anchored"`` ``time`` is the true time in ns; the writer stores what the
    anchored build would: clock64 cycles of the SM (``clock_offsets[sm] + time * ghz``) and
    (globaltimer, clock64) anchors with the timer rounded down to ``timer_step_ns``.
    ghz:           SM clock in cycles per ns (one float for all SMs, or a dict SM -> float).
    clock_offsets: clock64 value of each SM at time 0 (dict SM -> cycles; missing SMs: 0).
    """

    def __init__(self, config: TraceConfig, ghz: float | dict[int, float] = 1.98,
                 clock_offsets: dict[int, int] | None = None, timer_step_ns: int = 32) -> None:
        self.config = config
        self.raw = np.zeros(config.buffer_bytes, dtype=np.uint8)
        self._stride = layout.ring_stride(config.capacity, config.clock_mode)
        self._head = layout.header_bytes(config.clock_mode)
        self._anchored = config.clock_mode == layout.CLOCK_ANCHORED
        self._ghz = ghz
        self._offsets = clock_offsets or {}
        self._step = timer_step_ns

    def cycles(self, sm: int, time_ns: int) -> int:
        """clock64 of SM ``sm`` at true time ``time_ns`` (anchored configs)."""
        ghz = self._ghz[sm] if isinstance(self._ghz, dict) else self._ghz
        return int(self._offsets.get(sm, 0)) + int(round(time_ns * ghz))

    def _anchor(self, ring: int, which: str, sm: int, time_ns: int) -> None:
        off = ring * self._stride + layout.ANCHOR_FIRST_OFFSET
        a = self.raw[off : off + layout.ANCHORS_DTYPE.itemsize].view(layout.ANCHORS_DTYPE)
        a[f"{which}_timer"] = time_ns - time_ns % self._step
        a[f"{which}_clock"] = self.cycles(sm, time_ns)

    def _header(self, ring: int) -> np.ndarray:
        off = ring * self._stride
        return self.raw[off : off + layout.RING_HEADER_DTYPE.itemsize].view(layout.RING_HEADER_DTYPE)

    def _records(self, ring: int) -> np.ndarray:
        off = ring * self._stride + self._head
        return self.raw[off : off + self.config.capacity * layout.RECORD_DTYPE.itemsize].view(layout.RECORD_DTYPE)

    def claim(self, cta: int, warp: int, sm: int, time: int = 0) -> int:
        """Claim the ring of (cta, warp) as a new CTA instance would (at ``time`` ns); returns the ring."""
        cfg = self.config
        ring = cfg.ring_of(cta, warp)
        h = self._header(ring)
        if int(h["magic"][0]) == layout.RING_MAGIC and int(h["seq"][0]) == cfg.seq:
            h["claims"] += 1
        else:
            h[0] = (layout.RING_MAGIC, cfg.seq, sm, cta, warp, 0, 0, 1)
            if self._anchored:
                self._anchor(ring, "first", sm, time)
                self._anchor(ring, "last", sm, time)
        return ring

    def emit(self, cta: int, warp: int, sm: int, kind: str, region_id: int, time: int,
             coord: int = layout.COORD_NONE) -> None:
        """Append one record to the ring of (cta, warp), claiming it first if needed."""
        cfg = self.config
        ring = cfg.ring_of(cta, warp)
        h = self._header(ring)
        if not (int(h["magic"][0]) == layout.RING_MAGIC and int(h["seq"][0]) == cfg.seq):
            self.claim(cta, warp, sm, time)
        code = {"begin": layout.KIND_BEGIN, "end": layout.KIND_END}[kind]
        n = int(h["written"][0])
        rec = self._records(ring)
        stamp = self.cycles(sm, time) if self._anchored else time
        rec[n & (cfg.capacity - 1)] = (region_id, coord, (stamp & layout.TIME_MASK) | (code << layout.KIND_SHIFT))
        if self._anchored and (n & (cfg.capacity - 1) & (layout.ANCHOR_PERIOD - 1) == 0 or n & (n - 1) == 0):
            self._anchor(ring, "last", sm, time)
        h["written"] = n + 1
        if n + 1 > cfg.capacity:
            h["dropped"] = n + 1 - cfg.capacity

    def bytes(self) -> bytes:
        return self.raw.tobytes()
