"""The opt-in lean markers (-DARGUS_LEAN_MARKERS=1, csrc/argus/argus_lean_markers.cuh): they build in every mode for
every marker-path kernel, leave the trace-free and marker-only builds unchanged, and their steady-state marker (whole
warp, ready cursor) is straight-line SASS that holds the cursor in registers: no shared load in the kernel body's
occurrence loop, none at a helper's second marker, and none of the serialising instructions docs/marker_cost_anatomy.md
finds on the default shared path.

GPU: tests/test_marker_paths_gpu.py runs the lean_* rows of benchmarks/marker_cost.py's PATHS (decoded
occurrences) and benchmarks/marker_cost.py times them.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolchain import needs_nvcc

KERNELS = ("refexec_compute", "refexec_compute_helper", "refexec_compute_divergent")
LEAN = {"ARGUS_LEAN_MARKERS": "1"}
GUARDED = {**LEAN, "ARGUS_LEAN_GUARDED_STAMP": "1"}
# Serialising or long-latency instructions the default shared path runs per marker (the anatomy): none may sit on the
# lean steady-state path. LDS: the cursor is in registers there (the helper's first marker loads it: checked apart).
FORBIDDEN = ("MATCH", "BAR", "MEMBAR", "BSSY", "BSYNC", "WARPSYNC", "ATOMS", "ATOMG", "RED", "REDG", "CALL", "LDG",
             "LDS", "FENCE")
# Instructions from the activemask vote through the stores, today (nvcc 13.0): 34-41 in the kernel body (with the
# write-back of the cursor, 3-4 STS, and the CTA index's S2R/S2UR that ptxas recomputes for the loop's next BEGIN);
# 51-71 in the __noinline__ helper, where the first marker also computes the cursor's address from %tid and loads it,
# and every global store waits on an R2UR of the memory descriptor (the callee holds it in ordinary registers across
# its slow-path call). The default shared path runs 36-74 per marker, the register cursor 7-13
# (docs/marker_cost_anatomy.md).
MAX_INSTRUCTIONS = {"refexec_compute": 45, "refexec_compute_helper": 75}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def _lines(mode: int, kernel: str | None, defines: dict | None = None, source: Path | None = None) -> list[str]:
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    src = source or SOURCES["reference_execution"]
    name = f"{src.stem}.lean.m{mode}." + (".".join(f"{k}{v}" for k, v in sorted((defines or {}).items())) or "none")
    return sass_lines(disassemble(build(CudaBuildSpec(name, [src], argus_mode=mode, defines=defines or {})).cubin, kernel))


def _parse(lines: list[str]) -> list[tuple[int, str, str, str]]:
    """(address, guard predicate or '', opcode, operands) of each SASS line."""
    out = []
    for ln in lines:
        m = re.match(r"/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?(\S+)\s*(.*?)\s*;", ln)
        if m:
            out.append((int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4)))
    return out


def steady_paths(lines: list[str]) -> list[list[tuple[int, str, str, str]]]:
    """Each lean marker's steady-state path, as a converged warp at a ready cursor runs it: from its activemask vote
    (VOTE.ANY R, PT, PT) through its readiness vote (VOTE.ALL; BRA.DIV, taken only by a divergent warp, falls through),
    the branch on that vote (taken: it jumps to the stores), and the stores, up to the last store before the next
    branch, call, return or constant load (the code after the marker)."""
    ins = _parse(lines)
    at = {a: i for i, (a, *_) in enumerate(ins)}
    paths = []
    for i, (_, _, op, ops) in enumerate(ins):
        if not (op == "VOTE.ANY" and ops.endswith("PT, PT")):
            continue
        ahead = [o for _, _, o, _ in ins[i + 1: i + 40]]
        if "VOTE.ALL" not in ahead or (i and ins[i - 1][2] == "WARPSYNC.COLLECTIVE"):
            continue
        path, j, vote, taken = [], i, None, False
        while j < len(ins) and len(path) < 90:
            _, guard, op, ops = ins[j]
            if op == "BRA.DIV":
                j += 1
                continue
            path.append(ins[j])
            if op == "VOTE.ALL":
                vote = ops.split(",")[0].strip()
            elif op == "BRA":
                if vote and not taken and guard.lstrip("@!") == vote:
                    j, taken = at[int(ops.split()[-1], 16)], True  # the readiness branch, taken
                    continue
                path.pop()
                break
            elif op in ("CALL.REL.NOINC", "RET.REL.NODEC", "EXIT") or (taken and op == "LDC"):
                path.pop()
                break
            j += 1
        last = max((k for k, (_, _, o, _) in enumerate(path) if o.startswith(("STS", "STG"))), default=-1)
        paths.append(path[: last + 1])
    return paths


def _text(path) -> str:
    return "\n".join(f"/*{a:04x}*/ {g} {op} {ops}" for a, g, op, ops in path)


def _loop_body(lines: list[str]) -> list[str]:
    """The SASS lines of refexec_compute's occurrence loop: from the target of its back-edge (the last backward
    branch before EXIT) to that branch."""
    ins = _parse(lines)
    exit_at = next(k for k, (_, _, op, _) in enumerate(ins) if op == "EXIT")
    back = max(k for k, (a, _, op, ops) in enumerate(ins[:exit_at]) if op == "BRA" and int(ops.split()[-1], 16) < a)
    target = int(ins[back][3].split()[-1], 16)
    return [f"{op} {ops}" for a, _, op, ops in ins[: back + 1] if a >= target]


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_lean_markers_build_in_every_mode(kernel):
    for mode in (0, 1, 2):
        assert _lines(mode, kernel, LEAN)


@needs_nvcc
def test_trace_free_and_marker_only_builds_are_the_same_with_the_lean_define(tmp_path):
    """The define only changes the trace build: modes 0 and 1 give the same SASS with or without it, and mode 0
    the SASS of the source with its marker lines removed."""
    from tests.test_cuda_build import SOURCES, _strip_markers

    for mode in (0, 1):
        assert _lines(mode, None, LEAN) == _lines(mode, None), mode
    plain = _strip_markers(SOURCES["reference_execution"], tmp_path)
    assert _lines(0, None, LEAN) == _lines(0, None, source=plain)


@needs_nvcc
@pytest.mark.parametrize("defines", [LEAN, GUARDED], ids=["lean", "guarded"])
@pytest.mark.parametrize("kernel", KERNELS[:2])  # the divergent kernel's half-warps always take the slow path
def test_lean_steady_state_marker_is_straight_line(kernel, defines):
    paths = steady_paths(_lines(2, kernel, defines))
    assert len(paths) >= 2, f"{kernel}: {len(paths)} lean markers found"
    for k, p in enumerate(paths):
        ops = [op for _, _, op, _ in p]
        text = _text(p)
        # the helper's first marker loads the cursor (test_lean_helper_loads_the_cursor_once_per_call)
        allowed = ("LDS",) if kernel == "refexec_compute_helper" and k == 0 else ()
        assert not [op for op in ops if op.split(".")[0] in FORBIDDEN and op.split(".")[0] not in allowed], text
        assert ops.count("VOTE.ALL") == 1, text
        timers = [ops_ for _, _, op, ops_ in p if op == "CS2R" and "SR_GLOBALTIMERLO" in ops_]
        assert len(timers) == 1, text
        records = [(g, ops_) for _, g, op, ops_ in p if op == "STG.E.128"]
        assert len(records) == 1 and records[0][0], text  # one record store, predicated (no branch around it)
        assert sum(op == "BRA" for op in ops) == 1, text  # only the readiness branch (taken, to the stores)
        assert len(p) <= MAX_INSTRUCTIONS[kernel], f"{len(p)} instructions:\n{text}"


@needs_nvcc
@pytest.mark.parametrize("defines", [LEAN, GUARDED], ids=["lean", "guarded"])
def test_lean_cursor_stays_in_registers_across_the_occurrence_loop(defines):
    """The kernel body's occurrence loop (both markers and the FMA loop between) loads nothing from shared memory: the
    compiler keeps the cursor and the lane's count in registers from marker to marker and writes them back (STS)."""
    body = _loop_body(_lines(2, "refexec_compute", defines))
    assert not [ln for ln in body if ln.startswith("LDS")], "\n".join(body)
    assert sum(ln.startswith("VOTE.ALL") for ln in body) >= 2 and any(ln.startswith("STS") for ln in body)


