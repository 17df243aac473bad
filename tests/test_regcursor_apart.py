"""The register cursor's opt-in apart build (-DARGUS_REG_APART=1, csrc/argus/argus_cursors.cuh), on the CPU.

In that build a register-cursor marker run by part of the warp is recorded per lane group instead of refused: a
record's slot is ``count + extra`` (``count``: the whole-warp records and the lane-group slots folded into it, in
registers, the same on every lane; ``extra``: the warp's shared word, two slots per lane-group marker since the last
fold). A marker run by all 32 lanes with no lane-group marker since the last one (one vote on the lanes' dirty bits)
stores at ``count`` with no shared load and no BSSY/BSYNC; every other marker branches into a block first: a whole-warp
marker after lane groups folds ``extra`` into the count, and a lane group's lowest lane takes two slots with a shared
atomic for the marker's record and an ARGUS_KIND_LANES record (the shared cursor's format). The last lane group to leave
the scope writes the header.

Here: the default build (no define, or =0) is SASS-identical (cuobjdump -sass, addresses and encodings); every
reference-execution kernel builds in the apart build in every mode; the whole-warp marker's SASS path (no shared load,
no barrier, one branch, and at most MAX_PER_MARKER instructions, the count docs/marker_cost_anatomy.md states); and the
decoder on rings that a Python mirror of the apart cursor's slot arithmetic writes (lane groups, whole-warp regions
around them, groups leaving apart, the window, wrap, append, a declaration by part of the warp refused), checked
against what each lane group did.

GPU: tests/test_regcursor_v2_gpu.py (``-k apart``) and benchmarks/marker_cost.py's register_apart* rows.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, decode, layout, pair_intervals
from argus_rt.trace.decode import LANES_WHOLE_WARP
from occurrences import occurrence_key
from toolchain import needs_nvcc, parse_sass

KERNELS = ("refexec_compute", "refexec_compute_helper", "refexec_compute_helper_value", "refexec_compute_helper_inline",
           "refexec_compute_divergent")
REG = {"REFEXEC_WARP_STATE": "1"}
APART = {**REG, "ARGUS_REG_APART": "1"}
ANCHORED = {"ARGUS_TIMESTAMP": "ARGUS_TS_ANCHORED"}
# SASS instructions a whole warp runs per marker on the fast path (all 32 lanes, no lane group since the last marker),
# on average over the loop's markers, counted by whole_warp_paths (nvcc 13.0, sm_90a, OCCURRENCES=64):
# refexec_compute and refexec_compute_helper_inline 19 + 20, refexec_compute_helper_value 23 + 18 (the default register
# cursor: 9 + 15 and 12 + 15). Before the fold (e29383e, measured 52.6 ns per marker on H200) the same count gave
# 16 + 16 and 22 + 15 to the store, the branch and BSYNC after it, and a shared load and BSSY on the path, which the
# test refuses (the count alone would not).
MAX_PER_MARKER = 21
# None of these may be on the fast path: a shared load (the `extra` word: the fold's, only after lane groups), the lane
# groups' atomic, a convergence barrier (BSSY/BSYNC: the fast path's branch is warp-uniform), the mask checks ptxas adds
# when it cannot prove the warp converged (MATCH, BRA.DIV, R2UR, REDUX, WARPSYNC), a call, a global load, a fence.
FORBIDDEN = ("LDS", "ATOMS", "BSSY", "BSYNC", "MATCH", "BRA.DIV", "R2UR", "REDUX", "WARPSYNC", "CALL", "LDG",
             "VOTE.ALL", "MEMBAR", "SHFL")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def _sass(mode: int, kernel: str, defines: dict) -> list[str]:
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from tests.test_cuda_build import SOURCES

    name = f"refexec.apart.m{mode}" + "".join(f".{k}{v}" for k, v in sorted(defines.items()))
    res = build(CudaBuildSpec(name, [SOURCES["reference_execution"]], argus_mode=mode,
                              defines={"OCCURRENCES": "64", **defines}))
    return sass_lines(disassemble(res.cubin, kernel))


# ---- builds ----------------------------------------------------------------------------------------------------------


@needs_nvcc
@pytest.mark.parametrize("extra", [{}, ANCHORED], ids=["globaltimer", "anchored"])
def test_default_build_is_sass_identical_with_apart_0(extra):
    """-DARGUS_REG_APART=0 is the default: same machine code (addresses and encodings) for every kernel."""
    for kernel in KERNELS:
        assert _sass(2, kernel, {**REG, **extra, "ARGUS_REG_APART": "0"}) == _sass(2, kernel, {**REG, **extra}), kernel


@needs_nvcc
def test_every_kernel_builds_in_the_apart_build_and_modes_0_1_ignore_it():
    for kernel in KERNELS:
        for mode in (0, 1):
            assert _sass(mode, kernel, APART) == _sass(mode, kernel, REG), (mode, kernel)
        lines = _sass(2, kernel, APART)
        assert sum("SR_GLOBALTIMER" in ln for ln in lines) >= 2, kernel
        assert any("ATOMS.ADD" in ln for ln in lines), kernel  # the lane groups' slot claim
        assert sum("SR_CLOCKLO" in ln for ln in _sass(2, kernel, {**APART, **ANCHORED})) >= 2, kernel


# ---- the whole-warp marker's SASS path -----------------------------------------------------------------------------


def whole_warp_paths(lines: list[str]) -> list[list[tuple[int, str, str, str]]]:
    """The instructions a whole warp runs for each marker of a loop: from its activemask (the VOTE.ANY before its timer
    read; in the apart build from the test of its dirty bit, when ptxas puts that first) to the record store, following
    the first branch on the way as taken (the apart build's fast path branches over the fold and lane-group block; the
    default build has no branch there)."""
    ins = parse_sass(lines)
    at = {a: i for i, (a, *_) in enumerate(ins)}
    paths = []
    for i, (_, _, op, ops) in enumerate(ins):
        if op != "CS2R" or "SR_GLOBALTIMER" not in ops:
            continue
        start = next(j for j in range(i, max(-1, i - 24), -1) if ins[j][2] == "VOTE.ANY" and ins[j][3].endswith("PT, PT"))
        dirty_test = [j for j in range(max(0, start - 4), start)
                      if ins[j][2] == "LOP3.LUT" and ins[j][3].startswith("P") and f"{DIRTY_BIT:#x}," in ins[j][3]]
        start = dirty_test[0] if dirty_test else start
        path, j, jumped = [], start, False
        while True:
            path.append(ins[j])
            if ins[j][2] == "STG.E.128":
                break
            if ins[j][2] == "BRA" and not jumped:
                jumped, j = True, at[int(ins[j][3].split()[-1], 16)]
                continue
            j += 1
        paths.append(path)
    return paths


DIRTY_BIT = 1 << 28  # ARGUS_REG_DIRTY_ (csrc/argus/argus_cursors.cuh)


@needs_nvcc
@pytest.mark.parametrize("kernel", ["refexec_compute", "refexec_compute_helper_value", "refexec_compute_helper_inline"])
def test_whole_warp_fast_path_has_no_shared_load_no_barrier_and_one_uniform_branch(kernel):
    """The fast path of a whole-warp marker: no shared load (the 14:53 H200 run measured the shared load build at 52.6
    ns per marker against the default's 17.4) and no BSSY/BSYNC, one branch (over the fold and lane-group block, which
    the path skips), the __syncwarp still a NOP before the stamp, the dirty vote, and at most MAX_PER_MARKER
    instructions per marker."""
    lines = _sass(2, kernel, APART)
    default, apart = whole_warp_paths(_sass(2, kernel, REG)), whole_warp_paths(lines)
    assert len(default) == len(apart) >= 2, (len(default), len(apart))
    ins_all = parse_sass(lines)
    at = {a: k for k, (a, *_) in enumerate(ins_all)}
    text = "\n".join(" ".join(x for x in ins[1:] if x) for p in apart for ins in p)
    for path in apart:
        ops = [op for _, _, op, _ in path]
        assert not [op for op in ops if op.startswith(FORBIDDEN)], text
        assert ops.count("BRA") == 1 and ops[-1] == "STG.E.128", text
        # the branch skips the block: its target follows the block's BSYNC, and the record store comes after it
        branch = next(k for k, op in enumerate(ops) if op == "BRA")
        target = at[path[branch + 1][0]]
        assert path[branch + 1][0] > path[branch][0] and ins_all[target - 1][2] == "BSYNC", text
        # the activemask and the dirty vote (on a predicate), then the __syncwarp's NOP before the stamp
        votes = [ops_ for _, _, op, ops_ in path if op == "VOTE.ANY"]
        assert len(votes) == 2 and votes[0].endswith("PT, PT") and votes[1].startswith("P"), text
        timer = next(k for k, (_, _, op, ops_) in enumerate(path) if op == "CS2R")
        assert "NOP" in ops[:timer], text
    n_apart = sum(map(len, apart))
    assert n_apart <= MAX_PER_MARKER * len(apart), (n_apart, sum(map(len, default)), text)


@needs_nvcc
def test_scope_exit_takes_no_vote_and_the_last_group_writes_the_header():
    """No divergence vote (the default's VOTE.ANY on a predicate: the only ones here are the markers' dirty votes, each
    right before its stamp); the leaving group ORs its lanes into the warp's word between CTA fences, and the divergent
    flag is only for a cursor declared by part of the warp."""
    lines = _sass(2, "refexec_compute", APART)
    votes = [i for i, ln in enumerate(lines) if re.search(r"VOTE\.ANY P\d, ", ln)]
    assert all(any("SR_GLOBALTIMER" in ln for ln in lines[i + 1: i + 3]) for i in votes), votes
    orr = next(i for i, ln in enumerate(lines) if "ATOMS.OR" in ln)
    assert "MEMBAR" in lines[orr - 1] and any("MEMBAR" in ln for ln in lines[orr + 1: orr + 4]), lines[orr - 1: orr + 4]
    assert not any("SR_GLOBALTIMER" in ln for ln in lines[orr:])


# ---- decoder: rings as the apart cursor writes them -----------------------------------------------------------------

FULL = 0xFFFFFFFF
OUTER, LOW, HIGH, QUARTER = 0x0A0A0001, 0x0A0A0002, 0x0A0A0003, 0x0A0A0004


class ApartWarp:
    """Mirror of one warp's apart register cursor (emit_with and ~RegCursor of the apart build): ``count`` in
    registers, ``extra`` and ``left`` in shared memory, records at (count + extra) & (capacity - 1); ``dirty``: the vote
    of the lanes' dirty bits (a lane-group marker ran since the last fold), so a whole-warp marker then folds ``extra``
    into ``count`` first."""

    def __init__(self, raw: np.ndarray, cfg: TraceConfig, cta: int, warp: int, sm: int, launch: int = FULL,
                 declared_by: int | None = None):
        self.cfg, self.cta, self.warp, self.sm, self.launch = cfg, cta, warp, sm, launch
        ring = cfg.ring_of(cta, warp)
        stride = layout.ring_stride(cfg.capacity, cfg.clock_mode)
        head = layout.header_bytes(cfg.clock_mode)
        self.header = raw[ring * stride: ring * stride + layout.RING_HEADER_DTYPE.itemsize].view(layout.RING_HEADER_DTYPE)
        self.records = raw[ring * stride + head: ring * stride + head + cfg.capacity * 16].view(layout.RECORD_DTYPE)
        h = self.header[0]
        self.append = int(h["magic"]) == layout.RING_MAGIC and int(h["seq"]) == cfg.seq
        self.count = int(h["written"]) if self.append else 0
        self.bad = declared_by is not None and declared_by != launch
        self.lanes = 0 if self.bad else launch
        self.extra = 0 if not self.bad else 7  # a partial declaration does not zero the shared words
        self.left = 0
        self.dirty = False

    def _take(self, coord: int) -> bool:
        lo, hi = self.cfg.coord_window if self.cfg.coord_window is not None else (0, layout.COORD_NONE)
        return coord == layout.COORD_NONE or (coord - lo) % (1 << 32) < (hi - lo) % (1 << 32)

    def _store(self, n: int, a: int, b: int, t: int, kind: int) -> None:
        self.records[n & (self.cfg.capacity - 1)] = (a, b, (t & layout.TIME_MASK) | (kind << layout.KIND_SHIFT))

    def marker(self, kind: str, region: int, t: int, coord: int = layout.COORD_NONE, lanes: int = FULL) -> None:
        k = {"begin": layout.KIND_BEGIN, "end": layout.KIND_END}[kind]
        take = self._take(coord)
        if lanes == self.lanes:  # whole warp: after lane groups, the fold; then the record at count, count += take
            if self.dirty:
                self.count, self.extra, self.dirty = self.count + self.extra, 0, False
            self._store(self.count, region, coord, t, k)
            self.count += take
            return
        self.dirty = True
        if take:  # a lane group: its lowest lane claims two slots
            n = self.count + self.extra
            self.extra += 2
            lowest = (lanes & -lanes).bit_length() - 1
            self._store(n, region, coord, t, k)
            self._store(n + 1, lanes, lowest, t, layout.KIND_LANES)

    def leave(self, lanes: int) -> None:
        n = self.count
        if self.bad:
            flag = layout.RING_WARP_DIVERGENT
        else:
            before, self.left = self.left, self.left | lanes
            if self.left != self.launch:
                return
            assert not before & lanes
            n, flag = n + self.extra, 0
        cap = self.cfg.capacity
        h = self.header
        if self.append:
            h["written"], h["dropped"] = n, max(0, n - cap)
            h["claims"] += 1
            h["warp"] |= flag
        else:
            h[0] = (layout.RING_MAGIC, self.cfg.seq, self.sm, self.cta, self.warp | flag, n, max(0, n - cap), 1)


def _config(capacity=64, **kw) -> TraceConfig:
    return TraceConfig(ctas=1, threads_per_cta=64, capacity=capacity, **kw)


def _rows(raw, cfg):
    t = decode(raw.tobytes(), cfg)
    return t, pair_intervals(t).rows


def test_half_warps_in_different_regions_pair_per_lane_group():
    """The divergent kernel's ring (each half its own pairs, the halves interleaved in any order) decodes to exactly
    the occurrences marker_cost's register_apart_divergent check expects."""
    from benchmarks.marker_cost import REGION_OCCURRENCE, REGION_REFEXEC, expected_occurrences

    cfg = _config(capacity=256)
    raw = np.zeros(cfg.buffer_bytes, dtype=np.uint8)
    gen = np.random.default_rng(3)
    for warp in (0, 1):
        w = ApartWarp(raw, cfg, 0, warp, sm=5)
        t, todo = 1000, {0x0000FFFF: [], 0xFFFF0000: []}
        for occ in range(16):
            todo[0x0000FFFF] += [("begin", REGION_OCCURRENCE, occ), ("end", REGION_OCCURRENCE, occ)]
            todo[0xFFFF0000] += [("begin", REGION_REFEXEC, occ), ("end", REGION_REFEXEC, occ)]
        while any(todo.values()):
            half = int(gen.choice([h for h, v in todo.items() if v]))
            kind, region, occ = todo[half].pop(0)
            t += int(gen.integers(1, 40))
            w.marker(kind, region, t, coord=occ, lanes=half)
        w.leave(FULL)
    t, rows = _rows(raw, cfg)
    assert not t.incomplete, t.problems
    want = expected_occurrences("register_apart_divergent", 16)
    for ring in (0, 1):
        r = rows[rows["ring"] == ring]
        assert Counter(zip(r["region_id"].tolist(), r["coord"].tolist(), r["lanes"].tolist())) == want
        assert int(t.rings["written"][ring]) == 16 * 2 * 2 * 2  # two slots per lane-group marker


