"""The register-cursor marker (ARGUS_WARP_STATE) on the CPU: its SASS is straight-line, with a __syncwarp before the
stamp and the lanes' fold beside it.

GPU correctness (exact records, window, wrap, append, clock64, anchored) is in
tests/test_trace_regcursor_gpu.py; benchmarks/trace_overhead.py also decodes every traced run.
"""
from __future__ import annotations

from toolchain import needs_nvcc


def _sass(name: str, defines: dict) -> list[str]:
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    res = build(CudaBuildSpec(name, [SOURCES["reference_execution"]], argus_mode=2, defines=defines))
    return sass_lines(disassemble(res.cubin, "refexec_compute"))


def _marker_windows(lines: list[str]) -> list[list[str]]:
    """Each per-marker span of SASS inside the occurrence loop: from the marker's activemask (the VOTE.ANY before
    its timer read) to the next 16-byte store."""
    out = []
    for i, ln in enumerate(lines):
        if "SR_GLOBALTIMER" in ln:
            start = next(j for j in range(i, max(-1, i - 16), -1) if "VOTE.ANY R" in lines[j])
            end = next(j for j in range(i, len(lines)) if "STG.E.128" in lines[j])
            out.append(lines[start : end + 1])
    return out


@needs_nvcc
def test_register_cursor_marker_is_straight_line_with_an_unpredicated_store_and_no_memory_reads():
    windows = _marker_windows(_sass("refexec.regcursor", {"REFEXEC_WARP_STATE": "1"}))
    assert len(windows) >= 2, "expected a BEGIN and an END marker in the occurrence loop"
    for w in windows:
        assert not any(op in ln for ln in w for op in ("BRA", "LDS", "LDG", "BSSY")), w
        # Every lane stores the same bytes to the same slot: no predicate to keep live across loops.
        assert "@" not in w[-1].split("STG.E.128")[0], w[-1]
        # The __syncwarp before the stamp (a NOP in converged code, or a WARPSYNC): a timer read right after bar.sync
        # is otherwise taken before the barrier releases the warp (H200, 2026-12-02, scripts/timer_after_barrier.py).
        timer = next(k for k, ln in enumerate(w) if "SR_GLOBALTIMER" in ln)
        assert any(op in ln for ln in w[:timer] for op in (" NOP ", " WARPSYNC")), "\n".join(w)


@needs_nvcc
def test_register_cursor_folds_each_marker_s_lanes_without_a_branch():
    """The divergence check's per-marker part: every marker's activemask (VOTE.ANY) is ANDed into the cursor's lanes
    register by a LOP3 before the register is written again (no branch on it: the marker windows hold no BRA)."""
    import re

    lines = _sass("refexec.regcursor", {"REFEXEC_WARP_STATE": "1"})
    ops = [re.search(r"\*/\s+(?:@!?P\d\s+)?([A-Z][\w.]*)\s+(R\d+)?([^;]*);", ln) for ln in lines]
    starts = {w[0] for w in _marker_windows(lines)}  # each marker's VOTE.ANY (the scope exit's vote is not one)
    regs = [(i, m.group(2)) for i, m in enumerate(ops) if m and lines[i] in starts]
    assert len(regs) >= 2, "expected one activemask per marker"
    for i, reg in regs:
        folded = False
        for m in ops[i + 1 :]:
            if not m:
                continue
            if m.group(1) == "LOP3.LUT" and re.search(rf"\b{reg}\b", m.group(3) or ""):
                folded = True
                break
            if m.group(2) == reg:
                break  # overwritten first
        assert folded, f"{reg} of {lines[i]} is not folded by a LOP3"


def _outer_loop_non_ffma(lines: list[str]) -> int:
    """Non-FFMA instructions in the occurrence loop of refexec_compute (its longest backward branch)."""
    import re

    rows = []
    for ln in lines:
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", ln)
        if m:
            rows.append((int(m.group(1), 16), m.group(2)))
    edges = []
    for addr, ins in rows:
        m = re.search(r"BRA (?:P\d, )?0x([0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < addr:
            edges.append((int(m.group(1), 16), addr))
    lo, hi = max(edges, key=lambda e: e[1] - e[0])
    return sum(1 for addr, ins in rows if lo <= addr <= hi and not ins.startswith("FFMA"))


@needs_nvcc
def test_register_cursor_markers_add_few_instructions_per_occurrence():
    # Measured on H200 (benchmarks/marker_cost.py) a marker costs about 1.5-2 ns per SASS instruction on the
    # warp's path; the two markers of one occurrence added 18 instructions at 80b45b6 (cap 24). The stamp after a
    # barrier and the divergence check add 5 (nvcc 13.0): per marker a VOTE.ANY (its lanes) and the __syncwarp's NOP
    # before the timer read (H200, 2026-12-02: a read right after bar.sync was dated before the release in 2000 of
    # 2000 trials, 0 of 2000 with __syncwarp first), and one LOP3 folding both markers' lanes: 23 today, cap 24 + 5.
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble
    from tests.test_cuda_build import SOURCES

    plain = build(CudaBuildSpec("refexec.loop.m0", [SOURCES["reference_execution"]], argus_mode=0))
    base = _outer_loop_non_ffma(disassemble(plain.cubin, "refexec_compute").splitlines())
    traced = _outer_loop_non_ffma(_sass("refexec.loop.reg", {"REFEXEC_WARP_STATE": "1"}))
    assert traced - base <= 29, f"{traced - base} instructions added per occurrence (2 markers)"
