"""Argus regions in Triton kernels: markers survive to TTGIR and SASS with their region IDs."""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from argus_rt import triton_regions as argus  # noqa: E402
from argus_rt.markers import decode_marker, marker_immediates  # noqa: E402
from argus_rt.regions import RegionError, RegionTree, region_id  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "triton"))
import tma_matmul as tm  # noqa: E402

EXPECTED_REGIONS = ["tma_matmul", "tma_matmul/epilogue", "tma_matmul/kloop", "tma_matmul/kloop/load",
                    "tma_matmul/kloop/mma"]


@pytest.fixture(scope="module")
def compiled():
    return tm.compile_reference()


def test_marker_asm_carries_the_marker_words():
    name = "tma_matmul/kloop"
    asm = argus.marker_asm("begin", name)
    m = argus.MARKER_ASM_PATTERN.search(asm)
    assert m and m.group("kind") == "begin" and m.group("name") == name
    words = tuple(int(m.group(k), 16) for k in ("w0", "w1", "w2"))
    assert words == marker_immediates("begin", region_id(name))
    assert decode_marker(list(words)).region_id == region_id(name)


def test_kernel_regions_from_source_match_the_shipped_manifest():
    tree = argus.kernel_regions(tm.tma_matmul_kernel, "tma_matmul")
    assert tree.names == EXPECTED_REGIONS
    shipped = RegionTree.load(ROOT / "examples" / "triton" / "regions.json")
    assert shipped.to_manifest() == tree.to_manifest()
    assert tree["tma_matmul/kloop/load"].parent == "tma_matmul/kloop"


def test_markers_survive_to_ttgir_with_ids(compiled):
    ttgir = compiled.asm["ttgir"]
    found = [(m.group("kind"), m.group("name")) for m in argus.MARKER_ASM_PATTERN.finditer(ttgir)]
    assert sorted(found) == sorted([(k, n) for n in EXPECTED_REGIONS for k in ("begin", "end")])
    # the loop's inner markers are inside the scf.for body (pipelining moved the loads, not the markers)
    body = ttgir[ttgir.index("scf.for"):]
    assert "argus:begin tma_matmul/kloop/load" in body


def test_markers_reach_sass_as_pmtrig(compiled):
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        pytest.skip(f"cuobjdump not shipped with this Triton ({tool})")
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        sass = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    imms = [int(x, 16) for x in re.findall(r"PMTRIG\s+(0x[0-9a-f]+)", sass)]
    assert len(imms) == 3 * 2 * len(EXPECTED_REGIONS)
    markers = [decode_marker(imms[i:i + 3]) for i in range(0, len(imms), 3)]
    assert {(mk.kind, mk.region_id) for mk in markers} == {
        (k, region_id(n)) for n in EXPECTED_REGIONS for k in ("begin", "end")}


@triton.jit
def _bad_nesting(x_ptr):
    argus.begin("outer")
    argus.begin("inner")  # not a child name of "outer"
    argus.end("inner")
    argus.end("outer")


@triton.jit
def _bad_order(x_ptr):
    argus.begin("outer")
    argus.begin("outer/a")
    argus.end("outer")
    argus.end("outer/a")


@triton.jit
def _never_closed(x_ptr):
    argus.begin("outer")


def test_kernel_regions_rejects_bad_nesting():
    with pytest.raises(RegionError, match=r"'inner' opens inside 'outer'; name it 'outer/inner'"):
        argus.kernel_regions(_bad_nesting)
    with pytest.raises(RegionError, match=r"end\('outer'\) does not match the open region \(outer/a\)"):
        argus.kernel_regions(_bad_order)
    with pytest.raises(RegionError, match=r"begun but never ended"):
        argus.kernel_regions(_never_closed)


@triton.jit
def _non_string_name(x_ptr):
    argus.begin(3)


def test_non_string_region_name_is_a_clear_compile_error():
    from triton.backends.compiler import GPUTarget

    src = triton.compiler.ASTSource(fn=_non_string_name, signature={"x_ptr": "*fp32"}, constexprs={})
    with pytest.raises(Exception, match=r"takes a region name as a string literal, got 3"):
        triton.compile(src, target=GPUTarget("cuda", 90, 32))


def test_public_path_is_the_kinds_module():
    """``argus_rt.triton_regions`` (the documented import path) re-exports the Triton kind's markers, object
    for object: one home, two names for it."""
    from argus_rt import triton_regions
    from argus_rt.kinds.triton import regions

    assert sorted(triton_regions.__all__) == ["MARKER_ASM_PATTERN", "begin", "end", "kernel_regions", "marker_asm"]
    for name in triton_regions.__all__:
        assert getattr(triton_regions, name) is getattr(regions, name), name
