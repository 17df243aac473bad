"""Python mirror of the Triton device-buffer layouts: ``csrc/argus/argus_region_trace.h``,
``argus_probe_record.h`` and ``argus_iteration_wait.h``.

The C headers are the definition; ``tests/test_triton_layouts.py`` compiles them, prints every size,
offset and constant, and checks this module against them. The TTGIR transforms that write these
buffers and the decoders that read them take every word position from here (every field is one
int64 word: Triton stores ``i64`` scalars).
"""
from __future__ import annotations

import numpy as np

# ---- region trace (argus_region_trace.h): per CTA, a header then the static slots ---------------------
REGION_TRACE_KIND_BEGIN = 1
REGION_TRACE_KIND_END = 2
REGION_TRACE_KINDS = {"begin": REGION_TRACE_KIND_BEGIN, "end": REGION_TRACE_KIND_END}
REGION_TRACE_KIND_SHIFT = 32  # tag = kind << 32 | region_id

REGION_TRACE_HEADER_DTYPE = np.dtype([("sm_plus_one", "<i8")])  # %smid + 1; 0: the CTA recorded nothing
REGION_TRACE_SLOT_DTYPE = np.dtype([("tag", "<i8"), ("ns", "<i8")])  # tag 0: slot not reached
REGION_TRACE_HEADER_WORDS = REGION_TRACE_HEADER_DTYPE.itemsize // 8
REGION_TRACE_SLOT_WORDS = REGION_TRACE_SLOT_DTYPE.itemsize // 8

# ---- forced-wait probe (argus_probe_record.h): one record per CTA --------------------------------------
PROBE_RECORD_DTYPE = np.dtype([("issue_ns", "<i8"), ("complete_ns", "<i8"), ("issue_cycles", "<i8"),
                               ("complete_cycles", "<i8"), ("sm", "<i8")])
PROBE_RECORD_WORDS = PROBE_RECORD_DTYPE.itemsize // 8

# ---- traced reference (argus_iteration_wait.h): per CTA, one record per loop trip ---------------------
ITERATION_WAIT_DTYPE = np.dtype([("begin_ns", "<i8"), ("end_ns", "<i8")])  # begin 0: not written
ITERATION_WAIT_WORDS = ITERATION_WAIT_DTYPE.itemsize // 8


def word(dtype: np.dtype, field: str) -> int:
    """Index of ``field``'s int64 word within one ``dtype`` record."""
    return dtype.fields[field][1] // 8


def records(buffer, dtype: np.dtype, rows: int, per_row: int = 1) -> np.ndarray:
    """``buffer`` (int64 words, any array-like) as ``rows`` x ``per_row`` structured ``dtype`` records;
    ValueError unless it holds exactly that many words."""
    words = np.ascontiguousarray(np.asarray(buffer, dtype=np.int64).ravel())
    want = rows * per_row * (dtype.itemsize // 8)
    if words.size != want:
        raise ValueError(f"buffer has {words.size} int64 words; {rows} x {per_row} records of "
                         f"{dtype.itemsize // 8} words ({want}) expected")
    return words.view(dtype).reshape(rows, per_row)
