"""Argus runner of the TinyLlama decode megakernel (``launch.runner`` of argus_program.json).

The kernel takes one pointer to a parameter block of device pointers and runs on a cooperative grid
sized by the occupancy calculator (1 scheduler CTA + every co-resident worker), so no JSON launch can
describe it: this runner launches the cubin Argus built with megakernel's own launcher
(:class:`megakernel.runtime.MegakernelDecoder`).

One launch decodes steps [0, STEPS), each the whole per-step instruction list: the PROMPT_LEN prompt
tokens, then generated ones. That launch is the kernel's first, so ``ncu -c 1`` profiles it. When
traced, the session is armed for the generated steps only (the coordinate window), which keeps the
rings small.

Weights: TinyLlama-1.1B with fresh seeded random weights, or the local Hugging Face safetensors
checkpoint that ``$ARGUS_MEGAKERNEL_CHECKPOINT`` names. Check: the last step's logits against the
fp32 PyTorch reference (tinyllama.model.Transformer on the same tokens, on the GPU that holds the
weights), relative error at most ``launch.rtol`` (1e-2, as in tests/test_megakernel_gpu.py).

Progress: each phase (weights, decoder, launch, reference) ends with ``ctx.phase``, one line on
stderr with its wall seconds; under ``ncu`` the launch is the phase that is replayed per pass.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import torch

PROMPT_LEN = 4
STEPS = 8  # positions 0..7: 4 prompt steps, then 4 generated tokens (the traced steps)
TRACE_CAPACITY = 4096  # records per warp ring: ~57 tickets per worker and step, a few regions each
CHECKPOINT_ENV = "ARGUS_MEGAKERNEL_CHECKPOINT"
ARGUS_MODES = {"base": 0, "trace_free": 0, "marker_only": 1, "traced": 2}


def load_weights(seed: int):
    """Random TinyLlama-1.1B (seeded) or the checkpoint of $ARGUS_MEGAKERNEL_CHECKPOINT, on the GPU."""
    from tinyllama.config import get_config
    from tinyllama.weights import load_hf_safetensors, random_weights

    checkpoint = os.environ.get(CHECKPOINT_ENV)
    if checkpoint:
        return load_hf_safetensors(checkpoint, device="cuda"), f"checkpoint {checkpoint}"
    return random_weights(get_config("tinyllama-1.1b"), seed=seed, device="cuda"), f"random (seed {seed})"


@contextmanager
def _building_nothing(cubin, argus_mode: int):
    """MegakernelDecoder compiles its own cubin (megakernel/build.py); Argus must launch the variant it
    built and PC-mapped instead. The decoder has no cubin parameter, so for its construction only its
    build step hands back Argus's cubin."""
    import megakernel.runtime as runtime
    from megakernel.build import BuildResult

    real = runtime.build
    runtime.build = lambda mode, extra_flags=(): BuildResult(cubin, "", argus_mode, True)
    try:
        yield
    finally:
        runtime.build = real


def decoder_on(cubin, weights, argus_mode: int):
    from megakernel.runtime import MegakernelDecoder

    with _building_nothing(cubin, argus_mode):
        return MegakernelDecoder(weights, argus_mode=argus_mode)


def reference_logits(weights, tokens: list[int]) -> torch.Tensor:
    """fp32 PyTorch logits [vocab] of the last of ``tokens`` (positions 0..len-1)."""
    from tinyllama.model import Transformer

    device = weights.embed.device
    if device.type != "cuda":  # 1.1B parameters in fp32 on the CPU take minutes, not a second
        raise RuntimeError(f"the fp32 reference would run on {device}: the weights must be on the GPU")
    torch.backends.cuda.matmul.allow_tf32 = False  # a true fp32 reference
    ref = Transformer(weights, dtype=torch.float32)
    with torch.no_grad():
        logits = ref(torch.tensor([tokens], device=device), torch.arange(len(tokens), device=device))[0, -1]
    del ref
    return logits


def run(ctx) -> dict:
    """One checked launch of the megakernel variant ``ctx.cubin`` (see the module docstring)."""
    from megakernel.interpreter import relative_error
    from megakernel.regions import coordinate

    seed = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
    weights, source = load_weights(seed)
    phase = getattr(ctx, "phase", None) or (lambda name, then=None: None)
    phase("weights", then="decoder setup (instruction list, state, cubin load, grid)")
    dec = decoder_on(ctx.cubin, weights, ARGUS_MODES[ctx.variant])
    prompt = torch.randint(0, weights.config.vocab, (PROMPT_LEN,), generator=torch.Generator().manual_seed(seed)).tolist()
    dec.set_prompt(prompt)
    info = dec.launch_info
    session = ctx.trace_session(dec.module, ctas=info.grid, threads_per_cta=info.threads, capacity=TRACE_CAPACITY,
                                device=dec.device)
    if session is not None:
        session.arm(coord_window=(coordinate(PROMPT_LEN, 0), coordinate(STEPS, 0)))
    phase("decoder", then=f"one cooperative launch of {STEPS} steps on {info.grid} CTAs (under ncu: replayed per pass)")
    step_ns = dec.run(0, STEPS)  # the one launch of the kernel; raises MegakernelError on a kernel fault
    got = dec.state.t["logits"].clone()
    tokens = dec.tokens(STEPS)  # the step that produced the logits read token STEPS-1
    phase("launch", then="fp32 PyTorch reference of the last step's logits (GPU)")
    err = relative_error(got, reference_logits(weights, tokens))
    phase("reference")
    return {"max_rel_err": err, "weights": source, "grid": info.grid, "workers": info.workers,
            "steps": STEPS, "traced_steps": [PROMPT_LEN, STEPS] if session is not None else None,
            "median_step_ns": float(sorted(step_ns)[len(step_ns) // 2])}
