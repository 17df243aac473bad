"""Row 44 on a GPU (megakernel/NOTES.md "Ready: row 44"; build flag MK_KV_PREFETCH=1, benchmarks/decode.py
mk_kv_prefetch): attention tiles prefetch their split's K/V rows into L2 before their wait. A prefetch moves no data
the kernel reads (the loads still read global memory after the wait), so every buffer must be bit for bit the
unflagged build's: on the tiny model in one-split, 16- and 32-position launches (1- and 2-head tiles), and on full
TinyLlama at KV ~128 (one-split launches) and ~1024 (256-position splits). Run by scripts/gpu_mk_run.sh
(TEST_EXTRA=tests/test_megakernel_kv_prefetch_gpu.py)."""
import dataclasses

import pytest
import torch

from test_megakernel_fusions_gpu import SEED, TINY_TILES, _buffers, _differing_buffers, _launches_to, _same_launches
from tinyllama.config import get_config
from tinyllama.weights import random_weights

pytestmark = pytest.mark.gpu
PF = ("-DMK_KV_PREFETCH=1",)
TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20, single_split=12)


@pytest.mark.parametrize("head_parts", [1, 2], ids=["2heads", "1head"])
def test_kv_prefetch_equals_the_plain_build_tiny(head_parts):
    weights = random_weights(get_config("tiny"), seed=SEED + 97, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (6,), generator=torch.Generator().manual_seed(SEED + 98)).tolist()
    tiles = dataclasses.replace(TINY, attn_head_parts=head_parts)
    launches = [(0, 8), (8, 4), (12, 8), (20, 16), (36, 4), (40, 24)]
    states = _same_launches(weights, prompt, launches, {"plain": {"tiles": tiles},
                                                        "pf": {"tiles": tiles, "build_flags": PF}}, _buffers)
    assert _differing_buffers(states["pf"], states["plain"]) == []


@pytest.mark.parametrize("kv", [128, 1024])
def test_kv_prefetch_equals_the_plain_build_full_model(kv):
    from benchmarks.decode import variant_rows

    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 99, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(SEED + 100)).tolist()
    row = variant_rows()["mk_kv_prefetch"]
    assert row["build_flags"] == PF
    states = _same_launches(weights, prompt, _launches_to(kv), {"plain": {"tiles": row["tiles"]}, "pf": row}, _buffers)
    assert _differing_buffers(states["pf"], states["plain"]) == [], f"kv {kv}"
