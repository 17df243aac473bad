"""Row 36 (megakernel/NOTES.md "Ready: row 36", "Row 36 measured"): MK_DOWN_PIECES, Down tiles of 8 rows in which every
warp streams one row's two K-halves (csrc/megakernel/gemv.cuh: gemv_tile_pieces), the default since its H200 run
(MK_DOWN_PIECES=1, COMBINE_TILES' down_rows=8); controls mk_down16 (the default before it: 16-row tiles through
gemv_tile, the flag at 0) and mk_down8_ctl (MK_DOWN_PIECES=2: the same code, warps 0-3 only). On the CPU: the rows
(tiles and flags), the piece index math covering every chunk of every row once, the default cubin = the flag at 1's and
distinct from 0's and 2's (modes 0 and 2), 128 registers and the timed build's spills (44 B, the flag at 0 64 B), the
SASS holding the pieces loop in op_down only with the flag, the staged rows carrying the flag at 0 and building with it,
and the refusals (stage_bytes without the flag at 0). GPU: tests/test_megakernel_fusions_gpu.py, the tests named
*down_pieces* (FUSION_K=down_pieces)."""
import dataclasses
import re

import pytest

from benchmarks.decode import DOWN_PIECES, DOWN_PIECES_CTL, DOWN_PLAIN, variant_rows
from megakernel.dag import COMBINE_TILES, TileShape, build_decode_program
from tinyllama.config import get_config
from toolchain import cubin_sha256, megakernel_builds, needs_nvcc  # noqa: F401 (megakernel_builds: the builds fixture)

TILES = TileShape(down_rows=8, attn_split_long=256)
WARPS, UNROLL = 8, 8  # config.cuh: THREADS / 32, MK_GEMV_UNROLL


def test_the_default_is_8_row_down_tiles_and_the_controls_are_rows():
    rows = variant_rows()
    assert DOWN_PIECES == ("-DMK_DOWN_PIECES=1",) and DOWN_PIECES_CTL == ("-DMK_DOWN_PIECES=2",)
    assert DOWN_PLAIN == ("-DMK_DOWN_PIECES=0",)
    assert COMBINE_TILES == TILES  # the decoder's default from row 36's H200 run (17:54) to rows 40 + 42's (19:07)
    # the default with its flag named (rows 37-39's in-run reference)
    assert rows["mk_down_pieces"] == {"tiles": COMBINE_TILES, "build_flags": DOWN_PIECES}
    assert rows["mk_down8_ctl"] == {"tiles": TILES, "build_flags": DOWN_PIECES_CTL}
    # the default before row 36 exactly: row 35's tiles (16-row Down tiles), Down through gemv_tile
    assert rows["mk_down16"] == {"tiles": dataclasses.replace(COMBINE_TILES, down_rows=16), "build_flags": DOWN_PLAIN}
    assert rows["mk_down16"]["tiles"].down_rows == TileShape().down_rows == 16
    # 8-row tiles through gemv_tile (measured at 14:30, one split length): still that with the flag at 0
    assert rows["mk_down8"] == {"tiles": TileShape(down_rows=8), "build_flags": DOWN_PLAIN}
    c = get_config("tinyllama-1.1b")
    downs = [i for i in build_decode_program(c, COMBINE_TILES).instructions if type(i).__name__ == "Down"]
    assert len(downs) == c.n_layers * 256 and all(d.rows == 8 for d in downs)


def _down_pieces(row: dict) -> str:
    from megakernel.runtime import flag_value

    return flag_value(tuple(row.get("build_flags", ())), "MK_DOWN_PIECES") or "1"  # unset: config.cuh's default


PIECES_16_ROWS = {"mk_early_down16"}  # row 54 measured 16-row Down tiles in pieces on purpose (NOTES.md)


