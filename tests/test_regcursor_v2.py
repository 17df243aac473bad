"""The register cursor with helpers and lane groups (ARGUS_STATE_PARAM / ARGUS_STATE_ARG, -DARGUS_REG_LANE_GROUPS=1)
on the CPU: the trace-free and marker-only builds are SASS-identical with and without them, every kernel of
examples/cuda/reference_execution.cu builds with the register cursor, the converged marker has no convergence
barrier, a helper taking the state from a caller without one is refused at compile time, and the decoder pairs
the record pairs a register-cursor ring holds after divergent lane groups.

GPU: tests/test_regcursor_v2_gpu.py runs the register_* paths of benchmarks/marker_cost.py.
"""
from __future__ import annotations

import pytest

from argus_rt.trace import TraceConfig, decode, layout, pair_intervals
from argus_rt.trace.decode import LANES_WHOLE_WARP
from tests.ring_writer import RingWriter
from toolchain import needs_nvcc

KERNELS = ("refexec_compute", "refexec_compute_helper", "refexec_compute_helper_value", "refexec_compute_helper_inline",
           "refexec_compute_divergent", "refexec_compute_mixed")
REG = {"REFEXEC_WARP_STATE": "1"}
REG_LANES = {**REG, "ARGUS_REG_LANE_GROUPS": "1"}


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
        assert _sass(mode, kernel, REG_LANES) == plain, kernel


@needs_nvcc
@pytest.mark.parametrize("defines", [REG, REG_LANES], ids=["register", "register_lanes"])
def test_every_kernel_builds_with_the_register_cursor(defines):
    for kernel in KERNELS:
        lines = _sass(2, kernel, defines)
        assert sum("SR_GLOBALTIMER" in ln for ln in lines) >= 2, kernel


def _converged_markers(lines: list[str]) -> list[list[str]]:
    """Each marker's fast path: from its timer read to the next 16-byte store."""
    out = []
    for i, ln in enumerate(lines):
        if "SR_GLOBALTIMER" in ln:
            end = next(j for j in range(i, len(lines)) if "STG.E.128" in lines[j])
            out.append(lines[i : end + 1])
    return out


@needs_nvcc
@pytest.mark.parametrize("kernel", ["refexec_compute", "refexec_compute_helper_inline"])
def test_lane_group_build_s_converged_marker_has_one_vote_and_no_convergence_barrier(kernel):
    """The converged path adds the convergence test (activemask, one VOTE.ALL, one uniform branch over the out-of-line
    slow path) and nothing that waits for memory or reconverges the warp; the slow path takes lane-group slots with a
    shared atomic and folds them with an exchange."""
    lines = _sass(2, kernel, REG_LANES)
    windows = _converged_markers(lines)
    assert len(windows) >= 2
    for w in windows:
        text = "\n".join(w)
        assert text.count("VOTE.ALL") == 1 and "CALL.REL" in text, text
        assert not any(op in text for op in ("BSSY", "BSYNC", "LDS", "LDL", "LDG", "ATOMS", "MEMBAR")), text
        assert "@" not in w[-1].split("STG.E.128")[0], w[-1]  # the record store is not predicated
    assert any("ATOMS.ADD" in ln for ln in lines) and any("ATOMS.EXCH" in ln for ln in lines)


@needs_nvcc
def test_inlined_helper_costs_what_the_body_costs():
    """A __forceinline__ helper taking ARGUS_STATE_PARAM compiles to the body kernel's SASS (same arithmetic)."""
    for defines in (REG, REG_LANES):
        body = [ln.split("*/", 1)[-1] for ln in _sass(2, "refexec_compute", defines)]
        inline = [ln.split("*/", 1)[-1] for ln in _sass(2, "refexec_compute_helper_inline", defines)]
        assert inline == body


@needs_nvcc
def test_noinline_helper_by_value_keeps_the_cursor_out_of_local_memory():
    """By reference (ARGUS_STATE_PARAM) a __noinline__ helper's caller keeps its cursor in local memory (STL/LDL
    around every marker); by value in, count returned (ARGUS_STATE_VALUE_PARAM), nothing goes to local memory."""
    for kernel, local in (("refexec_compute_helper", True), ("refexec_compute_helper_value", False)):
        lines = _sass(2, kernel, REG_LANES)
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
@pytest.mark.parametrize("defines", [{}, {"ARGUS_REG_LANE_GROUPS": "1"}], ids=["register", "register_lanes"])
def test_scopes_in_helpers_of_both_forms_build_in_every_mode(tmp_path, defines):
    """ARGUS_SCOPE / ARGUS_SCOPE_AT in a helper taking the cursor by reference, called from one taking it by value."""
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines

    src = tmp_path / "scopes.cu"
    src.write_text(SCOPES)
    for mode in (0, 1, 2):
        res = build(CudaBuildSpec(f"scopes.m{mode}.{len(defines)}", [src], argus_mode=mode, defines=defines))
        timers = sum("SR_GLOBALTIMER" in ln for ln in sass_lines(disassemble(res.cubin, "scopes")))
        assert (timers >= 4) == (mode == 2), (mode, timers)


