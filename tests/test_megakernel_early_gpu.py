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
    _buffers,
    _differing_buffers,
    _launches_to,
    _same_launches,
)
from tinyllama.config import get_config
from tinyllama.weights import random_weights

pytestmark = pytest.mark.gpu
TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20, single_split=12)


def test_early_tiles_equal_the_plain_build_tiny():
    """The tiny model's tiles take the plain path in an early build (hidden != 2048): the same buffers."""
    weights = random_weights(get_config("tiny"), seed=SEED + 111, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (6,), generator=torch.Generator().manual_seed(SEED + 112)).tolist()
    launches = [(0, 8), (8, 4), (12, 8), (20, 16), (36, 4), (40, 24)]
    states = _same_launches(weights, prompt, launches, {"plain": {"tiles": TINY},
                                                        "flag": {"tiles": dataclasses.replace(TINY, early_regs=15)}},
                            _buffers)
    assert _differing_buffers(states["flag"], states["plain"]) == []


@pytest.mark.parametrize("mask", [3, 7, 15])
@pytest.mark.parametrize("kv", [128, 1024])
def test_early_tiles_equal_the_plain_build_full_model(mask, kv):
    """The default (early_regs=7), mk_early_qo (3, row 48 alone) and mk_early_qogd (15, row 48c) against
    NOEARLY_TILES, every buffer bit for bit."""
    _assert_tiles_equal_bit_for_bit(dataclasses.replace(DEFAULT_TILES, early_regs=mask), NOEARLY_TILES, kv, SEED + 113)


def _assert_tiles_equal_bit_for_bit(tiles, plain_tiles, kv: int, seed: int) -> None:
    """Full TinyLlama, every token forced up to KV position kv + 2: every buffer of ``tiles`` bit for bit as of
    ``plain_tiles`` (the same launches)."""
    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=seed, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(seed + 1)).tolist()
    states = _same_launches(weights, prompt, _launches_to(kv), {"plain": {"tiles": plain_tiles}, "flag": {"tiles": tiles}},
                            _buffers)
    assert _differing_buffers(states["flag"], states["plain"]) == [], f"early_regs={tiles.early_regs} kv {kv}"
