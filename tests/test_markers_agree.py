"""argus.cuh's marker-only footprint agrees with argus_rt/markers.py, in the header and in SASS."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from argus_rt import markers
from argus_rt.kinds.cuda.build import disassemble, sass_instructions
from argus_rt.regions import RegionTree
from toolchain import NVCC

ROOT = Path(__file__).resolve().parents[1]


def _header_constants(tmp_path) -> dict[str, int]:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler on PATH")
    src = tmp_path / "m.cpp"
    src.write_text(
        '#include <cstdio>\n#include "argus/argus.cuh"\nint main(){'
        'std::printf("%u %u %u\\n", ARGUS_MARKER_TAG, ARGUS_MARKER_BEGIN, ARGUS_MARKER_END);}\n'
    )
    subprocess.run([cxx, "-std=c++17", "-I", str(ROOT / "csrc"), "-o", str(tmp_path / "m"), str(src)], check=True)
    tag, begin, end = map(int, subprocess.run([str(tmp_path / "m")], capture_output=True, text=True, check=True).stdout.split())
    return {"tag": tag, "begin": begin, "end": end}


def test_header_constants_equal_python(tmp_path):
    c = _header_constants(tmp_path)
    assert (c["tag"], c["begin"], c["end"]) == (markers.MARKER_TAG, markers.MARKER_BEGIN, markers.MARKER_END)


def test_marker_only_sass_carries_python_immediates(tmp_path):
    nvcc = NVCC and str(NVCC)
    if nvcc is None:
        pytest.skip("no nvcc where argus_rt.tools looks")
    tree = RegionTree.load(ROOT / "examples" / "cuda" / "regions.json")
    cubin = tmp_path / "m1.cubin"
    subprocess.run([nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-DARGUS_MODE=1", "-I", str(ROOT / "csrc"),
                    "-o", str(cubin), str(ROOT / "examples" / "cuda" / "nested_regions.cu")], check=True)
    pm = [int(ops, 16) for op, ops in sass_instructions(disassemble(cubin)) if op == "PMTRIG"]
    assert len(pm) % markers.MARKER_WORDS == 0
    decoded = [markers.decode_marker(pm[i : i + 3]) for i in range(0, len(pm), 3)]
    # The example's straight-line order: begin example, begin stage_a, end stage_a, the loop's
    # scopes (begin stage_b, begin inner, end inner, end stage_b), end example.
    ids = {r.name: r.id for r in tree}
    want = [("begin", "example"), ("begin", "example/stage_a"), ("end", "example/stage_a")]
    got = [(m.kind, tree[m.region_id].name) for m in decoded]
    assert got[:3] == want
    assert got[-1] == ("end", "example")
    for name in ("example/stage_b", "example/stage_b/inner"):
        assert ("begin", name) in got and ("end", name) in got
    for m in decoded:
        assert markers.marker_immediates(m.kind, m.region_id) == tuple(
            pm[3 * decoded.index(m) : 3 * decoded.index(m) + 3]
        )
    assert set(m.region_id for m in decoded) == set(ids.values())
