"""The causal program of :mod:`attention`: the same kernel compiled with ``CAUSAL=True``.

Its own module because the program protocol (``compile_reference``, ``make_inputs``, ``run``,
``reference``) carries no launch options: this module fixes them, and ``attention.py``
keeps the one kernel both programs compile. ``argus_program.causal.json`` names this module.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path


def _load_attention():
    # Loaded by path, as Argus loads program modules: the program directory is not on sys.path.
    spec = importlib.util.spec_from_file_location("argus_corpus_attention", Path(__file__).with_name("attention.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_attention = _load_attention()
attention_kernel = _attention.attention_kernel
ITERATIONS, NUM_WARPS, NUM_STAGES = _attention.ITERATIONS, _attention.NUM_WARPS, _attention.NUM_STAGES
grid, make_inputs, run = _attention.grid, _attention.make_inputs, _attention.run


def compile_reference(capability: int = 90, num_stages: int = NUM_STAGES):
    """Compile the causal kernel for ``sm_<capability>`` without a GPU."""
    return _attention.compile_reference(capability, num_stages, causal=True)


def reference(q, k, v):
    """Plain PyTorch causal attention in fp32, rounded to fp16."""
    return _attention.reference(q, k, v, causal=True)