def test_whole_warp_regions_around_lane_groups_nest_and_a_leftover_is_overwritten():
    """Whole-warp markers between lane-group markers (extra moves the whole warp's slot on), nested divergence, and an
    out-of-window whole-warp marker whose leftover the next lane group's slot overwrites."""
    cfg = _config(capacity=64, coord_window=(0, 8))
    raw = np.zeros(cfg.buffer_bytes, dtype=np.uint8)
    w = ApartWarp(raw, cfg, 0, 0, sm=1)
    want = []
    t = 0
    for i in range(3):
        w.marker("begin", OUTER, t := t + 10, coord=i)
        w.marker("begin", LOW, t := t + 10, coord=i, lanes=0x0000FFFF)
        w.marker("begin", QUARTER, t := t + 10, coord=i, lanes=0x000000FF)
        w.marker("end", QUARTER, t := t + 10, coord=i, lanes=0x000000FF)
        w.marker("end", LOW, t := t + 10, coord=i, lanes=0x0000FFFF)
        w.marker("begin", OUTER, t := t + 1, coord=100)  # outside the window: stored, then overwritten
        for j in range(i + 1):
            w.marker("begin", HIGH, t := t + 10, coord=j, lanes=0xFFFF0000)
            w.marker("end", HIGH, t := t + 10, coord=j, lanes=0xFFFF0000)
        w.marker("end", OUTER, t := t + 10, coord=i)
        want += [(OUTER, i, FULL, 0, None), (LOW, i, 0x0000FFFF, 1, (OUTER, i)), (QUARTER, i, 0x000000FF, 2, (LOW, i))]
        want += [(HIGH, j, 0xFFFF0000, 1, (OUTER, i)) for j in range(i + 1)]
    w.leave(FULL)
    t_, rows = _rows(raw, cfg)
    assert not t_.incomplete, t_.problems
    assert Counter(occurrence_key(rows, k) for k in range(len(rows))) == Counter(want)
    for k in range(len(rows)):  # each occurrence lies inside its parent's
        p = int(rows[k]["parent"])
        if p >= 0:
            assert rows[p]["start"] <= rows[k]["start"] <= rows[k]["end"] <= rows[p]["end"]


