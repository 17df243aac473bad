"""CUDA builds: specs, cache, errors, and SASS proof of the three Argus modes (nvcc, sm_90a, no GPU)."""
from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from argus_rt import tools
from argus_rt.kinds.cuda.build import (
    CompileError,
    CompilerNotFoundError,
    CudaBuildError,
    CudaBuildSpec,
    UnsupportedArchError,
    build,
    disassemble,
    sass_instructions,
    sass_lines,
)
from argus_rt.markers import decode_marker

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "cuda"
SOURCES = {"nested_regions": EXAMPLES / "nested_regions.cu", "reference_execution": EXAMPLES / "reference_execution.cu"}
MEMORY_OPS = re.compile(r"^(LD|ST|ATOM|RED|LDG|STG|LDS|STS|LDL|STL|CCTL|MEMBAR|ERRBAR)")

needs_nvcc = pytest.mark.skipif(tools.tool_or_none("nvcc") is None, reason="no nvcc where argus_rt.tools looks")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def _strip_markers(src: Path, dst_dir: Path) -> Path:
    """The same source with every line holding an Argus marker removed: 'a build without markers'."""
    dst = dst_dir / src.name
    lines = [l for l in src.read_text().splitlines() if not re.search(r"\bARGUS_(BEGIN|END|SCOPE|WARP_STATE)", l)]
    dst.write_text("\n".join(lines) + "\n")
    for header in src.parent.glob("*.h"):
        shutil.copy(header, dst_dir / header.name)
    return dst


# ---- specs and errors ----------------------------------------------------------------------
def test_spec_validation(tmp_path):
    src = SOURCES["nested_regions"]
    with pytest.raises(CudaBuildError, match=r"argus_mode 3 invalid; valid: 0 \(off\), 1 \(marker-only\), 2 \(trace\)"):
        CudaBuildSpec("x", [src], argus_mode=3)
    with pytest.raises(UnsupportedArchError, match="sm_XY"):
        CudaBuildSpec("x", [src], arch="hopper")
    with pytest.raises(CudaBuildError, match="does not exist"):
        CudaBuildSpec("x", [tmp_path / "missing.cu"])
    with pytest.raises(CudaBuildError, match="argus_mode="):
        CudaBuildSpec("x", [src], defines={"ARGUS_MODE": "2"})
    with pytest.raises(CudaBuildError, match="one translation unit"):
        CudaBuildSpec("x", [src, src])
    with pytest.raises(CudaBuildError, match="unknown backend 'clang'"):
        build(CudaBuildSpec("x", [src]), backend="clang")


