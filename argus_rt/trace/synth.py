"""A pure-Python writer with the device's ring semantics, for tests and for crafting traces by hand.

It follows ``argus_detail::claim_ring`` / ``emit`` in csrc/argus/argus.cuh step for step, so a
decoder test can state what the device would have written without a GPU.
"""
from __future__ import annotations

import numpy as np

from . import layout
from .config import TraceConfig


class RingWriter:
    """Build the buffer region of one arm: ``emit(cta, warp, sm, kind, region_id, time, coord)``."""

    def __init__(self, config: TraceConfig) -> None:
        self.config = config
        self.raw = np.zeros(config.buffer_bytes, dtype=np.uint8)
        self._stride = layout.ring_stride(config.capacity)

    def _header(self, ring: int) -> np.ndarray:
        off = ring * self._stride
        return self.raw[off : off + layout.RING_HEADER_DTYPE.itemsize].view(layout.RING_HEADER_DTYPE)

    def _records(self, ring: int) -> np.ndarray:
        off = ring * self._stride + layout.RING_HEADER_DTYPE.itemsize
        return self.raw[off : off + self.config.capacity * layout.RECORD_DTYPE.itemsize].view(layout.RECORD_DTYPE)

    def claim(self, cta: int, warp: int, sm: int) -> int:
        """Claim the ring of (cta, warp) as a new CTA instance would; returns the ring index."""
        cfg = self.config
        ring = cfg.ring_of(cta, warp)
        h = self._header(ring)
        if int(h["magic"][0]) == layout.RING_MAGIC and int(h["seq"][0]) == cfg.seq:
            h["claims"] += 1
        else:
            h[0] = (layout.RING_MAGIC, cfg.seq, sm, cta, warp, 0, 0, 1)
        return ring

    def emit(self, cta: int, warp: int, sm: int, kind: str, region_id: int, time: int,
             coord: int = layout.COORD_NONE) -> None:
        """Append one record to the ring of (cta, warp), claiming it first if needed."""
        cfg = self.config
        ring = cfg.ring_of(cta, warp)
        h = self._header(ring)
        if not (int(h["magic"][0]) == layout.RING_MAGIC and int(h["seq"][0]) == cfg.seq):
            self.claim(cta, warp, sm)
        code = {"begin": layout.KIND_BEGIN, "end": layout.KIND_END}[kind]
        n = int(h["written"][0])
        rec = self._records(ring)
        rec[n & (cfg.capacity - 1)] = (region_id, coord, (time & layout.TIME_MASK) | (code << layout.KIND_SHIFT))
        h["written"] = n + 1
        if n + 1 > cfg.capacity:
            h["dropped"] = n + 1 - cfg.capacity

    def bytes(self) -> bytes:
        return self.raw.tobytes()
