"""Row 48 on the CPU (megakernel/NOTES.md "Ready: row 48"; csrc/megakernel/early.cuh, -DMK_EARLY_REGS,
benchmarks/decode.py mk_early_*): the rows, the flag at 0 the same cubin as without it, the early tile's SASS (its 16
weight loads per lane issued before the counter poll, no call and no spill between them and their use), and the
refused combinations. GPU: tests/test_megakernel_early_gpu.py."""
import dataclasses
import re

import pytest

from benchmarks.decode import variant_rows
from megakernel.dag import DEFAULT_TILES, NOEARLY_TILES, DagError
from megakernel.runtime import option_flags
from tinyllama.config import get_config
from toolchain import (  # noqa: F401  (megakernel_builds: the fixture)
    cubin_sha256,
    default_tile_flags,
    main_spills,
    megakernel_builds,
    needs_nvcc,
    noearly_tile_flags,
    skip_without_tools,
)

ROWS = {"mk_early_q": 1, "mk_early_o": 2, "mk_early_qo": 3, "mk_early_qogd": 15}


def _flags(mask: int) -> tuple[str, ...]:
    return default_tile_flags(tiles=dataclasses.replace(DEFAULT_TILES, early_regs=mask))


def test_the_rows_and_the_default():
    rows = variant_rows()
    assert DEFAULT_TILES.early_regs == 7 and NOEARLY_TILES == dataclasses.replace(DEFAULT_TILES, early_regs=0)
    assert option_flags(DEFAULT_TILES) == ("-DMK_ONE_SPLIT=1", "-DMK_EARLY_REGS=7")
    assert rows["mk_noearly"] == {"tiles": NOEARLY_TILES}
    for name, mask in ROWS.items():
        assert rows[name] == {"tiles": dataclasses.replace(DEFAULT_TILES, early_regs=mask)}
    # rows whose flags the early build refuses keep the default before row 48; the others follow the current one
    assert rows["mk_poll2"]["tiles"] == NOEARLY_TILES and "tiles" not in rows["mk_detail"]


@pytest.mark.parametrize("mask", [16, -1, True])
def test_bad_masks_are_refused(mask):
    with pytest.raises(DagError, match="must be a mask in"):
        dataclasses.replace(DEFAULT_TILES, early_regs=mask).check(get_config("tinyllama-1.1b"))


def test_early_o_proj_needs_one_split_launches():
    with pytest.raises(ValueError, match="single_split is 0"):
        option_flags(dataclasses.replace(DEFAULT_TILES, single_split=0))


def test_early_tiles_refuse_the_gate_and_stage_paths(monkeypatch):
    from megakernel import runtime
    from tinyllama.weights import random_weights

    monkeypatch.setattr(runtime, "build", lambda *a, **k: pytest.fail("built despite bad settings"))
    weights = random_weights(get_config("tiny"), seed=0, device="cpu")
    with pytest.raises(ValueError, match="has no prefetch_gate, stage_bytes or ring_pages path"):
        runtime.MegakernelDecoder(weights, prefetch_gate=(("oproj", "qkv", None),))


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_flag_off_is_the_same_cubin(builds, mode):
    """NOEARLY_TILES' build (the default before row 48) is the one-split build, which the flag's code at 0 does not
    touch."""
    assert noearly_tile_flags() == ("-DMK_ONE_SPLIT=1",)
    assert cubin_sha256(builds(mode, noearly_tile_flags())) == \
        cubin_sha256(builds(mode, ("-DMK_ONE_SPLIT=1", "-DMK_EARLY_REGS=0")))


def _early_frames(log: str) -> list[str]:
    """ptxas's frame line of each early-path function (early_tile, early_down_tile)."""
    return re.findall(r"Function properties for \S*early_\w*tile\S*\n\s+(.*)", log)


@needs_nvcc
@pytest.mark.parametrize("mask", [1, 2, 3, 7, 15])
@pytest.mark.parametrize("mode", [0, 2])
def test_the_early_tile_has_no_stack(builds, mode, mask):
    """ptxas 2026-12-03: early_tile (and mask 15's early_down_tile) 0 bytes of stack frame (its 64 weight registers
    never spill; the trace build of mask 15 spills 4 B in one of them), 128 registers; the
    worker's own spills (mode 0: 4 / 12 B with QKV early, 20 / 44 B with O-proj alone, the default's) are no more
    than the default's before row 48 (NOEARLY_TILES) in the trace-free build."""
    r = builds(mode, _flags(mask))
    frames = _early_frames(r.ptxas_log)
    assert frames and all(f.startswith("0 bytes stack frame") for f in frames), frames
    if mode == 0:
        assert all(f == "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" for f in frames), frames
    assert r.registers() == 128 and "warning" not in r.ptxas_log.lower(), r.ptxas_log
    if mode == 0:
        stores, loads = main_spills(r.ptxas_log)
        plain_stores, plain_loads = main_spills(builds(0, noearly_tile_flags()).ptxas_log)
        assert stores <= plain_stores and loads <= plain_loads


@needs_nvcc
def test_the_weight_loads_go_out_before_the_poll(builds):
    """In early_tile: 16 non-allocating 16-byte weight loads (GEMV_ROWS x GEMV_UNROLL per lane) before the first
    acquire poll of the counter, no call, local store or barrier before the poll (the tile's address is computed
    without tile_weights' 64-bit divide) and no local memory at all; the build before row 48 has no early_tile."""
    skip_without_tools("nvdisasm")
    from megakernel.sass_diff import disassembly, functions

    fns = functions(disassembly(builds(0, _flags(15)).cubin))
    for name in ("early_tile", "early_down_tile"):  # row 48c's Down tiles: 2 x GEMV_UNROLL loads per lane
        body = next(v for k, v in fns.items() if f"{len(name)}{name}E" in k)
        poll = next(i for i, ins in enumerate(body) if ins.startswith("LDG.E.STRONG.GPU"))
        before = body[:poll]
        assert sum(ins.startswith("LDG.E.NA.128.CONSTANT") for ins in before) == 16, name
        assert not any(ins.startswith(("CALL", "STL", "BAR")) for ins in before), name
        assert not any(ins.startswith(("STL", "LDL")) for ins in body), name
    assert not any("early_tile" in k for k in functions(disassembly(builds(0, noearly_tile_flags()).cubin)))


@needs_nvcc
@pytest.mark.parametrize("flags, match", [
    (("-DMK_EARLY_REGS=16",), "MK_EARLY_REGS is a mask"),
    (("-DMK_EARLY_REGS=3", "-DMK_PF_GATE=1"), "MK_EARLY_REGS replaces the wait"),
    (("-DMK_EARLY_REGS=1", "-DMK_BATCH_QKV=1"), "without MK_BATCH_QKV"),
])
def test_bad_combinations_do_not_compile(builds, flags, match):
    from megakernel.build import BuildError

    with pytest.raises(BuildError, match=match):
        builds(0, ("-DMK_ONE_SPLIT=1",) + flags)


@needs_nvcc
def test_early_o_proj_needs_the_one_split_build(builds):
    from megakernel.build import BuildError

    with pytest.raises(BuildError, match="build it with MK_ONE_SPLIT=1"):
        builds(0, ("-DMK_EARLY_REGS=2",))
