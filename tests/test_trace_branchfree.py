"""The experimental straight-line register-cursor marker (-DARGUS_BRANCHFREE=1) on the CPU.

Its GPU correctness is checked by benchmarks/trace_overhead.py, which decodes every traced
variant's rings (exactly 128 records and 64 occurrences per warp) before timing it.
"""
from __future__ import annotations

import shutil

import pytest

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _build(name: str, defines: dict):
    from argus_rt.compiler.cuda import CudaBuildSpec, build
    from tests.test_cuda_build import SOURCES

    return build(CudaBuildSpec(name, [SOURCES["reference_execution"]], argus_mode=2, defines=defines))


def _marker_window(lines: list[str]) -> list[str]:
    """SASS from the per-marker timer read to the record store in the compute loop."""
    start = max(i for i, ln in enumerate(lines) if "SR_GLOBALTIMER" in ln)
    end = next(i for i in range(start, len(lines)) if "STG.E.128" in lines[i])
    return lines[start : end + 1]


@needs_nvcc
def test_default_register_cursor_build_ignores_the_experimental_macro_when_off():
    from argus_rt.compiler.cuda import disassemble

    plain = _build("refexec.bf.default", {"REFEXEC_WARP_STATE": "1"})
    explicit_off = _build("refexec.bf.off", {"REFEXEC_WARP_STATE": "1", "ARGUS_BRANCHFREE": "0"})
    assert disassemble(plain.cubin, "refexec_compute") == disassemble(explicit_off.cubin, "refexec_compute")


@needs_nvcc
def test_branch_free_marker_stores_are_predicated_with_no_divergent_branch_before_them():
    from argus_rt.compiler.cuda import disassemble, sass_lines

    default = sass_lines(disassemble(_build("refexec.bf.cmp", {"REFEXEC_WARP_STATE": "1"}).cubin, "refexec_compute"))
    bf = sass_lines(disassemble(_build("refexec.bf.on", {"REFEXEC_WARP_STATE": "1", "ARGUS_BRANCHFREE": "1"}).cubin,
                                "refexec_compute"))
    # Default: the leader-only store sits behind a divergent branch; branch-free: no branch, and
    # the 16-byte record store is predicated.
    assert any("BRA" in ln for ln in _marker_window(default))
    window = _marker_window(bf)
    assert not any("BRA" in ln for ln in window), window
    assert "@P" in window[-1].split("STG.E.128")[0], window[-1]
