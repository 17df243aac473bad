"""Device-side state of a megakernel decode: packed weights and every activation buffer.

The same tensors (on the GPU for the kernel, on the CPU for the reference interpreter) so that a
kernel run and an interpreter run can be compared buffer by buffer. Activations are fp32; weights
and the KV cache are bf16. Activation buffers are per layer so a later layer never overwrites what
an earlier layer's stragglers still read.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tinyllama.model import rope_cos_sin
from tinyllama.weights import LlamaWeights

from .dag import Program

WEIGHT_NAMES = ("embed", "wqkv", "wo", "wgu", "wd", "attn_norm", "ffn_norm", "final_norm", "lm_head")
BUFFER_NAMES = ("x", "x_mid", "q", "attn_part", "h", "logits", "k_cache", "v_cache", "rope_cos", "rope_sin",
                "tokens", "counters", "sample_val", "sample_idx")


def interleave_gate_up(w_gate: torch.Tensor, w_up: torch.Tensor, features: int) -> torch.Tensor:
    """[2F, D]: per tile of ``features`` outputs, its gate rows then its up rows (one contiguous tile)."""
    F, D = w_gate.shape
    g = w_gate.view(F // features, features, D)
    u = w_up.view(F // features, features, D)
    return torch.cat([g, u], dim=1).reshape(2 * F, D)


def qkv_row_order(head_dim: int, parts: int) -> list[int]:
    """Row order of one q/k head in the packed Wqkv: part p's rows are its RoPE pairs
    [p*h, (p+1)*h) then [Dh/2 + p*h, Dh/2 + (p+1)*h), h = Dh / (2 * parts); identity for 1 part."""
    h, half = head_dim // (2 * parts), head_dim // 2
    order = []
    for p in range(parts):
        order += list(range(p * h, (p + 1) * h)) + list(range(half + p * h, half + (p + 1) * h))
    return order


def pack_wqkv(wqkv: torch.Tensor, config, parts: int) -> torch.Tensor:
    """Reorder the q and k heads' rows (qkv_row_order); v rows stay in place (no RoPE)."""
    c = config
    order = torch.tensor(qkv_row_order(c.head_dim, parts))
    rows = []
    for head in range(c.n_heads + c.n_kv_heads):  # q heads, then k heads
        rows.append(head * c.head_dim + order)
    rows.append(torch.arange((c.n_heads + c.n_kv_heads) * c.head_dim, wqkv.shape[0]))
    return wqkv[torch.cat(rows).to(wqkv.device)]


