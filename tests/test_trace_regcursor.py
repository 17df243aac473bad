"""The register-cursor marker (ARGUS_WARP_STATE) on the CPU: its SASS is straight-line.

GPU correctness (exact records, window, wrap, append, clock64, anchored) is in
tests/test_trace_regcursor_gpu.py; benchmarks/trace_overhead.py also decodes every traced run.
"""
from __future__ import annotations

import shutil

import pytest

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _sass(name: str, defines: dict) -> list[str]:
    from argus_rt.compiler.cuda import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    res = build(CudaBuildSpec(name, [SOURCES["reference_execution"]], argus_mode=2, defines=defines))
    return sass_lines(disassemble(res.cubin, "refexec_compute"))


def _marker_windows(lines: list[str]) -> list[list[str]]:
    """Each per-marker span of SASS inside the occurrence loop: from a timer read to the next 16-byte store."""
    out = []
    for i, ln in enumerate(lines):
        if "SR_GLOBALTIMER" in ln:
            end = next(j for j in range(i, len(lines)) if "STG.E.128" in lines[j])
            out.append(lines[i : end + 1])
    return out


@needs_nvcc
def test_register_cursor_marker_is_straight_line_with_a_predicated_store_and_no_memory_reads():
    windows = _marker_windows(_sass("refexec.regcursor", {"REFEXEC_WARP_STATE": "1"}))
    assert len(windows) >= 2, "expected a BEGIN and an END marker in the occurrence loop"
    for w in windows:
        assert not any(op in ln for ln in w for op in ("BRA", "LDS", "LDG", "BSSY", "VOTE")), w
        assert "@P" in w[-1].split("STG.E.128")[0], w[-1]

