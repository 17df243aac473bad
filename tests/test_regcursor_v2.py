"""The register cursor with helpers (ARGUS_STATE_PARAM / ARGUS_STATE_ARG, the by-value form) and its divergence
refusal, on the CPU: the trace-free and marker-only builds are SASS-identical with and without the register cursor,
every kernel of examples/cuda/reference_execution.cu builds with it, a helper taking the state from a caller without
one is refused at compile time, and the decoder refuses a ring whose header says a marker ran on part of the warp
(the divergent kernel's half-warps: refused at decode time, not at compile time).

GPU: tests/test_regcursor_v2_gpu.py runs the register_* paths of benchmarks/marker_cost.py.
"""
from __future__ import annotations

import pytest

from argus_rt.trace import TraceConfig, decode, layout, pair_intervals
from tests.ring_writer import RingWriter
from toolchain import needs_nvcc

KERNELS = ("refexec_compute", "refexec_compute_helper", "refexec_compute_helper_value", "refexec_compute_helper_inline",
           "refexec_compute_divergent")
REG = {"REFEXEC_WARP_STATE": "1"}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def _sass(mode: int, kernel: str, defines: dict) -> list[str]:
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    name = f"refexec.v2.m{mode}" + "".join(f".{k}{v}" for k, v in sorted(defines.items()))
    res = build(CudaBuildSpec(name, [SOURCES["reference_execution"]], argus_mode=mode, defines=defines))
    return sass_lines(disassemble(res.cubin, kernel))


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 1])
def test_state_macros_leave_the_trace_free_and_marker_only_builds_unchanged(mode):
    """ARGUS_WARP_STATE / ARGUS_STATE_PARAM / ARGUS_STATE_ARG expand to nothing in modes 0 and 1."""
    for kernel in KERNELS:
        plain = _sass(mode, kernel, {})
        assert _sass(mode, kernel, REG) == plain, kernel


@needs_nvcc
def test_every_kernel_builds_with_the_register_cursor():
    for kernel in KERNELS:
        lines = _sass(2, kernel, REG)
        assert sum("SR_GLOBALTIMER" in ln for ln in lines) >= 2, kernel


@needs_nvcc
def test_scope_exit_votes_and_writes_the_divergent_flag_into_the_header():
    """After the occurrence loop: the lanes' vote (VOTE.ANY to a predicate), the flag selected from it, and the
    appending header write's RED.OR of the flag into the warp word (a fresh header stores warp | flag)."""
    import re

    lines = _sass(2, "refexec_compute", REG)
    vote = next(i for i, ln in enumerate(lines) if re.search(r"VOTE\.ANY P\d, !?P\d", ln))
    exit_code = "\n".join(lines[vote:])
    assert re.search(r"SEL R\d+, RZ, 0x80000000", exit_code), exit_code
    assert "REDG.E.OR" in exit_code, exit_code
    assert not any("SR_GLOBALTIMER" in ln for ln in lines[vote:])  # no marker after it


@needs_nvcc
def test_inlined_helper_costs_what_the_body_costs():
    """A __forceinline__ helper taking ARGUS_STATE_PARAM compiles to the body kernel's SASS (same arithmetic)."""
    body = [ln.split("*/", 1)[-1] for ln in _sass(2, "refexec_compute", REG)]
    inline = [ln.split("*/", 1)[-1] for ln in _sass(2, "refexec_compute_helper_inline", REG)]
    assert inline == body


@needs_nvcc
def test_noinline_helper_by_value_keeps_the_cursor_out_of_local_memory():
    """By reference (ARGUS_STATE_PARAM) a __noinline__ helper's caller keeps its cursor in local memory (STL/LDL
    around every marker); by value in, count returned (ARGUS_STATE_VALUE_PARAM), nothing goes to local memory."""
    for kernel, local in (("refexec_compute_helper", True), ("refexec_compute_helper_value", False)):
        lines = _sass(2, kernel, REG)
        assert any(op in ln for ln in lines for op in ("LDL", "STL")) == local, kernel
        assert any("CALL.REL" in ln for ln in lines)


REFUSED = r"""
#include "argus/argus.cuh"
#define ARGUS_REGION_X 0x12345678u
__device__ __forceinline__ void helper(int i ARGUS_STATE_PARAM) { ARGUS_BEGIN_AT(ARGUS_REGION_X, i); ARGUS_END_AT(ARGUS_REGION_X, i); }
extern "C" __global__ void no_register_cursor(int n) { for (int i = 0; i < n; ++i) helper(i ARGUS_STATE_ARG); }
"""


