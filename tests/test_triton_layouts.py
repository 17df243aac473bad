"""The Triton device-buffer layouts are defined once: each C header under csrc/argus/ agrees with its
Python mirror (argus_rt.kinds.triton.layout), and the decoders read the words where the header
puts them.

- Agreement: each available compiler (a host C++ compiler, nvcc) builds a tiny program that includes
  the header and prints every size, offset, signedness and constant (tests/c_layout.py).
- Decoders: buffers written here as literal int64 words, in the order the headers' comments give,
  decode to the values put in them (no mirror constant is used to build them).
"""
from __future__ import annotations

import numpy as np
import pytest

from argus_rt.kinds.triton import layout as L
from argus_rt.kinds.triton import probes
from argus_rt.kinds.triton.region_trace import MarkerSite, decode_region_buffer
from c_layout import check_no_gaps, check_structs, compiled_layout, compilers, require_compiler

HEADERS = {
    "argus_region_trace.h": (
        {"ArgusRegionTraceHeader": L.REGION_TRACE_HEADER_DTYPE, "ArgusRegionTraceSlot": L.REGION_TRACE_SLOT_DTYPE},
        {"ARGUS_REGION_TRACE_KIND_BEGIN": L.REGION_TRACE_KIND_BEGIN, "ARGUS_REGION_TRACE_KIND_END": L.REGION_TRACE_KIND_END,
         "ARGUS_REGION_TRACE_KIND_SHIFT": L.REGION_TRACE_KIND_SHIFT,
         "ARGUS_REGION_TRACE_HEADER_WORDS": L.REGION_TRACE_HEADER_WORDS,
         "ARGUS_REGION_TRACE_SLOT_WORDS": L.REGION_TRACE_SLOT_WORDS}),
    "argus_probe_record.h": (
        {"ArgusProbeRecord": L.PROBE_RECORD_DTYPE},
        {"ARGUS_PROBE_RECORD_WORDS": L.PROBE_RECORD_WORDS}),
    "argus_iteration_wait.h": (
        {"ArgusIterationWait": L.ITERATION_WAIT_DTYPE},
        {"ARGUS_ITERATION_WAIT_WORDS": L.ITERATION_WAIT_WORDS}),
}


@pytest.fixture(scope="module", params=compilers() or [None], ids=lambda c: c and c.rsplit("/", 1)[-1] or "none")
def compiled(request, tmp_path_factory) -> dict[str, dict[str, int]]:
    compiler = require_compiler(request.param)
    return {header: compiled_layout(tmp_path_factory.mktemp(header.replace(".", "_")), compiler, [header],
                                    structs, list(constants))
            for header, (structs, constants) in HEADERS.items()}


@pytest.mark.parametrize("header", list(HEADERS))
def test_header_and_mirror_agree(compiled, header):
    structs, constants = HEADERS[header]
    check_structs(compiled[header], structs)
    for name, value in constants.items():
        assert compiled[header][f"const {name}"] == value, name


@pytest.mark.parametrize("header", list(HEADERS))
def test_every_field_is_one_int64_word_and_the_mirror_has_no_gaps(header):
    structs, _ = HEADERS[header]
    check_no_gaps(structs)
    for struct, dtype in structs.items():
        assert all(dtype.fields[f][0] == np.dtype("<i8") for f in dtype.names), struct  # Triton stores i64 scalars


def test_region_trace_decoder_reads_header_then_tag_ns_slots():
    rid = 0x1234ABCD
    sites = [MarkerSite("begin", "r", rid, ttgir_line=10, loop_line=None, first_slot=0, slots=1),
             MarkerSite("end", "r", rid, ttgir_line=20, loop_line=None, first_slot=1, slots=1)]
    begin_tag, end_tag = (1 << 32) | rid, (2 << 32) | rid
    # per CTA: [sm + 1, tag, ns, tag, ns]
    words = [7 + 1, begin_tag, 1000, end_tag, 1600,
             3 + 1, begin_tag, 2000, end_tag, 2900]
    cols = decode_region_buffer(np.array(words, dtype=np.int64), 2, sites)
    assert cols["sm"] == [7, 3] and cols["start"] == [1000, 2000] and cols["end"] == [1600, 2900]
    assert cols["region_id"] == [rid, rid] and cols["cta"] == [0, 1]


def test_probe_decoders_read_issue_complete_ns_cycles_sm():
    # per CTA: [issue_ns, complete_ns, issue_cycles, complete_cycles, sm]
    words = np.array([100, 160, 5000, 5090, 4,
                      200, 230, 7000, 7050, 9], dtype=np.int64)
    lat = probes.probe_latencies(words, 2)
    assert lat["latency_ns_min"] == 30 and lat["latency_ns_max"] == 60 and lat["latency_cycles_median"] == 70.0
    cols = probes.op_events_document(words, 2, op_id=0x11, iteration=3)["columns"]
    assert cols["issue"] == [100, 200] and cols["complete"] == [160, 230]
    assert cols["issue_cycles"] == [5000, 7000] and cols["complete_cycles"] == [5090, 7050] and cols["sm"] == [4, 9]


def test_iteration_wait_decoders_read_begin_end_per_trip():
    # per CTA, per trip: [begin_ns, end_ns]; 2 CTAs x 3 trips
    words = np.array([10, 15, 20, 30, 40, 41,
                      11, 19, 21, 25, 42, 50], dtype=np.int64)
    assert probes.iteration_waits(words, 2, 3) == {0: 6.5, 1: 7.0, 2: 4.5}
    cols = probes.iteration_waits_document(words, 2, 3)["columns"]
    assert cols["begin"] == [10, 20, 40, 11, 21, 42] and cols["end"] == [15, 30, 41, 19, 25, 50]
    assert cols["cta"] == [0, 0, 0, 1, 1, 1] and cols["iteration"] == [0, 1, 2, 0, 1, 2]
    with pytest.raises(ValueError, match="int64 words"):
        probes.iteration_waits(words[:-1], 2, 3)
