"""Row 38 (megakernel/NOTES.md "Ready: rows 38-39"): a GEMV loop with no dependent remainder trip (csrc/megakernel/
gemv.cuh: gemv_batches, a warp's row as (row, chunk-range) pieces whose loads are issued in whole batches of kTrips
trips, all before the batch's first FFMA). MK_O_PIECES=1 (mk_o_pieces: 8-row O-proj tiles, one row a warp, K 2048 in
one batch of 8 loads per lane) on top of row 36's MK_DOWN_PIECES=1 (row 39, Down's K-halves through the same helper,
was removed in session 15: a measured miss). On the CPU: the row, the helper's batch index math for 1-3
pieces (every chunk of every row read once; the same lanes and per-accumulator order as gemv_rows / gemv_halves,
which the GPU tests' bit-for-bit checks rest on), the trip arithmetic, the default cubin unchanged with the flag at 0
(modes 0 and 2), registers and spills, the SASS batch shapes and the compile-time refusals. GPU:
tests/test_megakernel_fusions_gpu.py, the tests named *gemv_batches* (FUSION_K=gemv_batches)."""
import dataclasses
import math
import re

import pytest

from benchmarks.decode import DOWN_PIECES, O_PIECES, variant_rows
from megakernel.dag import COMBINE_TILES, TileShape, build_decode_program
from test_megakernel_down_pieces import _branch_runs
from tinyllama.config import get_config
from toolchain import cubin_sha256, megakernel_builds, needs_nvcc  # noqa: F401 (megakernel_builds: the builds fixture)

O_TILES = TileShape(o_rows=8, down_rows=8, attn_split_long=256)
DOWN_TILES = TileShape(down_rows=8, attn_split_long=256)
ROW38 = DOWN_PIECES + O_PIECES
O_TRIPS = 8  # config.cuh: MK_O_TRIPS


def test_row_carries_row_36_and_its_flag():
    rows = variant_rows()
    assert O_PIECES == ("-DMK_O_PIECES=1",)
    assert rows["mk_o_pieces"] == {"tiles": O_TILES, "build_flags": ROW38}
    assert "mk_down_body" not in rows  # row 39, removed
    assert rows["mk_down_pieces"] == {"tiles": DOWN_TILES, "build_flags": DOWN_PIECES}  # what it is read against
    assert O_TILES == dataclasses.replace(COMBINE_TILES, o_rows=8, down_rows=8)
    c = get_config("tinyllama-1.1b")
    program = build_decode_program(c, O_TILES).instructions
    oproj = [i for i in program if type(i).__name__ == "OProj"]
    assert len(oproj) == c.n_layers * 256 and all(o.rows == 8 for o in oproj)
    gate_up = [i for i in program if type(i).__name__ == "GateUp"]
    assert {g.wait_count for g in gate_up} == {256}  # gate/up waits for all 256 O-proj tiles of its layer


def _batches(chunks: int, rows: int, warps: int, pieces: int, trips: int):
    """gemv_batches by its loop bounds: {(row, chunk): times read}, {(row, lane, piece): chunks in accumulation
    order}, and {(row, lane): batches} (passes of the t0 loop)."""
    span = chunks // pieces
    last = chunks - (pieces - 1) * span
    seen, order, passes = {}, {}, {}
    for warp in range(warps):
        for r in range(warp, rows, warps):
            for lane in range(32):
                for t0 in range(lane, last, 32 * trips):
                    passes[r, lane] = passes.get((r, lane), 0) + 1
                    for u in range(trips):
                        t = t0 + 32 * u
                        for q in range(pieces):
                            if t < (last if q == pieces - 1 else span):
                                c = q * span + t
                                seen[r, c] = seen.get((r, c), 0) + 1
                                order.setdefault((r, lane, q), []).append(c)
    return seen, order, passes


