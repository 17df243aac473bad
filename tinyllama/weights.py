"""TinyLlama weights: a seeded random init (no network) or a local Hugging Face safetensors directory.

Layout (row-major, ``out x in`` like ``nn.Linear``): ``wqkv`` stacks q, k, v projections
([hidden + 2 * kv_dim, hidden]); q and k rows follow the Hugging Face "rotate half" RoPE convention.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from argus_rt.fsutil import atomic_write_text

from .config import LlamaConfig

LAYER_TENSORS = ("wqkv", "wo", "w_gate", "w_up", "w_down", "attn_norm", "ffn_norm")


@dataclass
class LlamaWeights:
    """All weights of one model, on one device, in one dtype."""

    config: LlamaConfig
    embed: torch.Tensor  # [vocab, hidden]
    layers: list[dict[str, torch.Tensor]]  # LAYER_TENSORS per layer
    final_norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [vocab, hidden]

    def to(self, device=None, dtype=None) -> "LlamaWeights":
        def cv(t):
            return t.to(device=device, dtype=dtype)

        return LlamaWeights(self.config, cv(self.embed), [{k: cv(v) for k, v in layer.items()} for layer in self.layers],
                            cv(self.final_norm), cv(self.lm_head))

    def shapes_ok(self) -> None:
        """Raise ValueError naming the first tensor whose shape does not match the config."""
        c = self.config
        expected = {"wqkv": (c.hidden + 2 * c.kv_dim, c.hidden), "wo": (c.hidden, c.hidden),
                    "w_gate": (c.ffn, c.hidden), "w_up": (c.ffn, c.hidden), "w_down": (c.hidden, c.ffn),
                    "attn_norm": (c.hidden,), "ffn_norm": (c.hidden,)}
        checks = [("embed", self.embed, (c.vocab, c.hidden)), ("final_norm", self.final_norm, (c.hidden,)),
                  ("lm_head", self.lm_head, (c.vocab, c.hidden))]
        if len(self.layers) != c.n_layers:
            raise ValueError(f"expected {c.n_layers} layers, got {len(self.layers)}")
        for i, layer in enumerate(self.layers):
            checks += [(f"layers.{i}.{k}", layer[k], shape) for k, shape in expected.items()]
        for name, tensor, shape in checks:
            if tuple(tensor.shape) != shape:
                raise ValueError(f"weight {name} has shape {tuple(tensor.shape)}, config needs {shape}")


def random_weights(config: LlamaConfig, seed: int = 0, device="cpu", dtype=torch.bfloat16) -> LlamaWeights:
    """Seeded random weights: linear layers ~ N(0, 0.02), norms ~ 1 + N(0, 0.1), embedding ~ N(0, 1)."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape, std=0.02, mean=0.0):
        return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) * std + mean).to(dtype)

    c = config
    layers = []
    for _ in range(c.n_layers):
        layers.append({
            "wqkv": normal(c.hidden + 2 * c.kv_dim, c.hidden), "wo": normal(c.hidden, c.hidden),
            "w_gate": normal(c.ffn, c.hidden), "w_up": normal(c.ffn, c.hidden), "w_down": normal(c.hidden, c.ffn),
            "attn_norm": normal(c.hidden, std=0.1, mean=1.0), "ffn_norm": normal(c.hidden, std=0.1, mean=1.0),
        })
    return LlamaWeights(c, normal(c.vocab, c.hidden, std=1.0), layers, normal(c.hidden, std=0.1, mean=1.0),
                        normal(c.vocab, c.hidden))


# Hugging Face Llama tensor names -> ours.
_HF_LAYER = {"self_attn.o_proj.weight": "wo", "mlp.gate_proj.weight": "w_gate", "mlp.up_proj.weight": "w_up",
             "mlp.down_proj.weight": "w_down", "input_layernorm.weight": "attn_norm",
             "post_attention_layernorm.weight": "ffn_norm"}


def config_from_hf(directory: str | Path, max_seq: int = 2048) -> LlamaConfig:
    """Read a Hugging Face ``config.json`` into a LlamaConfig."""
    with open(Path(directory) / "config.json", encoding="utf-8") as fh:
        hf = json.load(fh)
    heads = hf["num_attention_heads"]
    return LlamaConfig(n_layers=hf["num_hidden_layers"], hidden=hf["hidden_size"], ffn=hf["intermediate_size"],
                       n_heads=heads, n_kv_heads=hf.get("num_key_value_heads", heads),
                       head_dim=hf.get("head_dim", hf["hidden_size"] // heads), vocab=hf["vocab_size"],
                       rope_theta=float(hf.get("rope_theta", 10000.0)), eps=float(hf.get("rms_norm_eps", 1e-5)),
                       max_seq=max_seq)


def load_hf_safetensors(directory: str | Path, config: LlamaConfig | None = None, device="cpu",
                        dtype=torch.bfloat16) -> LlamaWeights:
    """Load every ``*.safetensors`` file of a local Hugging Face Llama checkpoint directory."""
    from safetensors.torch import load_file  # safe format: no pickle

    directory = Path(directory)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {directory}")
    config = config or config_from_hf(directory)
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))

    def take(name):
        if name not in tensors:
            raise KeyError(f"checkpoint {directory} lacks tensor {name!r}")
        return tensors[name].to(device=device, dtype=dtype)

    layers = []
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        layer = {ours: take(p + hf) for hf, ours in _HF_LAYER.items()}
        layer["wqkv"] = torch.cat([take(p + f"self_attn.{n}_proj.weight") for n in "qkv"], dim=0)
        layers.append(layer)
    embed = take("model.embed_tokens.weight")
    lm_head = take("lm_head.weight") if "lm_head.weight" in tensors else embed  # tied embeddings
    weights = LlamaWeights(config, embed, layers, take("model.norm.weight"), lm_head)
    weights.shapes_ok()
    return weights


def save_hf_safetensors(weights: LlamaWeights, directory: str | Path) -> None:
    """Write weights as a Hugging Face-style checkpoint (used by tests to make a tiny one)."""
    from safetensors.torch import save_file

    c = weights.config
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = {"model.embed_tokens.weight": weights.embed, "model.norm.weight": weights.final_norm,
           "lm_head.weight": weights.lm_head}
    for i, layer in enumerate(weights.layers):
        p = f"model.layers.{i}."
        q, k, v = layer["wqkv"].split([c.hidden, c.kv_dim, c.kv_dim], dim=0)
        out.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                    p + "self_attn.v_proj.weight": v})
        out.update({p + hf: layer[ours] for hf, ours in _HF_LAYER.items()})
    tmp = directory / "model.safetensors.tmp"
    save_file({k: v.contiguous() for k, v in out.items()}, str(tmp))
    os.replace(tmp, directory / "model.safetensors")  # atomic: readers never see half a file
    hf_config = {"num_hidden_layers": c.n_layers, "hidden_size": c.hidden, "intermediate_size": c.ffn,
                 "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads, "head_dim": c.head_dim,
                 "vocab_size": c.vocab, "rope_theta": c.rope_theta, "rms_norm_eps": c.eps,
                 "architectures": ["LlamaForCausalLM"]}
    atomic_write_text(directory / "config.json", json.dumps(hf_config, indent=2))