def fusion_layout(config, tiles) -> dict:
    """Where the fused-sampling buffers lie in the allocation that starts with the attention partials
    (float offsets; the kernel computes the same from its parameters and the Sample instruction's wait
    count, so neither the parameter block nor a build flag carries them): the Logits tiles' best values
    [sample] and their indices [sample] (int32), one per Logits tile. Always allocated (small)."""
    c = config
    parts = {"sample": c.vocab // tiles.logits_rows}
    attn = c.n_layers * c.n_heads * tiles.n_splits(c) * (c.head_dim + 2)
    # TileShape.last_combine: the combined attention outputs [n_layers, hidden] between the partials and the
    # sample pairs (megakernel.cu: attn_out_of); the default has none.
    # TileShape.single_split (row 40): the same buffer, written by the one-split launches' AttnPartial tiles.
    has_out = bool(tiles.last_combine) or bool(getattr(tiles, "single_split", 0))
    out = c.n_layers * c.hidden if has_out else 0
    lay = {"parts": parts, "attn_part": 0, "sample_val": attn + out, "sample_idx": attn + out + parts["sample"],
           "total": attn + out + 2 * parts["sample"]}
    return lay | ({"attn_out": attn} if has_out else {})


@dataclass
class DecodeState:
    """All tensors one decode needs; ``t[name]`` for any of WEIGHT_NAMES and BUFFER_NAMES (and "attn_out" with
    TileShape.last_combine or single_split)."""

    program: Program
    t: dict[str, torch.Tensor]

    @classmethod
    def create(cls, program: Program, weights: LlamaWeights, device="cpu") -> "DecodeState":
        c, tiles = program.config, program.tiles
        if weights.config != c:
            raise ValueError(f"weights are for {weights.config}, the program for {c}")

        def bf(x):
            return x.to(device=device, dtype=torch.bfloat16).contiguous()

        t = {
            "embed": bf(weights.embed),
            "wqkv": bf(torch.stack([pack_wqkv(layer["wqkv"], c, tiles.qkv_parts) for layer in weights.layers])),
            "wo": bf(torch.stack([layer["wo"] for layer in weights.layers])),
            "wgu": bf(torch.stack([interleave_gate_up(layer["w_gate"], layer["w_up"], tiles.gate_features)
                                   for layer in weights.layers])),
            "wd": bf(torch.stack([layer["w_down"] for layer in weights.layers])),
            "attn_norm": bf(torch.stack([layer["attn_norm"] for layer in weights.layers])),
            "ffn_norm": bf(torch.stack([layer["ffn_norm"] for layer in weights.layers])),
            "final_norm": bf(weights.final_norm),
            "lm_head": bf(weights.lm_head),
        }
        cos, sin = rope_cos_sin(c, torch.arange(c.max_seq))
        half = c.head_dim // 2
        f32 = dict(device=device, dtype=torch.float32)
        nan = float("nan")  # poisoned: a buffer nobody wrote shows up as NaN, never as a plausible zero
        t.update({
            "x": torch.full((c.n_layers + 1, c.hidden), nan, **f32),
            "x_mid": torch.full((c.n_layers, c.hidden), nan, **f32),
            "q": torch.full((c.n_layers, c.hidden), nan, **f32),
            "h": torch.full((c.n_layers, c.ffn), nan, **f32),
            "logits": torch.full((c.vocab,), nan, **f32),
            "k_cache": torch.zeros(c.n_layers, c.n_kv_heads, c.max_seq, c.head_dim, device=device,
                                   dtype=torch.bfloat16),
            "v_cache": torch.zeros(c.n_layers, c.n_kv_heads, c.max_seq, c.head_dim, device=device,
                                   dtype=torch.bfloat16),
            "rope_cos": cos[:, :half].contiguous().to(device),  # [T, Dh/2]: rotate-half pairs share an angle
            "rope_sin": sin[:, :half].contiguous().to(device),
            "tokens": torch.zeros(c.max_seq + 1, device=device, dtype=torch.int32),
            "counters": torch.zeros(len(program.counters), device=device, dtype=torch.int32),
        })
        # The attention partials and, after them in the same allocation, the fused sampling's
        # per-Logits-tile best (value, vocabulary index) (TileShape.fused_sample).
        lay = fusion_layout(c, tiles)
        flat = torch.full((lay["total"],), nan, **f32)
        attn_end = lay.get("attn_out", lay["sample_val"])
        t["attn_part"] = flat[:attn_end].view(c.n_layers, c.n_heads, tiles.n_splits(c), c.head_dim + 2)
        if "attn_out" in lay:  # written by each group's last-arriving AttnPartial tile (or a one-split launch's), read by O-proj
            t["attn_out"] = flat[attn_end: lay["sample_val"]].view(c.n_layers, c.hidden)
        t["sample_val"] = flat[lay["sample_val"]: lay["sample_idx"]]
        t["sample_idx"] = flat[lay["sample_idx"]:].view(torch.int32)
        t["sample_idx"].fill_(-1)
        return cls(program, t)

    def clone(self, device=None) -> "DecodeState":
        return DecodeState(self.program, {k: v.detach().to(device or v.device, copy=True) for k, v in self.t.items()})

    def set_prompt(self, tokens: list[int]) -> None:
        """Forced tokens: step s < len(tokens) decodes tokens[s]; later steps sample."""
        c = self.program.config
        if not tokens or len(tokens) > c.max_seq:
            raise ValueError(f"prompt must have 1..{c.max_seq} tokens, got {len(tokens)}")
        bad = [tok for tok in tokens if not 0 <= tok < c.vocab]
        if bad:
            raise ValueError(f"prompt tokens {bad[:5]} are outside the vocabulary [0, {c.vocab})")
        self.t["tokens"][: len(tokens)] = torch.tensor(tokens, dtype=torch.int32)

    def weight_bytes(self) -> int:
        return sum(self.t[n].numel() * self.t[n].element_size() for n in WEIGHT_NAMES)