def _halves_order(chunks: int, rows: int, warps: int):
    """gemv_halves' accumulation (tests/test_megakernel_down_pieces.py: _pieces reads the same loop): acc0 the lower
    half's chunks, acc1 the upper half's, lane 0 adding an odd count's last chunk to acc1."""
    half, order = chunks >> 1, {}
    for warp in range(warps):
        for r in range(warp, rows, warps):
            for lane in range(32):
                for c in range(lane, half, 32):
                    order.setdefault((r, lane, 0), []).append(c)
                    order.setdefault((r, lane, 1), []).append(half + c)
                if chunks & 1 and lane == 0:
                    order.setdefault((r, lane, 1), []).append(chunks - 1)
    return order


@pytest.mark.parametrize("chunks", [704, 256, 44, 16, 45, 7, 1])  # Down, O-proj, the tiny model's, odd counts
@pytest.mark.parametrize("pieces", [1, 2, 3])
@pytest.mark.parametrize("trips", [1, 6, 8, 11, 16])
@pytest.mark.parametrize("rows,warps", [(8, 8), (16, 8), (8, 4)])
def test_the_batches_read_every_chunk_of_every_row_once(chunks, pieces, trips, rows, warps):
    seen, order, _ = _batches(chunks, rows, warps, pieces, trips)
    assert seen == {(r, c): 1 for r in range(rows) for c in range(chunks)}
    assert all(v == sorted(v) for v in order.values())  # each accumulator adds its chunks in increasing order


@pytest.mark.parametrize("chunks", [256, 16, 45, 7])
@pytest.mark.parametrize("trips", [1, 8, 11])
def test_one_piece_sums_as_gemv_rows(chunks, trips):
    """gemv_rows: each lane sums chunks lane, lane + 32, ... of a row in order, then the warp sum: the same."""
    _, order, _ = _batches(chunks, 8, 8, 1, trips)
    want = {(r, lane, 0): list(range(lane, chunks, 32)) for r in range(8) for lane in range(32) if lane < chunks}
    assert order == want


@pytest.mark.parametrize("chunks", [704, 44, 64, 2])  # even counts: Down's and the tiny model's included
@pytest.mark.parametrize("trips", [1, 8, 11, 16])
@pytest.mark.parametrize("rows,warps", [(8, 8), (16, 8), (8, 4)])
def test_two_pieces_sum_as_gemv_halves_for_even_chunk_counts(chunks, trips, rows, warps):
    assert _batches(chunks, rows, warps, 2, trips)[1] == _halves_order(chunks, rows, warps)


def test_an_odd_count_moves_the_last_chunk_to_another_lane():
    """The one documented difference from gemv_halves (gemv.cuh): not Down's (704), not the tiny model's (44)."""
    got, want = _batches(45, 8, 8, 2, 11)[1], _halves_order(45, 8, 8)
    assert got != want and got[0, 22 % 32, 1][-1] == 44 and want[0, 0, 1][-1] == 44


