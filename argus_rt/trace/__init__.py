"""Region traces: device rings written by ``csrc/argus/argus.cuh`` (ARGUS_MODE=2), decoded on the host.

API summary (all times in the trace's ``unit``: "ns" for globaltimer, "cycles" for clock64):

    from argus_rt.trace import TraceConfig, TraceSession, pair_intervals, region_stats, write_chrome_trace
    from argus_rt.launch import CubinModule

    mod = CubinModule.load(cubin_path)                       # a module built with -DARGUS_MODE=2
    cfg = TraceConfig(ctas=128, threads_per_cta=256, capacity=256,
                      clock="globaltimer",                   # or "clock64"; "anchored" for modules
                                                             #   built with -DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED
                      sms=None, cta_range=None,              # filters: SM list, [begin, end) CTAs
                      warp_mask=0xFFFFFFFF, coord_window=None)  # warps bitmask, [begin, end) coords
    sess = TraceSession(mod, cfg)          # allocates the rings once (torch uint8 tensor)
    sess.arm()                             # enqueue the control block: next launches record
    mod.launch("kernel", grid=128, block=256, args=[...])
    sess.disarm()                          # optional: later launches do not record
    trace = sess.decode(known_ids=tree_ids)  # Trace: .events (EVENT_DTYPE), .rings, .incomplete, .problems
    iv = pair_intervals(trace)             # Intervals: .rows (INTERVAL_DTYPE: region_id, coord, depth,
                                           #   parent, start, end, duration, sm, cta, warp)
    stats = region_stats(iv, names=tree)   # [RegionStats(count, total, mean, p50, p99, min, max,
                                           #   sm_mean_min, sm_mean_max, sm_spread, ...)]
    write_chrome_trace(iv, "trace.json", names=tree)   # Perfetto / chrome://tracing
    doc = chrome_trace(iv, names=tree)     # ... plus torch.profiler's kernels of the same launches, on one
    align_with_profiler(doc, [launch_span(iv)], parse_kineto_trace(kineto_json), kernel="nested")
                                           #   clock (argus_rt.trace.align: the offset and its uncertainty)

    pending = sess.snapshot()              # async device copy; pending.decode() later
    sess.save("run.npz"); load_raw("run.npz")          # raw rings + config, no pickle

Errors (argus_rt.trace.errors): TraceConfigError, TruncatedTraceError, CorruptTraceError,
UnknownRegionIdError, MismatchedMarkersError, DivergentMarkersError (a register-cursor ring whose markers ran on part
of the warp: refused, not mixed up), ClockConversionError (anchored traces whose anchors are
too close to convert cycles to ns; a rate fitted over less than 6.4 us is used but flagged "approximate").
Lost records (wrapped rings, warps without rings) set ``incomplete`` and are listed in ``problems``; they
never disappear silently.
Layout: csrc/argus/argus_layout.h, mirrored in argus_rt.trace.layout.
"""
from __future__ import annotations

from . import layout
from .align import ClockAlignmentError, ClockOffset, align_with_profiler, launch_span
from .chrome import chrome_trace, write_chrome_trace
from .config import TraceConfig
from .decode import EVENT_DTYPE, RING_DTYPE, Trace, decode
from .errors import (
    ClockConversionError,
    CorruptTraceError,
    DivergentMarkersError,
    MismatchedMarkersError,
    TraceConfigError,
    TraceError,
    TruncatedTraceError,
    UnknownRegionIdError,
)
from .intervals import INTERVAL_DTYPE, Intervals, pair_intervals
from .rawfile import load_raw, save_raw
from .session import PendingTrace, TraceSession
from .stats import RegionStats, region_stats

__all__ = [
    "layout", "chrome_trace", "write_chrome_trace", "TraceConfig", "EVENT_DTYPE", "RING_DTYPE", "Trace", "decode",
    "ClockConversionError", "CorruptTraceError", "DivergentMarkersError", "MismatchedMarkersError", "TraceConfigError",
    "TraceError", "TruncatedTraceError",
    "UnknownRegionIdError", "INTERVAL_DTYPE", "Intervals", "pair_intervals", "PendingTrace", "TraceSession",
    "load_raw", "save_raw", "RegionStats", "region_stats",
    "ClockAlignmentError", "ClockOffset", "align_with_profiler", "launch_span",
]
