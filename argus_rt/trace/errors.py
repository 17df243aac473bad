"""Exceptions of argus_rt.trace: each names the ring, record or value at fault."""
from __future__ import annotations

from ..errors import ArgusInputError


class TraceError(ArgusInputError):
    """Base class of trace configuration and decoding errors."""


class TraceConfigError(TraceError):
    """An invalid trace configuration value (the message lists the valid choices)."""


class TruncatedTraceError(TraceError):
    """The buffer is shorter than the configuration says it must be."""


class CorruptTraceError(TraceError):
    """A ring header or record that the device cannot have written this way."""


class UnknownRegionIdError(TraceError):
    """A record carries a region ID that is not in the program's region tree."""


class DivergentMarkersError(TraceError):
    """A register-cursor warp ran a marker on part of its lanes (its ring header says so): its records overwrote
    each other, so the ring is refused."""


class MismatchedMarkersError(TraceError):
    """BEGIN/END markers of a warp do not nest (wrong order, wrong ID or coordinate, unclosed)."""


class ClockConversionError(TraceError):
    """Anchored timestamps whose anchors are too close (or inconsistent) to convert cycles to ns."""