def test_batches_per_row():
    """O-proj (K 2048, one piece): 8 trips per lane, one batch of 8 loads (MK_O_TRIPS=3: 3 batches, 3 + 3 + 2)."""
    _, order, passes = _batches(2048 // 8, 8, 8, 1, O_TRIPS)
    assert set(passes.values()) == {1}
    assert {len(order[r, lane, 0]) for r in range(8) for lane in range(32)} == {8}
    assert math.ceil(2048 // 8 // 32 / 3) == 3


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_default_cubin_is_the_flags_at_0(builds, mode):
    base = cubin_sha256(builds(mode))
    assert cubin_sha256(builds(mode, ("-DMK_O_PIECES=0",))) == base
    # row 36's build (the default since its H200 run: the same cubin) is the row's base
    assert cubin_sha256(builds(mode, DOWN_PIECES)) == base
    assert cubin_sha256(builds(mode, ROW38)) != base


def _spills(log: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores", log)}


@needs_nvcc
@pytest.mark.parametrize("flags", [ROW38], ids=["o_pieces"])
@pytest.mark.parametrize("mode", [0, 2])
def test_the_row_keeps_128_registers_and_no_more_spills_than_row_36(builds, flags, mode):
    """nvcc 13.0, 2026-12-02, spill stores: mode 0 (timed) default 64, row 36 44, row 38 40; mode 2 (trace
    timelines) default 40, row 36 52, row 38 40. Only the kernel entry and the unused 8-head attention
    instance spill, as in the default. Compared on the kernel they were measured on, before rows 55 and 58
    (MK_TAIL_LOADS=0: row 55 cut the default's own spills to 8 B in mode 2, below row 38's 12; MK_COMBINE_AHEAD=0:
    with row 58's combine and MK_TAIL_LOADS=0, ptxas spills 4 B in load_attention_combined, with or without row 38)."""
    measured_on = ("-DMK_TAIL_LOADS=0", "-DMK_COMBINE_AHEAD=0")
    ref, r = builds(mode, DOWN_PIECES + measured_on), builds(mode, flags + measured_on)
    assert r.registers() == ref.registers() == 128
    assert r.spill_bytes() <= ref.spill_bytes(), r.ptxas_log
    assert all(n == 0 for fn, n in _spills(r.ptxas_log).items() if "argus_megakernel" not in fn and "ILi8E" not in fn)


def _load_batches(fn: list[str]) -> list[tuple[int, int, bool]]:
    """Runs of weight loads up to the next FFMA/FMUL: (loads, predicated loads, a branch between two of them)."""
    from megakernel import sass_diff

    out, n, pred, branch, pending = [], 0, 0, False, False
    for line in fn:
        if sass_diff.WEIGHT_LOAD.search(line):
            n, pred, branch = n + 1, pred + bool(re.match(r"\s*@!?P\d", line)), branch or pending
        elif re.search(r"\b(FFMA|FMUL)\b", line):
            if n:
                out.append((n, pred, branch))
            n, pred, branch, pending = 0, 0, False, False
        elif re.search(r"\bBRA\b", line) and n:
            pending = True
    return out + ([(n, pred, branch)] if n else [])


# The kernel entry's load runs (loads, predicated, branch between loads): row 36's Down pieces loop (7 remainder
# trips of 2, a 16-load body, lane 0's odd chunk), row 38's O-proj batch of 8 besides it.
PIECES_RUNS = [(2, 0, False)] * 7 + [(16, 0, False), (1, 0, False)]
SHAPES = {"pieces": (DOWN_PIECES, PIECES_RUNS, (8, 4)),
          "o_pieces": (ROW38, [(8, 8, False)] + PIECES_RUNS, (7, 4))}


@needs_nvcc
@pytest.mark.parametrize("name", list(SHAPES))
def test_the_sass_issues_each_batch_before_its_first_ffma(builds, name):
    """Every load of a batch before the batch's first FFMA, no branch between them, each with its predicate.
    o_pieces: op_oproj calls gemv_tile only in its staged path (7 calls of gemv_tile, 4 of gemv_tile_staged); gemv_tile
    itself (the other ops) keeps the plain loop's shape in every build."""
    from megakernel import sass_diff
    from toolchain import skip_without_tools

    skip_without_tools("nvdisasm")
    flags, runs, calls = SHAPES[name]
    fns = sass_diff.functions(sass_diff.disassembly(builds(0, flags).cubin))
    assert _load_batches(fns["argus_megakernel"]) == runs
    assert (sum(sass_diff.calls(f, "gemv_tile") for f in fns.values()),
            sum(sass_diff.calls(f, "gemv_tile_staged") for f in fns.values())) == calls
    # gemv_rows<false> between branches: (trips & 7) 2-load remainder trips, then the 16-load body (ptxas schedules
    # the body's FFMAs differently per build, so its loads-before-first-FFMA count is not compared)
    assert sorted(_branch_runs(sass_diff.find_function(fns, "gemv_tile")[1])) == [2] * 7 + [16]


@needs_nvcc
@pytest.mark.parametrize("flags,message", [
    (O_PIECES + ("-DMK_BATCH_O=1",), "MK_O_PIECES has no page-ring path"),
    (O_PIECES + ("-DMK_RING=2",), "MK_O_PIECES has no page-ring path"),
    (("-DMK_O_PIECES=2",), "MK_O_PIECES is 0"),
])
def test_bad_combinations_do_not_compile(flags, message, tmp_path):
    from megakernel.build import BuildError, build

    with pytest.raises(BuildError, match=message):
        build(0, build_dir=tmp_path, extra_flags=flags)