def test_lane_groups_leaving_apart_the_last_writes_the_header():
    """Lanes 24-31 leave first; lanes 0-23 then record as a lane group and leave: nothing is lost or flagged. Before
    the last group leaves, no header exists (the ring is unclaimed), never a header that misses records."""
    cfg = _config()
    raw = np.zeros(cfg.buffer_bytes, dtype=np.uint8)
    w = ApartWarp(raw, cfg, 0, 1, sm=2)
    w.marker("begin", OUTER, 10)
    w.marker("end", OUTER, 20)
    w.leave(0xFF000000)
    assert int(w.header["magic"][0]) == 0
    w.marker("begin", LOW, 30, lanes=0x00FFFFFF)
    w.marker("end", LOW, 40, lanes=0x00FFFFFF)
    w.leave(0x00FFFFFF)
    t, rows = _rows(raw, cfg)
    assert not t.incomplete and int(t.rings["written"][0]) == 2 + 4
    assert sorted((int(r["region_id"]), int(r["lanes"])) for r in rows) == [(OUTER, FULL), (LOW, 0x00FFFFFF)]


def test_partial_last_warp_records_whole_warp_markers_without_lane_records():
    cfg = TraceConfig(ctas=1, threads_per_cta=48, capacity=16)
    raw = np.zeros(cfg.buffer_bytes, dtype=np.uint8)
    w = ApartWarp(raw, cfg, 0, 1, sm=0, launch=0x0000FFFF)
    w.marker("begin", OUTER, 10, lanes=0x0000FFFF)
    w.marker("begin", LOW, 11, lanes=0x000000FF)
    w.marker("end", LOW, 12, lanes=0x000000FF)
    w.marker("end", OUTER, 13, lanes=0x0000FFFF)
    w.leave(0x0000FFFF)
    t, rows = _rows(raw, cfg)
    assert not t.incomplete
    assert sorted((int(r["region_id"]), int(r["lanes"])) for r in rows) == [(OUTER, LANES_WHOLE_WARP), (LOW, 0x000000FF)]


