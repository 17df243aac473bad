"""Row 48 on a GPU (megakernel/NOTES.md "Ready: row 48"; csrc/megakernel/early.cuh, -DMK_EARLY_REGS,
benchmarks/decode.py mk_early_*): QKV and one-split O-proj tiles that load their weights into registers before their
wait sum the same chunks in the same order as gemv_tile, so every buffer must be bit for bit the plain build's: on full
TinyLlama at KV ~128 (one-split launches: both early paths) and ~1024 (two-split launches: QKV early, O-proj not), and
on the tiny model, whose shapes take the plain path in the flag build (hidden != 2048). The default's bit 4 (row 48b)
also splits each gate/up tile into its first 16 rows (early) and the rest (gemv_tile). Run by scripts/gpu_mk_run.sh
(TEST_EXTRA=tests/test_megakernel_early_gpu.py)."""
import dataclasses

import pytest
import torch

from megakernel.dag import DEFAULT_TILES, NOEARLY_TILES
from test_megakernel_fusions_gpu import (
    SEED,
    TINY_TILES,
    _arrivals,
    _assert_flag_equals_plain_tiny,
    _assert_flag_row_is_its_tiles_bit_for_bit,
    _assert_full_model_bit_for_bit,
    _differing_buffers,
    _launches_to,
    _named_buffers,
    _same_launches,
)
from tinyllama.config import get_config
from tinyllama.weights import random_weights

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



def _assert_long_last_is_the_default(weights, prompt, launches, base, label: str) -> None:
    """Row 57: the tiles ``base`` with last_combine="long" leave every buffer but attn_out (which only they write in
    long-split launches) bit for bit as ``base`` after the same launches (the group combine sums as the O-proj
    combine does), and their arrival counters hold the long launches' tiles."""
    long = dataclasses.replace(base, last_combine="long")
    rows = {"base": {"tiles": base}, "long": {"tiles": long}}
    states = _same_launches(weights, prompt, launches, rows, lambda dec: (_named_buffers(dec), _arrivals(dec).cpu()))
    assert _differing_buffers(states["long"][0], states["base"][0]) == [], label
    c = weights.config
    long_steps = sum(n for first, n in launches if long.combine_last_at(first + n))
    assert long_steps > 0, label
    assert (states["long"][1] == long_steps * long.splits_at(c, c.max_seq) * long.head_parts(c)).all(), label


def test_long_last_combine_equals_the_default_tiny():
    """The tiny model (the plain path: no early tiles), launches of the one-split (to 12), short (to 20) and long
    programs, of multi-step and one-step lengths."""
    weights = random_weights(get_config("tiny"), seed=SEED + 119, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (6,), generator=torch.Generator().manual_seed(SEED + 120)).tolist()
    launches = [(0, 8), (8, 4), (12, 8), (20, 16), (36, 1), (37, 27)]
    _assert_long_last_is_the_default(weights, prompt, launches, TINY, "tiny")


def test_long_last_combine_equals_the_default_full_model():
    """Full TinyLlama, 64-step launches to KV position 1026: the launches ending past 512 combine by last arrival and
    their O-proj tiles take the early path; every other buffer bit for bit the default's."""
    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 121, device="cuda")
    prompt = torch.randint(0, c.vocab, (1028,), generator=torch.Generator().manual_seed(SEED + 122)).tolist()
    _assert_long_last_is_the_default(weights, prompt, _launches_to(1024), DEFAULT_TILES, "full model kv 1024")



COMBINE_ROWS = {"mk_comb_loop": ("-DMK_COMBINE_AHEAD=0",), "mk_comb4": ("-DMK_COMBINE_AHEAD=4",),
                "mk_comb_heads": ("-DMK_COMBINE_LANES=0",)}


@pytest.mark.parametrize("row", list(COMBINE_ROWS))
def test_combine_ahead_equals_the_default_tiny(row):
    """Rows 58-59 on the tiny model: the default's O-proj combine (5 splits per chunk, the weights by 8 lanes per head)
    leaves every buffer as the loop's (mk_comb_loop), mk_comb4's and one lane per head's (mk_comb_heads) across the
    one-split, short and long launches."""
    _assert_flag_equals_plain_tiny(TINY, COMBINE_ROWS[row], SEED + 123)


@pytest.mark.parametrize("row", list(COMBINE_ROWS))
@pytest.mark.parametrize("kv", [512, 1024])
def test_combine_ahead_leaves_every_buffer_as_the_default(row, kv):
    """Rows 58-59, full TinyLlama to KV position kv + 2 (the launches past 384 combine in O-proj: 128-position splits
    to 512, 256-position splits after): the default and the row, bit for bit."""
    _assert_flag_row_is_its_tiles_bit_for_bit(row, COMBINE_ROWS[row], kv, SEED + 125)


TMA_ROWS = {"mk_tma_norm": ("-DMK_TMA_INPUT=1",), "mk_tma_in": ("-DMK_TMA_INPUT=3",), "mk_tma_all": ("-DMK_TMA_INPUT=7",)}


def test_tma_input_equals_the_default_tiny():
    """Row 60 on the tiny model (hidden != 2048: no early tile; its Down tiles take h by bulk copy in mk_tma_all): the
    flag build's buffers are the default's."""
    _assert_flag_equals_plain_tiny(TINY, TMA_ROWS["mk_tma_all"], SEED + 127)


@pytest.mark.parametrize("row", list(TMA_ROWS))
@pytest.mark.parametrize("kv", [128, 1024])
def test_tma_input_leaves_every_buffer_as_the_default(row, kv):
    """Row 60, full TinyLlama to KV position kv + 2: the early tiles' inputs by bulk copies (the norms' x and weights;
    mk_tma_in also the one-split launches' O-proj attn_out, mk_tma_all also Down's h) give the same values as the
    loads, bit for bit."""
    _assert_flag_row_is_its_tiles_bit_for_bit(row, TMA_ROWS[row], kv, SEED + 129)