def test_missing_nvcc_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("ARGUS_NVCC", str(tmp_path / "no-nvcc"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tools, "CUDA_BIN", tmp_path / "nope")
    with pytest.raises(CompilerNotFoundError, match="nvcc not found"):
        build(CudaBuildSpec("x", [SOURCES["nested_regions"]]))


def test_missing_nvrtc_is_a_clear_error(monkeypatch):
    import sys

    # Hide cuda-python whether or not it is installed: the NVRTC backend must say what is missing.
    # `from cuda.bindings import nvrtc` also finds an already-imported submodule as a package attribute.
    for name in ("cuda.bindings.nvrtc", "cuda.nvrtc"):
        monkeypatch.setitem(sys.modules, name, None)
    for pkg in ("cuda.bindings", "cuda"):
        if sys.modules.get(pkg) is not None:
            monkeypatch.delattr(sys.modules[pkg], "nvrtc", raising=False)
    with pytest.raises(CompilerNotFoundError, match="cuda-python"):
        build(CudaBuildSpec("x", [SOURCES["nested_regions"]]), backend="nvrtc")


@needs_nvcc
def test_unsupported_arch():
    with pytest.raises(UnsupportedArchError, match="cannot build 'sm_20'; valid: .*sm_90"):
        build(CudaBuildSpec("x", [SOURCES["nested_regions"]], arch="sm_20"))


@needs_nvcc
def test_compile_error_carries_the_log(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text('#include "argus/argus.cuh"\n__global__ void k() { ARGUS_BEGIN(1u) }\n')
    with pytest.raises(CompileError, match=r"(?s)nvcc failed for module 'bad'.*error: expected"):
        build(CudaBuildSpec("bad", [bad]))


# ---- cache -----------------------------------------------------------------------------------
@needs_nvcc
def test_cache_hits_and_invalidates_on_header_change(tmp_path):
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    src = src_dir / "k.cu"
    src.write_text('#include "params.h"\nextern "C" __global__ void k(float* x) { x[threadIdx.x] *= SCALE; }\n')
    (src_dir / "params.h").write_text("#define SCALE 2.0f\n")
    spec = CudaBuildSpec("k", [src])
    first = build(spec)
    again = build(spec)
    assert not first.cached and again.cached and again.cubin == first.cubin
    (src_dir / "params.h").write_text("#define SCALE 3.0f\n")
    changed = build(spec)
    assert not changed.cached and changed.key != first.key
    assert build(CudaBuildSpec("k", [src], defines={"X": "1"})).key != changed.key
    assert (changed.cubin.parent / "spec.json").is_file()


# ---- the three modes, in SASS --------------------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("name", list(SOURCES))
def test_mode0_sass_equals_a_build_without_markers(name, tmp_path):
    src = SOURCES[name]
    off = build(CudaBuildSpec(f"{name}.off", [src], argus_mode=0))
    plain_src = _strip_markers(src, tmp_path)
    plain = build(CudaBuildSpec(f"{name}.plain", [plain_src], argus_mode=0))
    a, b = sass_lines(disassemble(off.cubin)), sass_lines(disassemble(plain.cubin))
    assert a and a == b


@needs_nvcc
@pytest.mark.parametrize("name", list(SOURCES))
def test_mode1_has_pmtrig_markers_and_no_extra_memory_instructions(name):
    src = SOURCES[name]
    off = sass_instructions(disassemble(build(CudaBuildSpec(f"{name}.off", [src], argus_mode=0)).cubin))
    marked = sass_instructions(disassemble(build(CudaBuildSpec(f"{name}.marked", [src], argus_mode=1)).cubin))
    imms = [int(ops, 16) for op, ops in marked if op == "PMTRIG"]
    assert imms and len(imms) % 3 == 0
    for i in range(0, len(imms), 3):
        decode_marker(imms[i : i + 3])  # every triple is a well-formed marker
    mem_off = Counter(op for op, _ in off if MEMORY_OPS.match(op))
    mem_marked = Counter(op for op, _ in marked if MEMORY_OPS.match(op))
    assert mem_off == mem_marked
    assert not any(op == "PMTRIG" for op, _ in off)


@needs_nvcc
def test_mode2_trace_build_has_control_block_and_record_stores():
    res = build(CudaBuildSpec("nested.trace", [SOURCES["nested_regions"]], argus_mode=2))
    assert b"argus_ctl" in res.cubin.read_bytes()
    ops = [op for op, _ in sass_instructions(disassemble(res.cubin, "nested_regions"))]
    assert "STG.E.128" in ops and "CS2R" in ops
    assert "PMTRIG" not in ops


@needs_nvcc
def test_register_cursor_variant_touches_shared_memory_only_at_declaration_and_exit():
    res = build(CudaBuildSpec("refexec.reg", [SOURCES["reference_execution"]], argus_mode=2,
                              defines={"REFEXEC_WARP_STATE": "1"}))
    ops = [op for op, _ in sass_instructions(disassemble(res.cubin, "refexec_compute"))]
    # The cursor lives in registers; only the arm's seq (needed for the header at scope exit) is parked in
    # shared memory: one store at the declaration, one load at exit, none per marker.
    assert ops.count("STS") == 1 and ops.count("LDS") == 1, [op for op in ops if op.startswith(("LDS", "STS"))]
    assert ops.count("STG.E.128") >= 4


@needs_nvcc
def test_constant_trip_count_build_unrolls_the_inner_loop():
    # benchmarks/trace_overhead.py times -DREFEXEC_INNER builds next to the run-time-count ones: there the
    # inner loop must be gone (unrolled), leaving the occurrence loop as the only backward branch.
    import re

    def backward_branches(defines):
        res = build(CudaBuildSpec("refexec.trips", [SOURCES["reference_execution"]], argus_mode=0, defines=defines))
        text = disassemble(res.cubin, "refexec_compute")
        found = 0
        for addr, target in re.findall(r"/\*([0-9a-f]{4,})\*/[^;]*BRA (?:P\d, )?0x([0-9a-f]+)", text):
            found += int(target, 16) < int(addr, 16)
        return found

    assert backward_branches({"REFEXEC_INNER": "8"}) == 1
    assert backward_branches({}) >= 2


def test_nvrtc_build_when_available():
    try:
        import cuda.bindings.nvrtc  # noqa: F401
    except ImportError:
        pytest.skip("cuda-python (NVRTC bindings) not installed")
    try:
        res = build(CudaBuildSpec("nested.nvrtc", [SOURCES["nested_regions"]], argus_mode=2), backend="nvrtc")
    except CompilerNotFoundError as exc:
        pytest.skip(f"NVRTC library not loadable here: {exc}")
    assert res.cubin.read_bytes()[:4] == b"\x7fELF"
