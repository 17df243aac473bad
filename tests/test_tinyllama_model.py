"""TinyLlama config, weights (random and HF safetensors) and the PyTorch reference (CPU, tiny config)."""
import math

import pytest
import torch
import torch.nn.functional as F

from tinyllama.config import CONFIGS, LlamaConfig, get_config
from tinyllama.model import Transformer
from tinyllama.weights import config_from_hf, load_hf_safetensors, random_weights, save_hf_safetensors


def test_tinyllama_shape_and_weight_bytes():
    c = get_config("tinyllama-1.1b")
    assert (c.n_layers, c.hidden, c.ffn, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab) == (22, 2048, 5632, 32, 4, 64, 32000)
    assert (c.rope_theta, c.eps) == (10000.0, 1e-5)
    assert abs(c.weight_count() - 1.1e9) < 0.01e9  # "1.1B"
    assert abs(c.decode_weight_bytes() - 2.07e9) < 0.01e9  # what one decode step must stream


@pytest.mark.parametrize("kwargs,msg", [
    (dict(n_heads=30), "n_heads \\* head_dim must equal hidden"),
    (dict(n_kv_heads=3), "multiple of n_kv_heads"),
    (dict(vocab=0), "vocab must be a positive int"),
])
def test_bad_configs(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        LlamaConfig(**kwargs)
    with pytest.raises(KeyError, match="valid configs: tiny, tinyllama-1.1b"):
        get_config("llama-70b")


def test_random_weights_are_seeded():
    c = get_config("tiny")
    a, b, other = random_weights(c, seed=1), random_weights(c, seed=1), random_weights(c, seed=2)
    assert torch.equal(a.layers[1]["wqkv"], b.layers[1]["wqkv"])
    assert not torch.equal(a.layers[1]["wqkv"], other.layers[1]["wqkv"])
    assert a.layers[0]["wo"].float().std().item() == pytest.approx(0.02, rel=0.1)


def test_hf_safetensors_round_trip(tmp_path):
    c = get_config("tiny")
    w = random_weights(c, seed=4)
    save_hf_safetensors(w, tmp_path / "ckpt")
    assert config_from_hf(tmp_path / "ckpt", max_seq=c.max_seq) == c
    back = load_hf_safetensors(tmp_path / "ckpt", config=c)
    for name in ("wqkv", "wo", "w_gate", "w_up", "w_down", "attn_norm", "ffn_norm"):
        assert torch.equal(back.layers[1][name], w.layers[1][name]), name
    assert torch.equal(back.lm_head, w.lm_head) and torch.equal(back.embed, w.embed)
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        load_hf_safetensors(tmp_path, config=c)


def _naive_logits(w, tokens):
    """Independent fp32 reference: explicit loops over positions and heads, no KV cache."""
    c = w.config
    x = w.embed.float()[tokens]  # [S, D]
    S = len(tokens)
    half = c.head_dim // 2
    inv = 1.0 / (c.rope_theta ** (torch.arange(half, dtype=torch.float64) * 2 / c.head_dim))

    def rope(v, pos):  # v: [Dh]
        ang = pos * inv
        cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
        a, b = v[:half], v[half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin])

    def norm(v, g):
        return v / torch.sqrt((v * v).mean(-1, keepdim=True) + c.eps) * g.float()

    for layer in w.layers:
        L = {k: v.float() for k, v in layer.items()}
        h = norm(x, L["attn_norm"])
        qkv = h @ L["wqkv"].T
        out = torch.zeros(S, c.hidden)
        for head in range(c.n_heads):
            kvh = head // c.group
            q = [rope(qkv[s, head * c.head_dim:(head + 1) * c.head_dim], s) for s in range(S)]
            k = [rope(qkv[s, c.hidden + kvh * c.head_dim: c.hidden + (kvh + 1) * c.head_dim], s) for s in range(S)]
            v = qkv[:, c.hidden + c.kv_dim + kvh * c.head_dim: c.hidden + c.kv_dim + (kvh + 1) * c.head_dim]
            for s in range(S):
                scores = torch.stack([q[s] @ k[t] for t in range(s + 1)]) / math.sqrt(c.head_dim)
                out[s, head * c.head_dim:(head + 1) * c.head_dim] = torch.softmax(scores, 0) @ v[: s + 1]
        x = x + out @ L["wo"].T
        h = norm(x, L["ffn_norm"])
        x = x + (F.silu(h @ L["w_gate"].T) * (h @ L["w_up"].T)) @ L["w_down"].T
    return norm(x, w.final_norm) @ w.lm_head.float().T


def test_model_matches_naive_reference_prefill_and_decode():
    c = get_config("tiny")
    w = random_weights(c, seed=9)
    tokens = torch.randint(0, c.vocab, (7,), generator=torch.Generator().manual_seed(0))
    want = _naive_logits(w, tokens)
    model = Transformer(w, dtype=torch.float32)
    with torch.no_grad():
        prefill = model(tokens[None], torch.arange(7))[0]
        model.reset_cache()
        steps = torch.stack([model(tokens[None, s: s + 1], torch.tensor([s]))[0, -1] for s in range(7)])
    assert torch.allclose(prefill, want, rtol=1e-4, atol=1e-4)
    assert torch.allclose(steps, want, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        bf16 = Transformer(w)(tokens[None], torch.arange(7))[0].float()
    assert (bf16 - want).norm() / want.norm() < 3e-2  # bf16 activations: loose, but the same function


def test_named_configs():
    assert set(CONFIGS) == {"tinyllama-1.1b", "tiny"}
