"""Row 43 on a GPU (megakernel/NOTES.md "Ready: row 43"; build flag MK_KV_STAGE=1, benchmarks/decode.py mk_kv_stage):
attention tiles bulk-copy the K/V rows of earlier launches into shared memory before their wait and read every row
there. The staged tile does the unstaged tile's arithmetic in the same order on the same values (only where the bytes
are read from changes), so every buffer must be bit for bit the same tiles' without the flag:
- tiny model (4 query heads, 2 KV heads, head_dim 32), 1- and 2-head tiles, one split per head (n <= 12), then 16-
  and 32-position splits: one-step launches (every row but the current one staged) localised against the interpreter,
  and multi-step launches (this launch's rows loaded after the wait) bit for bit against the unflagged build, with
  the default buffer and with a 1 KiB buffer (8 positions: longer splits take the unstaged path in the same launch);
- full TinyLlama, every token forced up to KV ~128, ~330 (launch lengths past the 304 rows the buffer holds: the
  unstaged path) and ~1024 (256-position splits), bit for bit against row 42's tiles without the flag.
Run by scripts/gpu_mk_run.sh (TEST_EXTRA=tests/test_megakernel_kv_stage_gpu.py)."""
import dataclasses

import pytest
import torch

from test_megakernel_fusions_gpu import (
    SEED,
    TINY_TILES,
    _assert_flag_equals_plain_tiny,
    _assert_flag_row_is_its_tiles_bit_for_bit,
    _assert_steps_match_interpreter,
    _decoder,
)
from tinyllama.config import get_config
from tinyllama.weights import random_weights

pytestmark = pytest.mark.gpu
KV = ("-DMK_KV_STAGE=1",)
# one split per head up to 12 positions, 16-position splits up to 20, 32-position splits above
TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20, single_split=12)


@pytest.mark.parametrize("head_parts", [1, 2], ids=["2heads", "1head"])
def test_kv_stage_matches_interpreter(head_parts):
    weights = random_weights(get_config("tiny"), seed=SEED + 91, device="cuda")
    dec = _decoder(weights, tiles=dataclasses.replace(TINY, attn_head_parts=head_parts), build_flags=KV)
    assert dec.dynamic_smem == 77824
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 92)).tolist()
    _assert_steps_match_interpreter(dec, prompt, f"mk_kv_stage hp{head_parts}")


@pytest.mark.parametrize("stage_bytes", [None, 1024], ids=["default-buffer", "8-rows"])
@pytest.mark.parametrize("head_parts", [1, 2], ids=["2heads", "1head"])
def test_kv_stage_equals_unstaged_bit_for_bit_tiny(head_parts, stage_bytes):
    flags = KV + ((f"-DMK_KV_STAGE_BYTES={stage_bytes}",) if stage_bytes else ())
    _assert_flag_equals_plain_tiny(dataclasses.replace(TINY, attn_head_parts=head_parts), flags, SEED + 93)


@pytest.mark.parametrize("kv", [128, 330, 1024])
def test_kv_stage_equals_unstaged_bit_for_bit_full_model(kv):
    _assert_flag_row_is_its_tiles_bit_for_bit("mk_kv_stage", KV, kv, SEED + 95)