def test_every_row_says_which_down_it_measures():
    """Since row 36 an explicit TileShape has 16-row Down tiles and the default build streams them in pieces, a mix
    no row measured before. Each row with its own tiles either takes the default's 8-row Down tiles (the default plus
    its knob) or sets the flag (0: gemv_tile, the Down it had; 2: the control); staged and ring rows need the flag at 0
    (the runtime refuses them otherwise); rows that change gemv_tile's loop (MK_GEMV_BATCH=1, MK_GEMV_ROWS) keep Down on
    it, or their change would skip Down."""
    from megakernel.runtime import flag_value

    for name, row in variant_rows().items():
        flags, pieces = tuple(row.get("build_flags", ())), _down_pieces(row)
        if "tiles" in row and pieces == "1" and name not in PIECES_16_ROWS:
            assert row["tiles"].down_rows == 8, name
        if row.get("stage_bytes") or row.get("ring_pages"):
            assert pieces == "0", name
        if flag_value(flags, "MK_GEMV_BATCH") == "1" or flag_value(flags, "MK_GEMV_ROWS") is not None:
            assert pieces == "0" and row["tiles"].down_rows == 16, name


def _pieces(chunks: int, rows: int, warps: int) -> dict[tuple[int, int], int]:
    """gemv_halves' loads as (row, chunk) -> times read, by its loop bounds (lane 0 reads an odd count's last)."""
    half, seen = chunks >> 1, {}
    for warp in range(warps):
        for r in range(warp, rows, warps):
            for lane in range(32):
                for c in range(lane, half, 32):
                    for chunk in (c, half + c):
                        seen[r, chunk] = seen.get((r, chunk), 0) + 1
            if chunks & 1:
                seen[r, chunks - 1] = seen.get((r, chunks - 1), 0) + 1
    return seen


@pytest.mark.parametrize("chunks", [704, 44, 45, 7, 1])  # Down's 5632 / 8, the tiny model's 352 / 8, odd counts
@pytest.mark.parametrize("rows,warps", [(8, 8), (16, 8), (8, 4), (2, 8)])
def test_the_pieces_read_every_chunk_of_every_row_once(chunks, rows, warps):
    assert _pieces(chunks, rows, warps) == {(r, c): 1 for r in range(rows) for c in range(chunks)}


