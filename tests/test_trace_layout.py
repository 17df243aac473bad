"""The Python mirror of the trace layout agrees with csrc/argus/argus_layout.h, byte for byte.

A host C++ compiler builds a tiny program that includes the header and prints every size, offset
and constant; the numbers must equal argus_rt.trace.layout's dtypes and constants.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from argus_rt.trace import layout

ROOT = Path(__file__).resolve().parents[1]
HEADER_DIR = ROOT / "csrc" / "argus"

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
    "ARGUS_KIND_SHIFT": layout.KIND_SHIFT,
    "ARGUS_TIME_MASK": layout.TIME_MASK,
    "ARGUS_COORD_NONE": layout.COORD_NONE,
    "ARGUS_CLOCK_GLOBALTIMER": layout.CLOCK_GLOBALTIMER,
    "ARGUS_CLOCK_CLOCK64": layout.CLOCK_CLOCK64,
    "ARGUS_RING_MAGIC": layout.RING_MAGIC,
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


def _probe_source() -> str:
    lines = ['#include <cstdio>', '#include "argus_layout.h"', "int main() {"]
    for struct, dtype in STRUCTS.items():
        lines.append(f'  std::printf("size {struct} %zu\\n", sizeof({struct}));')
        for field in dtype.names:
            lines.append(f'  std::printf("offset {struct}.{field} %zu\\n", ARGUS_OFFSETOF({struct}, {field}));')
            lines.append(f'  std::printf("fsize {struct}.{field} %zu\\n", sizeof((({struct}*)0)->{field}));')
    for name in CONSTANTS:
        lines.append(f'  std::printf("const {name} %llu\\n", (unsigned long long)({name}));')
    lines.append("  return 0;\n}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def cxx_layout(tmp_path_factory) -> dict[str, int]:
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler (g++, c++ or clang++) on PATH")
    tmp = tmp_path_factory.mktemp("layout")
    src = tmp / "probe.cpp"
    src.write_text(_probe_source())
    exe = tmp / "probe"
    subprocess.run([cxx, "-std=c++17", "-I", str(HEADER_DIR), "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {f"{kind} {name}": int(value) for kind, name, value in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("struct", list(STRUCTS))
def test_struct_sizes_and_offsets_agree(cxx_layout, struct):
    dtype = STRUCTS[struct]
    assert cxx_layout[f"size {struct}"] == dtype.itemsize
    for field in dtype.names:
        offset = dtype.fields[field][1]
        assert cxx_layout[f"offset {struct}.{field}"] == offset, field
        assert cxx_layout[f"fsize {struct}.{field}"] == dtype.fields[field][0].itemsize, field


def test_constants_agree(cxx_layout):
    for name, value in CONSTANTS.items():
        assert cxx_layout[f"const {name}"] == value, name


def test_probe_covers_every_field():
    # A field added to the C++ struct but not to the dtype would change the size: caught above.
    # Here: the dtypes have no padding-free gaps the C++ side could hide fields in.
    for dtype in STRUCTS.values():
        end = 0
        for name in dtype.names:
            sub, offset = dtype.fields[name][:2]
            assert offset == end, f"gap before {name}"
            end = offset + sub.itemsize
        assert end == dtype.itemsize
