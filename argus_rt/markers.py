"""The marker-only footprint of ARGUS_BEGIN/ARGUS_END in SASS, defined once for Python.

In marker-only builds each marker is three inline-PTX ``pmevent.mask <imm16>`` instructions, which
ptxas keeps, in order, as SASS ``PMTRIG <imm16>`` exactly where the marker stands (checked with
nvcc 13.0 for sm_90a). They carry no memory traffic:

    PMTRIG (MARKER_TAG | kind)     kind: MARKER_BEGIN or MARKER_END
    PMTRIG (region_id & 0xffff)
    PMTRIG (region_id >> 16)

``csrc/argus/argus.cuh`` emits the same constants; ``tests/test_markers_agree.py`` checks that the
header and this module agree.
"""
from __future__ import annotations

from dataclasses import dataclass

MARKER_TAG = 0xA500
MARKER_KIND_MASK = 0x00FF
MARKER_BEGIN = 0x01
MARKER_END = 0x02
MARKER_WORDS = 3


class MarkerDecodeError(ValueError):
    """A PMTRIG sequence that is not a well-formed Argus marker."""


@dataclass(frozen=True)
class Marker:
    kind: str  # "begin" or "end"
    region_id: int


def marker_immediates(kind: str, region_id: int) -> tuple[int, int, int]:
    """The three PMTRIG immediates a marker compiles to."""
    code = {"begin": MARKER_BEGIN, "end": MARKER_END}.get(kind)
    if code is None:
        raise MarkerDecodeError(f"unknown marker kind {kind!r}; valid: 'begin', 'end'")
    if not 0 < region_id < 2**32:
        raise MarkerDecodeError(f"region id {region_id!r} is not a non-zero 32-bit value")
    return (MARKER_TAG | code, region_id & 0xFFFF, region_id >> 16)


def is_marker_tag(imm: int) -> bool:
    return (imm & ~MARKER_KIND_MASK & 0xFFFF) == MARKER_TAG and (imm & MARKER_KIND_MASK) in (MARKER_BEGIN, MARKER_END)


def decode_marker(immediates: list[int] | tuple[int, ...]) -> Marker:
    """Decode three consecutive PMTRIG immediates (tag, id low, id high) into a :class:`Marker`."""
    if len(immediates) != MARKER_WORDS:
        raise MarkerDecodeError(f"a marker is {MARKER_WORDS} PMTRIG words, got {len(immediates)}: {immediates!r}")
    tag, lo, hi = immediates
    if not is_marker_tag(tag):
        raise MarkerDecodeError(
            f"PMTRIG 0x{tag:04x} is not an Argus marker tag (expected 0x{MARKER_TAG | MARKER_BEGIN:04x} "
            f"or 0x{MARKER_TAG | MARKER_END:04x})"
        )
    kind = "begin" if (tag & MARKER_KIND_MASK) == MARKER_BEGIN else "end"
    rid = (hi << 16) | lo
    if rid == 0:
        raise MarkerDecodeError("marker carries region id 0, which is reserved")
    return Marker(kind, rid)