@needs_nvcc
def test_helper_taking_the_state_refuses_a_caller_without_a_register_cursor(tmp_path):
    """A caller with no ARGUS_WARP_STATE() passes the shared cursor's placeholder: a compile error in mode 2, never a
    helper that mixes the shared and the register cursor; modes 0 and 1 build (the macros are empty)."""
    from argus_rt.kinds.cuda.build import CompileError, CudaBuildSpec, build

    src = tmp_path / "refused.cu"
    src.write_text(REFUSED)
    for mode in (0, 1):
        assert build(CudaBuildSpec(f"refused.m{mode}", [src], argus_mode=mode)).cubin.exists()
    with pytest.raises(CompileError, match="argus_warp_state_|RegState|NoRegCursor"):
        build(CudaBuildSpec("refused.m2", [src], argus_mode=2))


SCOPES = r"""
#include "argus/argus.cuh"
#define ARGUS_REGION_X 0x12345678u
__device__ __forceinline__ float by_ref(float a, int i ARGUS_STATE_PARAM) {
  ARGUS_SCOPE_AT(ARGUS_REGION_X, i);
  return a * 2.0f;
}
__device__ __noinline__ ARGUS_RETURNS_STATE(float) by_value(float a, int i ARGUS_STATE_VALUE_PARAM) {
  { ARGUS_SCOPE(ARGUS_REGION_X); a = by_ref(a, i ARGUS_STATE_ARG); }
  ARGUS_RETURN_STATE(a + 1.0f);
}
extern "C" __global__ void scopes(float* out, int n) {
  ARGUS_WARP_STATE();
  float a = out[threadIdx.x];
  for (int i = 0; i < n; ++i) a = ARGUS_TAKE_STATE(by_value(a, i ARGUS_STATE_ARG));
  out[threadIdx.x] = a;
}
"""


@needs_nvcc
def test_scopes_in_helpers_of_both_forms_build_in_every_mode(tmp_path):
    """ARGUS_SCOPE / ARGUS_SCOPE_AT in a helper taking the cursor by reference, called from one taking it by value."""
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines

    src = tmp_path / "scopes.cu"
    src.write_text(SCOPES)
    for mode in (0, 1, 2):
        res = build(CudaBuildSpec(f"scopes.m{mode}", [src], argus_mode=mode))
        timers = sum("SR_GLOBALTIMER" in ln for ln in sass_lines(disassemble(res.cubin, "scopes")))
        assert (timers >= 4) == (mode == 2), (mode, timers)


def _divergent_ring(flagged: bool) -> bytes:
    """One warp's ring as the register cursor leaves it after refexec_compute_divergent: the two half-warps kept their
    own counts, so their pairs went to the same slots and the last store of each slot won (here: the high half's
    BEGIN over the low half's, the low half's END over the high half's), and the lead lane wrote the header with the
    low half's count. With ``flagged`` the header carries the lanes' vote (ARGUS_RING_WARP_DIVERGENT)."""
    from benchmarks.marker_cost import REGION_OCCURRENCE, REGION_REFEXEC

    cfg = TraceConfig(ctas=2, threads_per_cta=64, capacity=16)
    w = RingWriter(cfg)
    w.emit(1, 1, 42, "begin", REGION_REFEXEC, 1000, coord=0)
    w.emit(1, 1, 42, "end", REGION_OCCURRENCE, 1300, coord=0)
    if flagged:
        w._header(cfg.ring_of(1, 1))["warp"] |= layout.RING_WARP_DIVERGENT
    return w.bytes(), cfg


def test_a_ring_flagged_divergent_is_refused_in_one_line_naming_the_warp():
    from argus_rt.trace.errors import DivergentMarkersError

    raw, cfg = _divergent_ring(flagged=True)
    with pytest.raises(DivergentMarkersError) as e:
        decode(raw, cfg)
    msg = str(e.value)
    assert "\n" not in msg and "SM 42, CTA 1, warp 1" in msg, msg
    assert "whole warp" in msg and "ARGUS_WARP_STATE" in msg, msg


def test_the_same_ring_without_the_flag_is_what_divergence_left_before_it():
    """Why the flag is needed: without it the overwritten ring is refused only by luck (here, an END of a region
    with no open one); other interleavings pair silently into wrong regions."""
    from argus_rt.trace.errors import CorruptTraceError, MismatchedMarkersError

    raw, cfg = _divergent_ring(flagged=False)
    t = decode(raw, cfg)
    with pytest.raises((CorruptTraceError, MismatchedMarkersError)):
        pair_intervals(t)


def test_the_divergent_flag_is_a_bit_no_warp_index_uses():
    assert layout.RING_WARP_DIVERGENT == 1 << 31 and layout.MAX_WARPS_PER_CTA <= 32
