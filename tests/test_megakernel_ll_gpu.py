"""Row 53 on a GPU (megakernel/NOTES.md "Ready: row 53"; csrc/megakernel/ll.cuh, -DMK_LL=1, benchmarks/decode.py
mk_ll): the residual stream's values also travel as (value, step + 1) words, and early QKV / gate/up tiles spin on
those instead of the counter. The values are the same floats, so every buffer must be bit for bit the default's: on
full TinyLlama at KV ~128 (one-split launches: the early O-proj residual) and ~1024 (two-split launches: op_oproj's);
on the tiny model, whose tiles all take the plain paths (hidden != 2048) but still write and read the words; and in a
second sequence on the same decoder, where the first one's tags are stale. Run by scripts/gpu_mk_run.sh
(TEST_EXTRA=tests/test_megakernel_ll_gpu.py)."""
import dataclasses

import pytest
import torch

from megakernel.dag import DEFAULT_TILES
from test_megakernel_fusions_gpu import (
    SEED,
    TINY_TILES,
    _assert_flag_equals_plain_tiny,
    _assert_full_model_bit_for_bit,
    _buffers,
    _decoder,
    _differing_buffers,
)
from tinyllama.config import get_config
from tinyllama.weights import random_weights

pytestmark = pytest.mark.gpu
LL = ("-DMK_LL=1",)
TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20, single_split=12, early_regs=7)


@pytest.mark.parametrize("kv", [128, 1024])
def test_ll_equals_the_default_full_model(kv):
    _assert_full_model_bit_for_bit({"tiles": DEFAULT_TILES}, {"tiles": DEFAULT_TILES, "build_flags": LL}, kv,
                                   SEED + 131, "mk_ll")


def test_ll_equals_the_default_tiny():
    _assert_flag_equals_plain_tiny(TINY, LL, SEED + 133)


def _ll_values(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(values as float32, tags) of (value, tag) words."""
    w = words.detach().cpu()
    low = (w & 0xFFFFFFFF).to(torch.int32)  # the float's bits (wraps into int32's range as the same 32 bits)
    return low.view(torch.float32), (w >> 32)


def test_ll_words_hold_the_residual_and_a_restarted_sequence_ignores_stale_tags():
    """After a run the words hold x / x_mid with the last step's tag; a second prompt on the same decoder starts from
    zeroed words (the first sequence's tags would satisfy the second's waits of the same steps) and gives what a fresh
    decoder gives."""
    weights = random_weights(get_config("tiny"), seed=SEED + 135, device="cuda")
    gen = torch.Generator().manual_seed(SEED + 136)
    first = torch.randint(0, weights.config.vocab, (6,), generator=gen).tolist()
    second = torch.randint(0, weights.config.vocab, (4,), generator=gen).tolist()
    dec = _decoder(weights, tiles=TINY, build_flags=LL)
    dec.set_prompt(first)
    dec.run(0, 24)
    for words, plain in (("x_ll", "x"), ("x_mid_ll", "x_mid")):
        values, tags = _ll_values(dec.state.t[words])
        assert torch.equal(values.view(torch.int32), dec.state.t[plain].detach().cpu().view(torch.int32)), words
        assert torch.equal(tags, torch.full_like(tags, 24)), words  # step 23's tag
    dec.set_prompt(second)
    for words in ("x_ll", "x_mid_ll"):  # a stale word of tag s + 1 would pass step s's wait before its producer wrote
        assert int(dec.state.t[words].count_nonzero()) == 0, words
    dec.run(0, 24)
    again = _buffers(dec)
    del dec
    fresh = _decoder(weights, tiles=TINY, build_flags=LL)
    fresh.set_prompt(second)
    fresh.run(0, 24)
    assert _differing_buffers(again, _buffers(fresh)) == []
