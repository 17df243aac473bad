"""The Python mirror of the trace layout agrees with csrc/argus/argus_layout.h, byte for byte.

Each available compiler (a host C++ compiler, nvcc) builds a tiny program that includes the header and
prints every size, offset, signedness and constant (tests/c_layout.py); the numbers must equal
argus_rt.trace.layout's dtypes and constants.
"""
from __future__ import annotations

import pytest

from argus_rt.trace import layout
from c_layout import check_no_gaps, check_structs, compiled_layout, compilers, require_compiler

STRUCTS = {
    "ArgusRecord": layout.RECORD_DTYPE,
    "ArgusRingHeader": layout.RING_HEADER_DTYPE,
    "ArgusCtl": layout.CTL_DTYPE,
    "ArgusRingAnchors": layout.ANCHORS_DTYPE,
}
CONSTANTS = {
    "ARGUS_LAYOUT_VERSION": layout.LAYOUT_VERSION,
    "ARGUS_KIND_BEGIN": layout.KIND_BEGIN,
    "ARGUS_KIND_END": layout.KIND_END,
    "ARGUS_KIND_LANES": layout.KIND_LANES,
    "ARGUS_KIND_SHIFT": layout.KIND_SHIFT,
    "ARGUS_TIME_MASK": layout.TIME_MASK,
    "ARGUS_COORD_NONE": layout.COORD_NONE,
    "ARGUS_CLOCK_GLOBALTIMER": layout.CLOCK_GLOBALTIMER,
    "ARGUS_CLOCK_CLOCK64": layout.CLOCK_CLOCK64,
    "ARGUS_RING_MAGIC": layout.RING_MAGIC,
    "ARGUS_RING_WARP_DIVERGENT": layout.RING_WARP_DIVERGENT,
    "ARGUS_MAX_SMS": layout.MAX_SMS,
    "ARGUS_SM_MASK_WORDS": layout.SM_MASK_WORDS,
    "ARGUS_MAX_WARPS_PER_CTA": layout.MAX_WARPS_PER_CTA,
    "ARGUS_RING_WRITTEN_OFFSET": layout.RING_HEADER_DTYPE.fields["written"][1],
    "ARGUS_RING_DROPPED_OFFSET": layout.RING_HEADER_DTYPE.fields["dropped"][1],
    "ARGUS_RING_CLAIMS_OFFSET": layout.RING_HEADER_DTYPE.fields["claims"][1],
    "ARGUS_CLOCK_ANCHORED": layout.CLOCK_ANCHORED,
    "ARGUS_ANCHOR_PERIOD": layout.ANCHOR_PERIOD,
    "ARGUS_ANCHORED_HEADER_BYTES": layout.ANCHORED_HEADER_BYTES,
    "ARGUS_ANCHOR_FIRST_OFFSET": layout.ANCHOR_FIRST_OFFSET,
    "ARGUS_ANCHOR_LAST_OFFSET": layout.ANCHOR_FIRST_OFFSET + layout.ANCHORS_DTYPE.fields["last_timer"][1],
}


@pytest.fixture(scope="module", params=compilers() or [None], ids=lambda c: c and c.rsplit("/", 1)[-1] or "none")
def cxx_layout(request, tmp_path_factory) -> dict[str, int]:
    compiler = require_compiler(request.param)
    return compiled_layout(tmp_path_factory.mktemp("layout"), compiler, ["argus_layout.h"], STRUCTS, list(CONSTANTS))


@pytest.mark.parametrize("struct", list(STRUCTS))
def test_struct_sizes_and_offsets_agree(cxx_layout, struct):
    check_structs(cxx_layout, {struct: STRUCTS[struct]})


def test_constants_agree(cxx_layout):
    for name, value in CONSTANTS.items():
        assert cxx_layout[f"const {name}"] == value, name


def test_probe_covers_every_field():
    check_no_gaps(STRUCTS)