def test_a_cursor_declared_by_part_of_the_warp_is_refused():
    from argus_rt.trace.errors import DivergentMarkersError

    cfg = _config()
    raw = np.zeros(cfg.buffer_bytes, dtype=np.uint8)
    w = ApartWarp(raw, cfg, 0, 0, sm=4, declared_by=0x0000FFFF)
    w.marker("begin", LOW, 10, lanes=0x0000FFFF)
    w.marker("end", LOW, 20, lanes=0x0000FFFF)
    w.leave(0x0000FFFF)
    with pytest.raises(DivergentMarkersError, match="SM 4, CTA 0, warp 0"):
        decode(raw.tobytes(), cfg)


def test_appended_launch_continues_after_the_first_launch_s_lane_groups():
    """A second CTA instance under the same arm appends: its count starts at the header's written (the first
    instance's whole-warp records and lane-group slots), its extra at 0."""
    cfg = _config()
    raw = np.zeros(cfg.buffer_bytes, dtype=np.uint8)
    for launch in range(2):
        w = ApartWarp(raw, cfg, 0, 0, sm=3)
        w.marker("begin", OUTER, 100 * launch + 10, coord=launch)
        w.marker("begin", LOW, 100 * launch + 20, coord=launch, lanes=0x0000FFFF)
        w.marker("end", LOW, 100 * launch + 30, coord=launch, lanes=0x0000FFFF)
        w.marker("end", OUTER, 100 * launch + 40, coord=launch)
        w.leave(FULL)
    t, rows = _rows(raw, cfg)
    assert not t.incomplete and int(t.rings["claims"][0]) == 2 and int(t.rings["written"][0]) == 12
    assert Counter(occurrence_key(rows, k) for k in range(len(rows))) == Counter(
        [(OUTER, c, FULL, 0, None) for c in (0, 1)] + [(LOW, c, 0x0000FFFF, 1, (OUTER, c)) for c in (0, 1)])


