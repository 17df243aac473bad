"""The shared-cursor markers (csrc/argus/argus_shared_cursor.cuh; the default since issue 20, before it the opt-in
-DARGUS_LEAN_MARKERS=1 build; ~70 ns per marker on H200): they build in every mode for every marker-path kernel, the
old define changes nothing, and their steady-state marker (whole warp, ready cursor) is straight-line SASS with none of
the serialising instructions docs/marker_cost_anatomy.md found on a58e52b's shared path (removed).

The opt-in straight-line fast path (-DARGUS_SHARED_STRAIGHT=1 or =2, not GPU-run) is checked at the end: no vote and no
branch between the cursor load and the record store, the stamp issued after a use of the load.

GPU: tests/test_marker_paths_gpu.py runs the shared_* (and straight*) rows of benchmarks/marker_cost.py's PATHS (decoded
occurrences) and benchmarks/marker_cost.py times them.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_marker_paths import KERNELS  # the reference-execution kernels; their builds in every mode are tested there
from toolchain import needs_nvcc, parse_sass

LEAN = {"ARGUS_LEAN_MARKERS": "1"}  # the old opt-in define: accepted, changes nothing
# Serialising or long-latency instructions a58e52b's and the fast shared paths ran per marker (the anatomy):
# none may sit on the steady-state path.
# S2UR (the CTA index, uniform datapath) may sit beside the load, but no special-register read may wait on it (the
# fast helper's CTA-index S2Rs are predicated on its cursor test).
FORBIDDEN = ("MATCH", "BAR", "MEMBAR", "BSSY", "BSYNC", "WARPSYNC", "ATOMS", "ATOMG", "RED", "REDG", "CALL", "LDG",
             "S2R", "FENCE")
# Instructions from the cursor load through the stores, today (nvcc 13.0): 23 in the kernel body;
# 31-38 in the __noinline__ helper, of which 7 are R2UR (the callee keeps the memory descriptor in ordinary registers
# across its slow-path call and moves it to uniform ones per store) and up to 8 uniform-datapath ops (the CTA index,
# beside the load). Per marker a58e52b's shared path ran 36-74, the register cursor runs 7-13
# (docs/marker_cost_anatomy.md).
MAX_INSTRUCTIONS = {"refexec_compute": 25, "refexec_compute_helper": 38, "refexec_compute_divergent": 25}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def _lines(mode: int, kernel: str | None, defines: dict | None = None, source: Path | None = None) -> list[str]:
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    src = source or SOURCES["reference_execution"]
    name = f"{src.stem}.shared.m{mode}." + (".".join(f"{k}{v}" for k, v in sorted((defines or {}).items())) or "none")
    return sass_lines(disassemble(build(CudaBuildSpec(name, [src], argus_mode=mode, defines=defines or {})).cubin, kernel))


def steady_paths(lines: list[str]) -> list[list[tuple[int, str, str, str]]]:
    """Each shared-cursor marker's steady-state path, as a converged warp at a ready cursor runs it: from the cursor load (two
    LDS.128) through its stamp read and stores. BRA.DIV
    (taken only by a divergent warp) falls through; the first branch on the readiness vote (VOTE.ALL's predicate)
    before the record store is taken (it branches to the stamp and stores); any other branch ends the path
    (it skips the slow-path call, or leaves the marker)."""
    ins = parse_sass(lines)
    at = {a: i for i, (a, *_) in enumerate(ins)}
    paths = []
    for i in range(len(ins) - 1):
        ahead = [op for _, _, op, _ in ins[i + 1: i + 20]]
        # the first of the cursor-load pair, followed by the readiness vote (the slow path's loads have none)
        if not (ins[i][2] == "LDS.128" and "LDS.128" in ahead[:4] and "VOTE.ALL" in ahead
                and (i == 0 or "LDS.128" not in [op for _, _, op, _ in ins[max(0, i - 4): i]])):
            continue
        path, j, vote, recorded = [], i, None, False
        while j < len(ins) and len(path) < 80:
            _, guard, op, ops = ins[j]
            if op == "BRA.DIV":
                j += 1
                continue
            path.append(ins[j])
            if op == "VOTE.ALL":
                vote = ops.split(",")[0].strip()
            elif op == "STG.E.128":
                recorded = True
            elif op == "BRA":
                if vote and not recorded and guard.lstrip("@!") == vote:
                    j, vote = at[int(ops.split()[-1], 16)], None  # the readiness branch, taken
                    continue
                break
            elif op == "STG.E" and "+0x18]" in ops:  # the dropped count: the last of the marker's stores
                nxt = ins[j + 1] if j + 1 < len(ins) else None
                if nxt and nxt[2] == "BRA" and nxt[1]:
                    path.append(nxt)  # the branch over the slow-path call
                break
            j += 1
        paths.append(path)
    return paths


def _text(path) -> str:
    return "\n".join(f"/*{a:04x}*/ {g} {op} {ops}" for a, g, op, ops in path)


@needs_nvcc
def test_the_old_lean_define_changes_no_build_and_mode_0_is_marker_free(tmp_path):
    """-DARGUS_LEAN_MARKERS=1 (the old opt-in, kept in users' flags) gives the same SASS in modes 0-2, and mode 0
    the SASS of the source with its marker lines removed."""
    from tests.test_cuda_build import SOURCES, _strip_markers

    for mode in (0, 1, 2):
        assert _lines(mode, None, LEAN) == _lines(mode, None), mode
    plain = _strip_markers(SOURCES["reference_execution"], tmp_path)
    assert _lines(0, None) == _lines(0, None, source=plain)


@needs_nvcc
def test_the_removed_markers_define_is_refused_in_one_line():
    """-DARGUS_LEAN_MARKERS=0 asked for a58e52b's markers, which are gone: the trace build stops with one line saying so."""
    from argus_rt.kinds.cuda.build import CudaBuildError

    with pytest.raises(CudaBuildError, match="ARGUS_LEAN_MARKERS=0: a58e52b's shared-cursor markers were removed"):
        _lines(2, None, {"ARGUS_LEAN_MARKERS": "0"})


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_steady_state_marker_is_straight_line(kernel):
    paths = steady_paths(_lines(2, kernel))
    assert len(paths) >= 2, f"{kernel}: {len(paths)} shared-cursor markers found"
    for p in paths:
        ops = [op for _, _, op, _ in p]
        text = _text(p)
        assert not [op for op in ops if op.split(".")[0] in FORBIDDEN], text
        assert not [op for _, g, op, _ in p if g and op.startswith(("S2R", "S2UR", "CS2R"))], text
        assert ops.count("LDS.128") == 2 and ops.count("VOTE.ALL") == 1, text
        timers = [ops_ for _, _, op, ops_ in p if op == "CS2R" and "SR_GLOBALTIMERLO" in ops_]
        assert len(timers) == 1, text
        records = [(g, ops_) for _, g, op, ops_ in p if op == "STG.E.128"]
        assert len(records) == 1 and records[0][0], text  # one record store, predicated (no branch around it)
        # the branch to the stamp and stores, and at most one more
        assert sum(op == "BRA" for op in ops) <= 2, text
        assert len(p) <= MAX_INSTRUCTIONS[kernel], f"{len(p)} instructions:\n{text}"


@needs_nvcc
def test_the_stamp_after_a_barrier_waits_for_the_cursor_load():
    """ws_pipeline (tests/fixtures): a consumer's BEGIN right after bar.sync. The stamp is read after the cursor load
    and a branch on it: a read before the load was dated before the barrier's release (H200, 2026-12-02: the lean
    build's consumers ~0.8 us before the producer's load)."""
    src = Path(__file__).parent / "fixtures" / "ws_pipeline" / "ws_pipeline.cu"
    lines = _lines(2, "ws_pipeline", source=src)
    bars = [i for i, ln in enumerate(lines) if "BAR.SYNC" in ln]
    assert bars
    for b in bars:
        timer = next(j for j in range(b, len(lines)) if "SR_GLOBALTIMER" in lines[j])
        between = "\n".join(lines[b:timer])
        assert between.count("LDS.128") == 2 and re.search(r"@!?P\d BRA ", between), "\n".join(lines[b: timer + 1])


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_slow_path_is_out_of_line_and_its_group_leaves_together(kernel):
    """The slow path (claim, lane groups, clock64) is one out-of-line function: a shared atomic takes the slots, and
    each of its returns follows a WARPSYNC (the group leaves together: the fast markers' H200 failure of bf5d6b0)."""
    lines = _lines(2, kernel)
    assert any("ATOMS.CAS" in ln for ln in lines) and any("ATOMS.ADD" in ln for ln in lines)
    assert not [ln for ln in lines if " RET." in ln and "@" in ln.split("RET")[0]]
    starts = [i for i, ln in enumerate(lines) if " BREV " in ln]  # __ffs(active): the slow path's lane election
    assert starts, "no out-of-line slow path"
    for s in starts:
        ret = next(i for i in range(s, len(lines)) if " RET." in lines[i])
        assert any("WARPSYNC" in ln for ln in lines[max(s, ret - 4): ret]), "\n".join(lines[max(s, ret - 6): ret + 1])


# The opt-in straight-line fast path (-DARGUS_SHARED_STRAIGHT=1; docs/marker_cost_anatomy.md, "Anatomy of the fa09bba
# shared markers"): no vote and no branch from the cursor load to the record store.
STRAIGHT = {"ARGUS_SHARED_STRAIGHT": "1"}
# Instructions from the cursor load through the dropped-count store, today (nvcc 13.0): 26 in the kernel body (the
# default runs 23 to the same store, 3 of them the vote, BRA.DIV and the taken branch), 35-36 in the __noinline__
# helper (the CTA index's uniform-datapath ops and 6 R2UR of the memory descriptors sit inside the window).
STRAIGHT_MAX = {"refexec_compute": 28, "refexec_compute_helper": 38, "refexec_compute_divergent": 28}


def straight_windows(lines: list[str]) -> list[list[tuple[int, str, str, str]]]:
    """Each straight-line marker's window: from the first LDS.128 of a cursor-load pair to the dropped-count store
    (STG.E to +0x18), in the functions before the out-of-line slow path (whose lane election starts with BREV)."""
    ins = parse_sass(lines)
    slow = next((i for i, (_, _, op, _) in enumerate(ins) if op == "BREV"), len(ins))
    out = []
    for i in range(slow):
        if ins[i][2] != "LDS.128" or (i and ins[i - 1][2] == "LDS.128"):
            continue
        if "LDS.128" not in [op for _, _, op, _ in ins[i + 1: i + 4]]:
            continue
        end = next((j for j in range(i, min(slow, i + 80)) if ins[j][2] == "STG.E" and "+0x18]" in ins[j][3]), None)
        assert end is not None, _text(ins[i: i + 40])
        out.append(ins[i: end + 1])
    return out


def _first_dest(ops: str) -> int:
    return int(re.match(r"R(\d+)", ops).group(1))


@needs_nvcc
def test_straight_define_leaves_the_trace_free_marker_only_and_anchored_builds_alone():
    """Modes 0 and 1 (so the trace-free build stays the marker-free SASS, test above) and the anchored trace build
    (its markers all take the slow path) are the same with and without -DARGUS_SHARED_STRAIGHT=1."""
    for mode in (0, 1):
        assert _lines(mode, None, STRAIGHT) == _lines(mode, None), mode
    anchored = {"ARGUS_TIMESTAMP": "ARGUS_TS_ANCHORED"}
    assert _lines(2, None, {**STRAIGHT, **anchored}) == _lines(2, None, anchored)


@needs_nvcc
@pytest.mark.parametrize("kernel,tail", [(k, "bssy") for k in KERNELS] + [("refexec_compute", "vote")])
def test_straight_marker_has_no_vote_or_branch_before_its_record_store(kernel, tail):
    """Every marker of the straight build: two LDS.128, then predicated stores with no BRA, BRA.DIV, VOTE.ALL, CALL or
    serialising instruction between; both counters read once, after an instruction that uses the first load (in-order
    issue: the stamp waits for the load, as the default's branch on it does); a branch to the slow path follows, inside
    BSSY/BSYNC (=1) or after BRA.DIV and VOTE.ALL (=2, the vote tail: no BSSY)."""
    lines = _lines(2, kernel, STRAIGHT if tail == "bssy" else {"ARGUS_SHARED_STRAIGHT": "2"})
    windows = straight_windows(lines)
    assert len(windows) >= 2, f"{kernel}: {len(windows)} markers"
    for w in windows:
        text = _text(w)
        ops = [op for _, _, op, _ in w]
        # BSSY (the convergence barrier set up for the slow-path call after the stores) issues without waiting
        stops = [op for op in ops if op.split(".")[0] in FORBIDDEN + ("BRA", "EXIT", "RET") and op != "BSSY"]
        assert not stops and "VOTE.ALL" not in ops and ops.count("BSSY") <= (tail == "bssy"), text
        assert ops.count("LDS.128") == 2, text
        records = [g for _, g, op, _ in w if op == "STG.E.128"]
        assert len(records) == 1 and records[0], text  # predicated, no branch around it
        lo = _first_dest(w[0][3])
        used = next(k for k, (_, _, op, o) in enumerate(w[2:], 2)
                    if re.search(r"\bR(%d|%d|%d|%d)\b" % (lo, lo + 1, lo + 2, lo + 3), o.split(",", 1)[-1]))
        for sr in ("SR_GLOBALTIMERLO", "SR_CLOCKLO"):
            at = [k for k, (_, _, op, o) in enumerate(w) if op == "CS2R" and sr in o]
            assert len(at) == 1 and at[0] > used, f"{sr} at {at}, first use of the load at {used}:\n{text}"
        assert len(w) <= STRAIGHT_MAX[kernel], f"{len(w)} instructions:\n{text}"
    # the slow path is still reached: each window is followed by a predicated branch over the slow-path call
    ins = parse_sass(lines)
    at = {a: i for i, (a, *_) in enumerate(ins)}
    for w in windows:
        k = at[w[-1][0]] + 1
        if tail == "vote":
            assert [op for _, _, op, _ in ins[k: k + 2]] == ["BRA.DIV", "VOTE.ALL"], _text(ins[k - 1: k + 3])
            k += 2
        _, guard, op, ops = ins[k]
        assert op == "BRA" and guard, _text(ins[k - 1: k + 2])
        skipped = []  # the fall-through block the branch skips: it makes the call
        for _, _, o, _ in ins[k + 1: at[int(ops.split()[-1], 16)]]:
            if o in ("BRA", "BSYNC"):
                break
            skipped.append(o)
        assert skipped.count("CALL.REL.NOINC") == 1, _text(ins[k: k + 12])


@needs_nvcc
def test_straight_stamp_after_a_barrier_waits_for_the_cursor_load():
    """ws_pipeline with the define: after each bar.sync, the first timer read follows an instruction that uses the
    cursor load (the H200 failure of a stamp read before the load: consumers dated before the producer's load)."""
    src = Path(__file__).parent / "fixtures" / "ws_pipeline" / "ws_pipeline.cu"
    ins = parse_sass(_lines(2, "ws_pipeline", STRAIGHT, source=src))
    bars = [i for i, (_, _, op, _) in enumerate(ins) if op.startswith("BAR.SYNC")]
    assert bars
    for b in bars:
        timer = next(j for j in range(b, len(ins)) if "SR_GLOBALTIMER" in ins[j][3])
        loads = [j for j in range(b, timer) if ins[j][2] == "LDS.128"]
        assert loads, _text(ins[b: timer + 1])
        lo = _first_dest(ins[loads[0]][3])
        regs = r"\bR(%d|%d|%d|%d)\b" % (lo, lo + 1, lo + 2, lo + 3)
        assert any(re.search(regs, ins[j][3].split(",", 1)[-1]) for j in range(loads[0] + 1, timer)), \
            _text(ins[b: timer + 1])
