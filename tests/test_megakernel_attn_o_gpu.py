"""Row 51 on a GPU (megakernel/NOTES.md "Ready: row 51"; TileShape.attn_o_rows, MK_ATTN_O=1, benchmarks/decode.py
mk_attn_o): one-split launches run AttnO tiles that add each query head's share of Wo @ attn into x_mid with atomics,
so values differ from the unfused build in rounding (the order the adds land), not bit for bit. Checked: the tiny model
step by step against the interpreter (localise, rtol 5e-3) across the fused one-split launches and the split programs
after them; full TinyLlama with every token forced up to KV ~128 (fused launches) and ~1024 (the two-split programs,
whose x_mid the fused build's Down also writes): every layer's x and x_mid and the logits within relative error 2e-3
of the default decoder's, and the KV cache within 2e-2 (bf16). Run by scripts/gpu_mk_run.sh (TEST_EXTRA)."""
import dataclasses

import pytest
import torch

from megakernel.dag import DEFAULT_TILES
from megakernel.interpreter import relative_error
from test_megakernel_fusions_gpu import (
    SEED,
    TINY_TILES,
    _assert_steps_match_interpreter,
    _decoder,
    _launches_to,
    _same_launches,
)
from tinyllama.config import get_config
from tinyllama.weights import random_weights

pytestmark = pytest.mark.gpu
TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20, single_split=12, attn_o_rows=32)
ROW = dataclasses.replace(DEFAULT_TILES, attn_o_rows=256)


@pytest.mark.parametrize("rows", [32, 128])
def test_attn_o_matches_the_interpreter_tiny(rows):
    weights = random_weights(get_config("tiny"), seed=SEED + 131, device="cuda")
    dec = _decoder(weights, tiles=dataclasses.replace(TINY, attn_o_rows=rows))
    prompt = torch.randint(0, weights.config.vocab, (6,), generator=torch.Generator().manual_seed(SEED + 132)).tolist()
    _assert_steps_match_interpreter(dec, prompt, f"attn_o_rows={rows}", steps=30)


def _layer_buffers(dec) -> dict[str, torch.Tensor]:
    t = dec.state.t
    return {n: t[n].detach().float().cpu().clone() for n in ("x", "x_mid", "logits", "k_cache", "v_cache")}


@pytest.mark.parametrize("kv", [128, 1024])
def test_attn_o_is_the_default_within_rounding_full_model(kv):
    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 133, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(SEED + 134)).tolist()
    states = _same_launches(weights, prompt, _launches_to(kv), {"default": {}, "fused": {"tiles": ROW}}, _layer_buffers)
    a, b = states["fused"], states["default"]
    errors = {n: _max_row_error(a[n], b[n]) for n in ("x", "x_mid")} | {"logits": relative_error(a["logits"], b["logits"])}
    errors["kv"] = max(_max_row_error(a[n][:, :, : kv + 3], b[n][:, :, : kv + 3]) for n in ("k_cache", "v_cache"))
    assert errors["x"] < 2e-3 and errors["x_mid"] < 2e-3 and errors["logits"] < 2e-3 and errors["kv"] < 2e-2, errors


def _max_row_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest relative error of a row (last dimension) of ``a`` against ``b``'s."""
    return max(relative_error(r, f) for r, f in zip(a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])))