def test_wrapped_ring_of_lane_groups_is_incomplete_not_corrupt():
    cfg = _config(capacity=16)
    raw = np.zeros(cfg.buffer_bytes, dtype=np.uint8)
    w = ApartWarp(raw, cfg, 0, 0, sm=0)
    for i in range(5):  # 5 x 4 = 20 slots in a 16-slot ring: the first pair's four slots are overwritten
        w.marker("begin", LOW, 10 * i + 1, coord=i, lanes=0x0000FFFF)
        w.marker("end", LOW, 10 * i + 2, coord=i, lanes=0x0000FFFF)
    w.leave(FULL)
    t, rows = _rows(raw, cfg)
    assert t.incomplete and any("wrapped" in p for p in t.problems)
    assert sorted(int(c) for c in rows["coord"]) == [1, 2, 3, 4]
    assert set(rows["lanes"].tolist()) == {0x0000FFFF}


def assert_divergent_check_can_fail(monkeypatch, path: str, cfg: TraceConfig, new_raw, mirror, leave, t0: int = 0):
    """marker_cost's check of the half-warp row ``path`` (every warp, per lane group) passes on two warps of a mirror's
    rings and fails when one half-warp's pair of one warp is missing, so the GPU row's check can fail. ``new_raw(cfg)``:
    an empty trace buffer; ``mirror(raw, warp)``: the build's warp mirror; ``leave(w)``: its scope exit; ``t0``: the
    first time stamp."""
    import benchmarks.marker_cost as mc
    from benchmarks.marker_cost import REGION_OCCURRENCE, REGION_REFEXEC, check_failure, check_trace

    monkeypatch.setattr(mc, "CTAS", 1)
    monkeypatch.setattr(mc, "THREADS", 64)

    def ring_bytes(skip: tuple | None) -> bytes:
        raw = new_raw(cfg)
        for warp in (0, 1):
            w = mirror(raw, warp)
            for occ in range(16):
                for half, region in ((0x0000FFFF, REGION_OCCURRENCE), (0xFFFF0000, REGION_REFEXEC)):
                    if (warp, occ, half) == skip:
                        continue
                    w.marker("begin", region, t0 + 100 * occ + 1, coord=occ, lanes=half)
                    w.marker("end", region, t0 + 100 * occ + 50, coord=occ, lanes=half)
            leave(w)
        return raw.tobytes()

    class Session:
        def __init__(self, data):
            self.data = data

        def decode(self):
            return decode(self.data, cfg)

    assert check_failure(lambda: check_trace(Session(ring_bytes(None)), path, 16)) is None
    why = check_failure(lambda: check_trace(Session(ring_bytes((1, 7, 0xFFFF0000))), path, 16))
    assert why and "ring 1" in why and "missing" in why, why


