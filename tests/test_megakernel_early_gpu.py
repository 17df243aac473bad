"""Row 48 on a GPU (megakernel/NOTES.md "Ready: row 48"; csrc/megakernel/early.cuh, -DMK_EARLY_REGS,
benchmarks/decode.py mk_early_*): QKV and one-split O-proj tiles that load their weights into registers before their
wait sum the same chunks in the same order as gemv_tile, so every buffer must be bit for bit the plain build's: on full
TinyLlama at KV ~128 (one-split launches: both early paths) and ~1024 (two-split launches: QKV early, O-proj not), and
on the tiny model, whose shapes take the plain path in the flag build (hidden != 2048). The default's bit 4 (row 48b)
also splits each gate/up tile into its first 16 rows (early) and the rest (gemv_tile). Run by scripts/gpu_mk_run.sh
(TEST_EXTRA=tests/test_megakernel_early_gpu.py)."""
import dataclasses

import pytest

from megakernel.dag import DEFAULT_TILES, NOEARLY_TILES
from test_megakernel_fusions_gpu import (
    SEED,
    TINY_TILES,
    _assert_flag_equals_plain_tiny,
    _assert_flag_row_is_its_tiles_bit_for_bit,
    _assert_full_model_bit_for_bit,
)

pytestmark = pytest.mark.gpu
TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20, single_split=12)


def test_early_tiles_equal_the_plain_build_tiny():
    """The tiny model's tiles take the plain path in an early build (hidden != 2048): the same buffers."""
    _assert_flag_equals_plain_tiny(TINY, (), SEED + 111, flag_tiles=dataclasses.replace(TINY, early_regs=15))


@pytest.mark.parametrize("mask", [3, 7, 15])
@pytest.mark.parametrize("kv", [128, 1024])
def test_early_tiles_equal_the_plain_build_full_model(mask, kv):
    """The default (early_regs=7), mk_early_qo (3, row 48 alone) and mk_early_qogd (15, row 48c) against
    NOEARLY_TILES, every buffer bit for bit."""
    early = {"tiles": dataclasses.replace(DEFAULT_TILES, early_regs=mask)}
    _assert_full_model_bit_for_bit({"tiles": NOEARLY_TILES}, early, kv, SEED + 113, f"early_regs={mask}")


@pytest.mark.parametrize("kv", [128, 1024])
def test_tail_loads_leave_every_buffer_as_the_control(kv):
    """Row 55: the default loads Down's and the early O-proj's residual input and the early QKV tile's RoPE angle
    before they are needed; mk_tail_late (MK_TAIL_LOADS=0) loads them where they are used. The same values."""
    _assert_flag_row_is_its_tiles_bit_for_bit("mk_tail_late", ("-DMK_TAIL_LOADS=0",), kv, SEED + 117)