@needs_nvcc
def test_lean_helper_loads_the_cursor_once_per_call():
    """In the __noinline__ helper the cursor is loaded at the first marker (BEGIN) only: END finds it in registers."""
    ins = _parse(_lines(2, "refexec_compute_helper", LEAN))
    votes = [k for k, (_, _, op, ops) in enumerate(ins) if op == "VOTE.ALL"
             and ins[k - 1][2] != "WARPSYNC.COLLECTIVE" and not (k > 1 and ins[k - 2][2] == "WARPSYNC.COLLECTIVE")]
    calls = [k for k, (_, _, op, _) in enumerate(ins) if op == "CALL.REL.NOINC"]
    helper = min(k for k, (a, _, op, _) in enumerate(ins) if any(a == int(ins[c][3].split()[-1], 16) for c in calls))
    first, second = [v for v in votes if v > helper][:2]
    assert any(op.startswith("LDS") for _, _, op, _ in ins[helper:first])
    assert not any(op.startswith("LDS") for _, _, op, _ in ins[first:second]), _text(ins[first:second])


@needs_nvcc
@pytest.mark.parametrize("defines", [LEAN, GUARDED], ids=["lean", "guarded"])
def test_where_the_lean_stamp_is_read_after_a_barrier(defines):
    """ws_pipeline (tests/fixtures): a consumer's BEGIN right after bar.sync (the barrier makes the compiler reload the
    cursor). The guarded build reads the stamp after the cursor load and the branch on the readiness vote, as the
    default markers do; the lean build reads it alongside the load, as the register cursor does (whether that dates a
    marker before the barrier's release: to be measured)."""
    src = Path(__file__).parent / "fixtures" / "ws_pipeline" / "ws_pipeline.cu"
    lines = _lines(2, "ws_pipeline", defines, source=src)
    bars = [i for i, ln in enumerate(lines) if "BAR.SYNC" in ln]
    assert bars
    for b in bars:
        timer = next(j for j in range(b, len(lines)) if "SR_GLOBALTIMER" in lines[j])
        between = "\n".join(lines[b:timer])
        after_branch = "LDS" in between and re.search(r"@!?P\d BRA ", between) is not None
        assert after_branch == (defines is GUARDED), "\n".join(lines[b: timer + 1])


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_lean_slow_path_is_out_of_line_and_its_group_leaves_together(kernel):
    """The slow path (claim, lane groups, clock64) is one out-of-line function: a shared atomic takes the slots, and
    each of its returns follows a WARPSYNC with nothing but the returned cursor's loads after it (the group leaves
    together: the removed fast markers' H200 failure of bf5d6b0)."""
    lines = _lines(2, kernel, LEAN)
    assert any("ATOMS.CAS" in ln for ln in lines) and any("ATOMS.ADD" in ln for ln in lines)
    assert not [ln for ln in lines if " RET." in ln and "@" in ln.split("RET")[0]]
    starts = [i for i, ln in enumerate(lines) if " BREV " in ln]  # __ffs(active): the slow path's lane election
    assert starts, "no out-of-line slow path"
    for s in starts:
        ret = next(i for i in range(s, len(lines)) if " RET." in lines[i])
        sync = max((i for i in range(max(s, ret - 10), ret) if "WARPSYNC" in lines[i]), default=None)
        tail = "\n".join(lines[max(s, ret - 12): ret + 1])
        assert sync is not None, tail
        # after it only the returned cursor is read: no lane stores or records before the group leaves
        assert not [ln for ln in lines[sync: ret] if re.search(r" (ST|RED|ATOM)", ln)], tail