def test_the_check_of_register_apart_divergent_fails_when_a_half_warp_s_occurrence_is_missing(monkeypatch):
    cfg = _config(capacity=128)
    assert_divergent_check_can_fail(monkeypatch, "register_apart_divergent", cfg,
                                    lambda c: np.zeros(c.buffer_bytes, dtype=np.uint8),
                                    lambda raw, warp: ApartWarp(raw, cfg, 0, warp, sm=0), lambda w: w.leave(FULL))


def test_marker_cost_rows_of_the_apart_build():
    from benchmarks.marker_cost import APART as ROWS_APART
    from benchmarks.marker_cost import PATHS, REFUSED

    assert ROWS_APART == APART
    assert PATHS["register_apart"] == ("refexec_compute", APART)
    assert PATHS["register_apart_helper_value"] == ("refexec_compute_helper_value", APART)
    assert PATHS["register_apart_divergent"] == ("refexec_compute_divergent", APART)
    assert "register_apart_divergent" not in REFUSED and "register_divergent" in REFUSED


@needs_nvcc
def test_the_gpu_test_s_lane_group_kernel_builds_in_every_mode(tmp_path):
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_lines
    from test_regcursor_v2_gpu import APART_SOURCE

    src = tmp_path / "apart_pattern.cu"
    src.write_text(APART_SOURCE)
    for mode in (0, 1, 2):
        lines = sass_lines(disassemble(build(CudaBuildSpec(f"apart_pattern.m{mode}", [src], argus_mode=mode,
                                                           defines={"ARGUS_REG_APART": "1"})).cubin, "apart_pattern"))
        assert (sum("SR_GLOBALTIMER" in ln for ln in lines) >= 10) == (mode == 2), mode