def test_down_trips_per_lane():
    """The SASS facts' arithmetic (NOTES.md "Ready: row 36"): the plain loop runs (trips & 7) remainder trips of 2
    loads, then bodies of 8 trips (16 loads). Down's 16-row tile: 22 trips per row pair (6 + 2 bodies), 8 warps per SM;
    the pieces: 11 per row (3 + 1 body), 16 warps per SM; gate/up (K 2048): 8 (one body)."""
    def split(trips):
        return trips % UNROLL, trips // UNROLL

    assert split(5632 // 8 // 32) == (6, 2)
    assert split(5632 // 8 // 2 // 32) == (3, 1)
    assert split(2048 // 8 // 32) == (0, 1)


@pytest.mark.parametrize("flags", [(), DOWN_PIECES, DOWN_PIECES_CTL], ids=["default", "pieces", "ctl"])
def test_stage_bytes_are_refused_without_the_flag_at_0(flags):
    from megakernel.runtime import MegakernelDecoder
    from tinyllama.weights import random_weights

    weights = random_weights(get_config("tiny"), seed=0)
    with pytest.raises(ValueError, match="MK_DOWN_PIECES=0"):
        MegakernelDecoder(weights, tiles=TileShape(down_rows=8, gate_features=16, attn_split=16), stage_bytes=1024,
                          build_flags=flags)


def test_stage_bytes_pass_the_check_with_the_flag_at_0(monkeypatch):
    """The refusal is the flag's alone: with -DMK_DOWN_PIECES=0 the constructor goes on to its GPU work (stubbed)."""
    from megakernel import runtime
    from tinyllama.weights import random_weights

    class Reached(Exception):
        pass

    def stop(*a, **k):
        raise Reached

    monkeypatch.setattr(runtime.DecodeState, "create", stop)
    weights = random_weights(get_config("tiny"), seed=0)
    with pytest.raises(Reached):
        runtime.MegakernelDecoder(weights, tiles=TileShape(gate_features=16, attn_split=16), stage_bytes=1024,
                                  build_flags=DOWN_PLAIN)


@needs_nvcc
@pytest.mark.parametrize("name", ["mk_stage48", "mk_ring2"])
def test_a_staged_and_a_ring_row_build_with_the_flag_at_0(builds, name):
    """The rows as the decoder builds them (their flags, the ring's -DMK_RING): they compile, within the cap."""
    from megakernel.runtime import option_flags

    row = variant_rows()[name]
    flags = tuple(row["build_flags"]) + option_flags(row["tiles"], tuple(row["build_flags"]))
    flags += (f"-DMK_RING={row['ring_pages']}",) if row.get("ring_pages") else ()
    assert _down_pieces(row) == "0"
    assert builds(0, flags).registers() <= 128


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_default_cubin_is_the_flag_at_1(builds, mode):
    assert cubin_sha256(builds(mode, DOWN_PIECES)) == cubin_sha256(builds(mode))
    assert len({cubin_sha256(builds(mode)), cubin_sha256(builds(mode, DOWN_PLAIN)),
                cubin_sha256(builds(mode, DOWN_PIECES_CTL))}) == 3


@needs_nvcc
@pytest.mark.parametrize("flags", [(), DOWN_PIECES_CTL], ids=["default", "ctl"])
def test_the_pieces_keep_128_registers_and_no_more_spills(builds, flags):
    """The timed build (mode 0): 44 B against the plain Down's 64 (nvcc 13.0, 2026-12-02: inlined, ptxas allocates
    the kernel anew); no function but the kernel entry and the unused 8-head attention instance spills."""

    base, r = builds(0, DOWN_PLAIN), builds(0, flags)
    assert r.registers() == base.registers() == 128
    assert r.spill_bytes() <= base.spill_bytes(), r.ptxas_log
    spills = {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores", r.ptxas_log)}
    assert all(n == 0 for fn, n in spills.items() if "argus_megakernel" not in fn and "ILi8E" not in fn), r.ptxas_log
    assert builds(2, flags).registers() == 128  # the trace build (timelines) compiles within the cap too


def _branch_runs(fn: list[str]) -> list[int]:
    """Weight loads between consecutive branches of one function's SASS (runs with at least one load)."""
    from megakernel import sass_diff

    runs, n = [], 0
    for line in fn:
        if sass_diff.WEIGHT_LOAD.search(line):
            n += 1
        elif re.search(r"\bBRA\b", line):
            if n:
                runs.append(n)
            n = 0
    return runs + ([n] if n else [])


@needs_nvcc
@pytest.mark.parametrize("flags", [DOWN_PLAIN, (), DOWN_PIECES_CTL], ids=["plain", "default", "ctl"])
def test_the_sass_has_the_pieces_loop_only_under_the_flag(builds, flags):
    """The flag at 0: every weight load is in gemv_tile (the kernel entry has none; 10 calls: 5 ops x staged/plain).
    With the flag: op_down calls neither gemv_tile nor gemv_tile_staged (8 and 4 calls) and the kernel entry holds
    the inlined pieces loop, the plain loop's shape: 2-load remainder trips, a 16-load body, lane 0's odd chunk."""
    from argus_rt.tools import tool_or_none
    from megakernel import sass_diff

    if tool_or_none("nvdisasm") is None:
        pytest.skip("needs nvdisasm")
    fns = sass_diff.functions(sass_diff.disassembly(builds(0, flags).cubin))
    kernel = fns["argus_megakernel"]
    _, plain = sass_diff.find_function(fns, "gemv_tile")
    calls = (sum(sass_diff.calls(f, "gemv_tile") for f in fns.values()),
             sum(sass_diff.calls(f, "gemv_tile_staged") for f in fns.values()))
    kernel_loads = sum(1 for line in kernel if sass_diff.WEIGHT_LOAD.search(line))
    assert sorted(_branch_runs(plain)) == [2] * 7 + [16]  # gemv_rows<false>: (trips & 7) remainder, then bodies
    if flags == DOWN_PLAIN:
        assert calls == (10, 5) and kernel_loads == 0
        return
    assert calls == (8, 4)
    assert sorted(_branch_runs(kernel)) == [1] + [2] * 7 + [16] and kernel_loads == 31
