"""Python mirror of ``csrc/argus/argus_layout.h``: numpy dtypes and constants of the trace memory.

The C++ header is the definition; ``tests/test_trace_layout.py`` compiles it with a host compiler,
prints every size, offset and constant, and checks this module against them.
"""
from __future__ import annotations

import numpy as np

LAYOUT_VERSION = 1

KIND_BEGIN = 1
KIND_END = 2
KIND_SHIFT = 62
TIME_MASK = (1 << 62) - 1

COORD_NONE = 0xFFFFFFFF

CLOCK_GLOBALTIMER = 0  # %globaltimer, ns, shared by all SMs
CLOCK_CLOCK64 = 1  # clock64(), SM cycles, one counter per SM
CLOCK_MODES = {"globaltimer": CLOCK_GLOBALTIMER, "clock64": CLOCK_CLOCK64}
CLOCK_UNITS = {CLOCK_GLOBALTIMER: "ns", CLOCK_CLOCK64: "cycles"}

RING_MAGIC = 0x52475241  # "ARGR"

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


def ring_stride(capacity: int) -> int:
    """Bytes of one ring: its header plus ``capacity`` records."""
    return RING_HEADER_DTYPE.itemsize + capacity * RECORD_DTYPE.itemsize


def buffer_bytes(num_rings: int, capacity: int) -> int:
    """Bytes of the buffer region for ``num_rings`` rings of ``capacity`` records."""
    return num_rings * ring_stride(capacity)
