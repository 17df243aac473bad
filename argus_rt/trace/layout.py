"""Python mirror of ``csrc/argus/argus_layout.h``: numpy dtypes and constants of the trace memory.

The C++ header is the definition; ``tests/test_trace_layout.py`` compiles it with a host compiler,
prints every size, offset and constant, and checks this module against them.
"""
from __future__ import annotations

import numpy as np

LAYOUT_VERSION = 1

KIND_BEGIN = 1
KIND_END = 2
KIND_LANES = 3  # lane-group record after a BEGIN/END of a divergent group: region_id = lane mask, coord = lowest lane
KIND_SHIFT = 62
TIME_MASK = (1 << 62) - 1

COORD_NONE = 0xFFFFFFFF

CLOCK_GLOBALTIMER = 0  # %globaltimer, ns, shared by all SMs
CLOCK_CLOCK64 = 1  # clock64(), SM cycles, one counter per SM
CLOCK_ANCHORED = 2  # anchored build only: clock64 records converted to ns by globaltimer anchors
CLOCK_MODES = {"globaltimer": CLOCK_GLOBALTIMER, "clock64": CLOCK_CLOCK64, "anchored": CLOCK_ANCHORED}
CLOCK_UNITS = {CLOCK_GLOBALTIMER: "ns", CLOCK_CLOCK64: "cycles", CLOCK_ANCHORED: "ns"}
ANCHOR_PERIOD = 32  # the anchored build refreshes the latest anchor at records 1, 2, 4, 8, 16 and n % 32 == 0

RING_MAGIC = 0x52475241  # "ARGR"
# Bit of the ring header's `warp` word: a register-cursor marker of that warp ran without all its launch lanes
# (its records overwrote each other); the decoder refuses the ring.
RING_WARP_DIVERGENT = 1 << 31
# Bit of the ring header's `warp` word set by the register cursor's lanes build (-DARGUS_REG_LANES=1,
# csrc/argus/argus_cursors.cuh): the ring is 32 sub-rings of capacity // 32 records, sub-ring L written by lane L as
# the lowest active lane of each marker's lane group, each closed by an end record (region_id 0, coord = the lane's
# count, stamp = the full time | LANES_END_KIND << KIND_SHIFT); its other records are (region_id, coord, time bits
# 0..31, lane mask with bit 0 replaced by the kind: 0 BEGIN, 1 END). Header written / dropped are 0.
RING_WARP_LANES = 1 << 30
LANES_END_KIND = 3
LANES_MIN_CAPACITY = 64

MAX_SMS = 256
SM_MASK_WORDS = MAX_SMS // 32
MAX_WARPS_PER_CTA = 32

# One marker event (16 bytes): stamp = time (bits 0..61) | kind << 62.
RECORD_DTYPE = np.dtype([("region_id", "<u4"), ("coord", "<u4"), ("stamp", "<u8")])

# Header in front of each per-warp ring (32 bytes).
RING_HEADER_DTYPE = np.dtype(
    [
        ("magic", "<u4"),
        ("seq", "<u4"),
        ("sm", "<u4"),
        ("cta", "<u4"),
        ("warp", "<u4"),
        ("written", "<u4"),
        ("dropped", "<u4"),
        ("claims", "<u4"),
    ]
)

# Anchored build: (globaltimer ns, clock64 cycles) pairs right after the ring header (32 bytes).
ANCHORS_DTYPE = np.dtype(
    [("first_timer", "<u8"), ("first_clock", "<u8"), ("last_timer", "<u8"), ("last_clock", "<u8")]
)
ANCHORED_HEADER_BYTES = 64
ANCHOR_FIRST_OFFSET = 32
ANCHOR_LAST_OFFSET = 48

# The control block `argus_ctl` (96 bytes).
CTL_DTYPE = np.dtype(
    [
        ("buffers", "<u8"),
        ("enabled", "<u4"),
        ("seq", "<u4"),
        ("capacity", "<u4"),
        ("num_rings", "<u4"),
        ("warps_per_cta", "<u4"),
        ("clock_mode", "<u4"),
        ("cta_begin", "<u4"),
        ("cta_end", "<u4"),
        ("warp_mask", "<u4"),
        ("coord_begin", "<u4"),
        ("coord_end", "<u4"),
        ("version", "<u4"),
        ("unbuffered", "<u4"),
        ("reserved", "<u4"),
        ("sm_mask", "<u4", (SM_MASK_WORDS,)),
    ]
)

CTL_SYMBOL = "argus_ctl"

assert RECORD_DTYPE.itemsize == 16 and RING_HEADER_DTYPE.itemsize == 32 and CTL_DTYPE.itemsize == 96
assert RING_HEADER_DTYPE.itemsize + ANCHORS_DTYPE.itemsize == ANCHORED_HEADER_BYTES


def header_bytes(clock_mode: int = CLOCK_GLOBALTIMER) -> int:
    """Bytes in front of a ring's records: 32, or 64 with the anchored build's anchor pairs."""
    return ANCHORED_HEADER_BYTES if clock_mode == CLOCK_ANCHORED else RING_HEADER_DTYPE.itemsize


def ring_stride(capacity: int, clock_mode: int = CLOCK_GLOBALTIMER) -> int:
    """Bytes of one ring: its header (and anchors, if anchored) plus ``capacity`` records."""
    return header_bytes(clock_mode) + capacity * RECORD_DTYPE.itemsize


def buffer_bytes(num_rings: int, capacity: int, clock_mode: int = CLOCK_GLOBALTIMER) -> int:
    """Bytes of the buffer region for ``num_rings`` rings of ``capacity`` records."""
    return num_rings * ring_stride(capacity, clock_mode)
