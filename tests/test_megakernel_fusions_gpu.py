"""The opt-in fusion variants on a GPU (benchmarks/decode.py rows mk_early, mk_onepass, mk_ssq, mk_fsample,
mk_fused_all ...): each against the reference interpreter instruction by instruction (tiny model, with
on-device sampling), and full-size logits against fp32. Run by scripts/gpu_mk_run.sh with FUSION_TESTS=1.
"""
import dataclasses
import os
import time

import pytest
import torch

from megakernel.dag import TileShape
from megakernel.interpreter import SamplingParams, localise, relative_error
from tinyllama.config import get_config
from tinyllama.weights import random_weights

pytestmark = pytest.mark.gpu
TINY_TILES = TileShape(o_rows=16, gate_features=16, down_rows=16, logits_rows=64, attn_split=16)
SEED = int(os.environ.get("MEGAKERNEL_TEST_SEED", time.time_ns() % 2**31))
EARLY, ONEPASS = "-DMK_EARLY_WEIGHTS=1", "-DMK_COMBINE_ONEPASS=1"
VARIANTS = {  # name: (tile options, build flags), as in benchmarks/decode.py
    "default": ({}, ()),  # the default binary changed too (parameter block, Embed's signature)
    "early": ({}, (EARLY,)),
    "early4": ({}, (EARLY, "-DMK_EARLY_CHUNKS=4", ONEPASS)),
    "onepass": ({}, (ONEPASS,)),
    "early_onepass": ({}, (EARLY, ONEPASS)),
    "ssq": ({"publish_ssq": True}, ()),
    "fsample": ({"fused_sample": True}, ()),
    "fused_all": ({"publish_ssq": True, "fused_sample": True}, (EARLY, ONEPASS)),
}


def setup_module(module):
    print(f"megakernel fusion GPU tests: seed {SEED} (replay with MEGAKERNEL_TEST_SEED={SEED})")


def _decoder(weights, **kw):
    from megakernel.runtime import MegakernelDecoder

    return MegakernelDecoder(weights, **kw)


# Every row greedy; the rows whose sampling code differs (or that carry it unchanged) also at temperature 0.8.
CASES = [(name, 0.0) for name in VARIANTS] + [(name, 0.8) for name in ("default", "fsample", "fused_all")]


@pytest.mark.parametrize("name,temperature", CASES)
def test_fusion_variant_matches_interpreter(name, temperature):
    weights = random_weights(get_config("tiny"), seed=SEED + 1, device="cuda")
    options, flags = VARIANTS[name]
    sampling = SamplingParams(temperature, seed=SEED % 1000)
    dec = _decoder(weights, tiles=dataclasses.replace(TINY_TILES, **options), build_flags=flags, sampling=sampling)
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED)).tolist()
    dec.set_prompt(prompt)
    for step in range(36):  # 3 attention splits; steps 9.. sample their next token on the device
        before = dec.state.clone()
        dec.run(step, 1)
        wrong = localise(before, dec.state, step, n_forced=len(prompt), sampling=sampling, rtol=5e-3, device="cuda")
        assert wrong is None, f"{name} step {step}: first instruction that differs from the interpreter: {wrong}"


@pytest.mark.parametrize("name", ["early", "fused_all"])
def test_fusion_variant_full_logits(name):
    from tinyllama.model import Transformer

    c = get_config("tinyllama-1.1b", max_seq=1024)
    weights = random_weights(c, seed=SEED, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = Transformer(weights, dtype=torch.float32)
    options, flags = VARIANTS[name]
    dec = _decoder(weights, tiles=TileShape(**options), build_flags=flags)
    prompt = torch.randint(0, c.vocab, (1024,), generator=torch.Generator().manual_seed(SEED + 2)).tolist()
    dec.set_prompt(prompt)
    first = 1024 - 8
    dec.run(0, first)
    with torch.no_grad():
        ref(torch.tensor([prompt[:first]], device="cuda"), torch.arange(first, device="cuda"))
    for step in range(first, 1024):
        dec.run(step, 1)
        with torch.no_grad():
            want = ref(torch.tensor([[prompt[step]]], device="cuda"), torch.tensor([step], device="cuda"))[0, -1]
        err = relative_error(dec.state.t["logits"], want)
        assert err <= 1e-2, f"{name} step {step}: relative error {err:.3g}"
