"""Fused sampling on a GPU: the default binary (fused Sample) and benchmarks/decode.py's mk_nofsample
(TileShape(fused_sample=False): Sample over all logits), each against the reference interpreter
instruction by instruction with on-device sampling at temperature 0 and 0.8 (tiny model: 8 partials),
and the two binaries drawing the same tokens on the full model (500 partials: 2 per Sample thread).
Run by scripts/gpu_mk_run.sh with FUSION_TESTS=1.
"""
import dataclasses
import os
import time

import pytest
import torch

from megakernel.dag import TileShape
from megakernel.interpreter import SamplingParams, localise
from tinyllama.config import get_config
from tinyllama.weights import random_weights

pytestmark = pytest.mark.gpu
TINY_TILES = TileShape(o_rows=16, gate_features=16, down_rows=16, logits_rows=64, attn_split=16)
SEED = int(os.environ.get("MEGAKERNEL_TEST_SEED", time.time_ns() % 2**31))
VARIANTS = {"default": True, "nofsample": False}  # name: TileShape.fused_sample


def setup_module(module):
    print(f"megakernel fused-sample GPU tests: seed {SEED} (replay with MEGAKERNEL_TEST_SEED={SEED})")


def _decoder(weights, **kw):
    from megakernel.runtime import MegakernelDecoder

    return MegakernelDecoder(weights, **kw)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_sample_variant_matches_interpreter(name, temperature):
    weights = random_weights(get_config("tiny"), seed=SEED + 1, device="cuda")
    sampling = SamplingParams(temperature, seed=SEED % 1000)
    tiles = dataclasses.replace(TINY_TILES, fused_sample=VARIANTS[name])
    dec = _decoder(weights, tiles=tiles, sampling=sampling)
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED)).tolist()
    dec.set_prompt(prompt)
    for step in range(36):  # 3 attention splits; steps 9.. sample their next token on the device
        before = dec.state.clone()
        dec.run(step, 1)
        wrong = localise(before, dec.state, step, n_forced=len(prompt), sampling=sampling, rtol=5e-3, device="cuda")
        assert wrong is None, f"{name} step {step}: first instruction that differs from the interpreter: {wrong}"


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_fused_and_unfused_binaries_draw_the_same_tokens(temperature):
    """Both compare the same fp32 values (the logit, or logit / T + Gumbel noise of the same hash) with
    the same tie rule, so the tokens must be equal, not just close."""
    c = get_config("tinyllama-1.1b", max_seq=256)
    weights = random_weights(c, seed=SEED, device="cuda")
    sampling = SamplingParams(temperature, seed=SEED % 1000)
    prompt = torch.randint(0, c.vocab, (8,), generator=torch.Generator().manual_seed(SEED + 2)).tolist()
    out = {}
    for name, fused in VARIANTS.items():
        dec = _decoder(weights, tiles=TileShape(fused_sample=fused), sampling=sampling)
        out[name] = dec.generate(prompt, n_new=32, chunk=8)
        del dec
    assert out["default"] == out["nofsample"]
    assert out["default"][:8] == prompt
    assert len(set(out["default"][8:])) > 1 or temperature == 0.0  # sampling really draws different tokens
