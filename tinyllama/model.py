"""Plain PyTorch TinyLlama (gpt-fast style): static KV cache, one module, eager / CUDA graph / compile.

This is the reference every megakernel result is checked against, and the baseline it is timed
against. Shapes: B = batch (1 for decode), S = new tokens, D = hidden, H = heads, Hk = KV heads,
Dh = head dim, T = KV-cache capacity (``max_seq``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import LlamaConfig
from .weights import LlamaWeights


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in fp32, result cast back to x's dtype (the Hugging Face order of operations)."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (normed * weight.float()).to(x.dtype)


def rope_cos_sin(config: LlamaConfig, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [S, Dh] for integer positions [S] (fp32, "rotate half" layout)."""
    half = config.head_dim // 2
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, half, device=positions.device,
                                                        dtype=torch.float32) * 2 / config.head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]  # [S, Dh/2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, heads, S, Dh]; cos/sin: [S, Dh]."""
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


class Transformer(nn.Module):
    """TinyLlama with a static KV cache; ``forward(tokens [B, S], input_pos [S]) -> logits [B, S, V]``."""

    def __init__(self, weights: LlamaWeights, dtype: torch.dtype = torch.bfloat16, batch: int = 1):
        super().__init__()
        weights.shapes_ok()
        self.config = c = weights.config
        dev = weights.embed.device
        self.embed = nn.Parameter(weights.embed.to(dtype), requires_grad=False)
        self.lm_head = nn.Parameter(weights.lm_head.to(dtype), requires_grad=False)
        self.final_norm = nn.Parameter(weights.final_norm.to(dtype), requires_grad=False)
        self.layers = nn.ModuleList()
        for layer in weights.layers:
            m = nn.Module()
            for k, v in layer.items():
                setattr(m, k, nn.Parameter(v.to(dtype), requires_grad=False))
            self.layers.append(m)
        cache_shape = (c.n_layers, batch, c.n_kv_heads, c.max_seq, c.head_dim)
        self.register_buffer("k_cache", torch.zeros(cache_shape, dtype=dtype, device=dev), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache_shape, dtype=dtype, device=dev), persistent=False)

    def reset_cache(self) -> None:
        self.k_cache.zero_()
        self.v_cache.zero_()

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        c = self.config
        B, S = tokens.shape
        x = F.embedding(tokens, self.embed)  # [B, S, D]
        cos, sin = rope_cos_sin(c, input_pos)
        # Query s sees cache slots 0..input_pos[s]: causal and "only what is written".
        mask = torch.arange(c.max_seq, device=tokens.device)[None, :] <= input_pos[:, None]  # [S, T]
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.attn_norm, c.eps)
            qkv = F.linear(h, layer.wqkv)  # [B, S, D + 2 * kv_dim]
            q, k, v = qkv.split([c.hidden, c.kv_dim, c.kv_dim], dim=-1)
            q = q.view(B, S, c.n_heads, c.head_dim).transpose(1, 2)  # [B, H, S, Dh]
            k = k.view(B, S, c.n_kv_heads, c.head_dim).transpose(1, 2)  # [B, Hk, S, Dh]
            v = v.view(B, S, c.n_kv_heads, c.head_dim).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            self.k_cache[i].index_copy_(2, input_pos, k)
            self.v_cache[i].index_copy_(2, input_pos, v)
            keys = self.k_cache[i].repeat_interleave(c.group, dim=1)  # [B, H, T, Dh]
            values = self.v_cache[i].repeat_interleave(c.group, dim=1)
            attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [B, H, S, Dh]
            attn = attn.transpose(1, 2).reshape(B, S, c.hidden)
            x = x + F.linear(attn, layer.wo)
            h = rms_norm(x, layer.ffn_norm, c.eps)
            x = x + F.linear(F.silu(F.linear(h, layer.w_gate)) * F.linear(h, layer.w_up), layer.w_down)
        return F.linear(rms_norm(x, self.final_norm, c.eps), self.lm_head)  # [B, S, V]


class GraphedDecodeStep:
    """One decode step captured in a CUDA graph; ``__call__(token, pos) -> logits [V]`` (a view: copy it)."""

    def __init__(self, model: Transformer, compiled: bool = False, warmup: int = 3, mode: str | None = None):
        dev = model.embed.device
        if dev.type != "cuda":
            raise ValueError(f"CUDA-graph decode needs the model on a CUDA device, got {dev}")
        self.model = model
        self.tokens = torch.zeros(1, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        # inductor's default mode unless `mode` names another (one without its own CUDA graphs: the graph is ours)
        fn = torch.compile(model, fullgraph=True, mode=mode) if compiled else model
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(warmup):  # compile / autotune / cuBLAS handles stay out of the graph
                fn(self.tokens, self.pos)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.no_grad():
            self.logits = fn(self.tokens, self.pos)[0, -1]

    def __call__(self, token: int | torch.Tensor, pos: int | torch.Tensor) -> torch.Tensor:
        self.tokens.fill_(token) if isinstance(token, int) else self.tokens.copy_(token.view(1, 1))
        self.pos.fill_(pos) if isinstance(pos, int) else self.pos.copy_(pos.view(1))
        self.graph.replay()
        return self.logits
