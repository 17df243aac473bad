"""Model configuration: the TinyLlama-1.1B shape and a tiny shape for CPU tests."""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama-family decoder (sizes in elements, not bytes)."""

    n_layers: int = 22
    hidden: int = 2048
    ffn: int = 5632
    n_heads: int = 32
    n_kv_heads: int = 4
    head_dim: int = 64
    vocab: int = 32000
    rope_theta: float = 10000.0
    eps: float = 1e-5
    max_seq: int = 2048  # KV-cache capacity in positions

    def __post_init__(self) -> None:
        for name in ("n_layers", "hidden", "ffn", "n_heads", "n_kv_heads", "head_dim", "vocab", "max_seq"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"LlamaConfig.{name} must be a positive int, got {value!r}")
        if self.n_heads * self.head_dim != self.hidden:
            raise ValueError(
                f"n_heads * head_dim must equal hidden: {self.n_heads} * {self.head_dim} != {self.hidden}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA)."""
        return self.n_heads // self.n_kv_heads

    def weight_count(self) -> int:
        """Number of weight elements (embedding and LM head both counted)."""
        per_layer = (
            self.hidden * (self.hidden + 2 * self.kv_dim)  # wqkv
            + self.hidden * self.hidden  # wo
            + 2 * self.ffn * self.hidden  # gate, up
            + self.hidden * self.ffn  # down
            + 2 * self.hidden  # two norms
        )
        return self.n_layers * per_layer + 2 * self.vocab * self.hidden + self.hidden

    def decode_weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of weights one decode step must stream (the embedding reads one row only)."""
        return (self.weight_count() - self.vocab * self.hidden + self.hidden) * dtype_bytes


CONFIGS = {
    "tinyllama-1.1b": LlamaConfig(),
    # Small enough for the reference interpreter on a CPU; keeps GQA (group 2) and odd-ish sizes.
    "tiny": LlamaConfig(n_layers=2, hidden=128, ffn=352, n_heads=4, n_kv_heads=2, head_dim=32, vocab=512,
                        max_seq=256),
}


def get_config(name: str, **overrides) -> LlamaConfig:
    """Named config, optionally with fields replaced (``max_seq=4096``)."""
    if name not in CONFIGS:
        raise KeyError(f"unknown config {name!r}; valid configs: {', '.join(sorted(CONFIGS))}")
    return replace(CONFIGS[name], **overrides) if overrides else CONFIGS[name]