def _group_pair(w: RingWriter, slot: int, kind: str, region: int, coord: int, lanes: int, time: int) -> None:
    """The two slots a lane group's register-cursor marker writes: its record (the common store) and the lane-group
    record (mask, lowest lane) after it, at slots count + extra and + 1."""
    cfg = w.config
    rec = w._records(cfg.ring_of(0, 0))
    code = {"begin": layout.KIND_BEGIN, "end": layout.KIND_END}[kind]
    lowest = (lanes & -lanes).bit_length() - 1
    rec[slot] = (region, coord, (time & layout.TIME_MASK) | (code << layout.KIND_SHIFT))
    rec[slot + 1] = (lanes, lowest, (time & layout.TIME_MASK) | (layout.KIND_LANES << layout.KIND_SHIFT))


def test_register_cursor_ring_with_divergent_lane_groups_pairs_per_group():
    """A warp's ring as the lane-group build writes it: a whole-warp BEGIN (slot 0: count 0 -> 1), then two half-warps
    interleaving their pairs at slots 1 + extra (their stamps not in time order across the halves), then the
    whole warp's END after the fold (count 1 + 8 extra = 9) and the header's written count at scope exit (10)."""
    from benchmarks.marker_cost import REGION_OCCURRENCE, REGION_REFEXEC

    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=16)
    w = RingWriter(cfg)
    outer = 0x0AAA_0001
    w.emit(0, 0, 7, "begin", outer, 1000)
    low, high = 0x0000FFFF, 0xFFFF0000
    steps = [("begin", REGION_OCCURRENCE, low, 1010), ("begin", REGION_REFEXEC, high, 1005),
             ("end", REGION_REFEXEC, high, 1300), ("end", REGION_OCCURRENCE, low, 1200)]
    for k, (kind, region, lanes, t) in enumerate(steps):
        _group_pair(w, 1 + 2 * k, kind, region, 3, lanes, t)
    h = w._header(cfg.ring_of(0, 0))
    h["written"] = 9
    w.emit(0, 0, 7, "end", outer, 1400)
    t = decode(w.bytes(), cfg)
    assert not t.incomplete, t.problems
    rows = pair_intervals(t).rows
    got = sorted(zip(rows["region_id"].tolist(), rows["lanes"].tolist(), rows["duration"].tolist(),
                     rows["depth"].tolist()))
    assert got == sorted([(outer, LANES_WHOLE_WARP, 400, 0), (REGION_OCCURRENCE, low, 190, 1),
                          (REGION_REFEXEC, high, 295, 1)])


def test_a_fast_marker_over_unfolded_lane_group_slots_is_reported_not_paired():
    """What the convergence test prevents: a whole-warp marker written at the count without folding the groups'
    slots overwrites a group's record, leaving its lane-group record after the wrong marker. The decoder does not
    pair that silently."""
    from argus_rt.trace.errors import CorruptTraceError, MismatchedMarkersError

    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=16)
    w = RingWriter(cfg)
    outer = 0x0AAA_0001
    w.emit(0, 0, 7, "begin", outer, 1000)
    _group_pair(w, 1, "begin", 0x0BBB_0002, 3, 0x0000FFFF, 1010)
    _group_pair(w, 3, "end", 0x0BBB_0002, 3, 0x0000FFFF, 1100)
    w.emit(0, 0, 7, "end", outer, 1400)  # the emit's slot is the header's written (1): over the group's BEGIN
    h = w._header(cfg.ring_of(0, 0))
    h["written"] = 5
    with pytest.raises((CorruptTraceError, MismatchedMarkersError)):
        pair_intervals(decode(w.bytes(), cfg))


def test_mixed_kernel_ring_decodes_to_the_gpu_check_s_occurrences():
    """benchmarks/marker_cost.py's check for register_mixed, on the ring the lane-group build writes for one warp of
    refexec_compute_mixed (16 occurrences): whole-warp BEGIN, the low half's two pairs, the whole warp's END after
    the fold, per occurrence."""
    from collections import Counter

    from benchmarks.marker_cost import REGION_OCCURRENCE, REGION_REFEXEC, expected_occurrences

    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=128)
    w = RingWriter(cfg)
    h = w._header(cfg.ring_of(0, 0))
    t = 1000
    for c in range(16):
        w.emit(0, 0, 2, "begin", REGION_REFEXEC, t, coord=c)
        n = int(h["written"][0])
        _group_pair(w, n, "begin", REGION_OCCURRENCE, c, 0x0000FFFF, t + 5)
        _group_pair(w, n + 2, "end", REGION_OCCURRENCE, c, 0x0000FFFF, t + 50)
        h["written"] = n + 4
        w.emit(0, 0, 2, "end", REGION_REFEXEC, t + 60, coord=c)
        t += 100
    trace = decode(w.bytes(), cfg)
    assert not trace.incomplete, trace.problems
    rows = pair_intervals(trace).rows
    got = Counter(zip(rows["region_id"].tolist(), rows["coord"].tolist(), rows["lanes"].tolist()))
    assert got == expected_occurrences("register_mixed", 16)
    assert set(rows[rows["lanes"] == 0x0000FFFF]["depth"].tolist()) == {1}
