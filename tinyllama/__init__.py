"""TinyLlama-1.1B batch-1 decode: config, weights, PyTorch reference, generate CLI."""
from .config import CONFIGS, LlamaConfig, get_config

__all__ = ["LlamaConfig", "CONFIGS", "get_config"]