def test_the_gpu_test_s_reference_and_check_on_a_mirror_ring():
    """The GPU test's reference (apart_reference) and check (check_apart_trace) on rings the mirror writes by following
    apart_pattern's control flow, with the lane groups interleaved and lanes 24-31 leaving first: it passes, and fails
    when one warp's HIGH repeat count is off by one (so the GPU check can fail)."""
    from test_regcursor_v2_gpu import HIGH as G_HIGH
    from test_regcursor_v2_gpu import LOW as G_LOW
    from test_regcursor_v2_gpu import OUTER as G_OUTER
    from test_regcursor_v2_gpu import QUARTER as G_QUARTER
    from test_regcursor_v2_gpu import TAIL as G_TAIL
    from test_regcursor_v2_gpu import check_apart_trace

    ctas, threads, n = 2, 64, 5
    cfg = TraceConfig(ctas=ctas, threads_per_cta=threads, capacity=256)

    def ring_bytes(off_by_one: tuple | None) -> bytes:
        raw = np.zeros(cfg.buffer_bytes, dtype=np.uint8)
        t = 0
        for cta in range(ctas):
            for warp in range(threads // 32):
                w = ApartWarp(raw, cfg, cta, warp, sm=cta)
                for i in range(n):
                    w.marker("begin", G_OUTER, t := t + 5, coord=i)
                    reps = (i + warp + cta) % 3 + 1 + ((cta, warp) == off_by_one)
                    high = [m for j in range(reps) for m in (("begin", G_HIGH, j), ("end", G_HIGH, j))]
                    low = [("begin", G_LOW, i, 0x0000FFFF), ("begin", G_QUARTER, i, 0x000000FF),
                           ("end", G_QUARTER, i, 0x000000FF), ("end", G_LOW, i, 0x0000FFFF)]
                    for k in range(max(len(low), len(high))):  # the halves interleaved
                        if k < len(high):
                            w.marker(high[k][0], high[k][1], t := t + 3, coord=high[k][2], lanes=0xFFFF0000)
                        if k < len(low):
                            w.marker(low[k][0], low[k][1], t := t + 3, coord=low[k][2], lanes=low[k][3])
                    w.marker("end", G_OUTER, t := t + 5, coord=i)
                w.leave(0xFF000000)
                w.marker("begin", G_TAIL, t := t + 5, lanes=0x00FFFFFF)
                w.marker("end", G_TAIL, t := t + 5, lanes=0x00FFFFFF)
                w.leave(0x00FFFFFF)
        return raw.tobytes()

    check_apart_trace(decode(ring_bytes(None), cfg), n)
    with pytest.raises(AssertionError):
        check_apart_trace(decode(ring_bytes((1, 0)), cfg), n)
