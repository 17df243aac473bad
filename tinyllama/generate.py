"""Generate tokens with TinyLlama and report speed.

    python -m tinyllama.generate --backend megakernel|eager|cudagraph|compile --tokens N
        [--weights random|<HF safetensors dir>] [--prompt-len P] [--temperature T] [--seed S]

Prints tokens/s and ms/token for the decode steps after the prompt (the prompt is fed through the
same backend first). No network access: weights are a seeded random init or a local checkpoint.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from .config import get_config
from .weights import load_hf_safetensors, random_weights

BACKENDS = ("megakernel", "eager", "cudagraph", "compile")


def load_weights(spec: str, seed: int, device):
    if spec == "random":
        return random_weights(get_config("tinyllama-1.1b"), seed=seed, device=device)
    return load_hf_safetensors(spec, device=device)


def _progress(total: int):
    try:
        from rich.progress import Progress

        return Progress(transient=True)
    except ImportError:  # rich is a dependency, but a missing bar must not stop a generation
        return None


def generate_torch(backend: str, weights, prompt: list[int], n_new: int, temperature: float, seed: int):
    """Decode with the PyTorch reference; returns (tokens, seconds, decode steps timed).

    The first new token comes from the prompt pass, so n_new - 1 decode steps are timed."""
    from .model import GraphedDecodeStep, Transformer

    model = Transformer(weights)
    dev = weights.embed.device
    step = None
    if backend in ("cudagraph", "compile"):
        step = GraphedDecodeStep(model, compiled=backend == "compile")
        model.reset_cache()  # graph warm-up wrote slot 0
    gen = torch.Generator(device=dev).manual_seed(seed)
    tokens = list(prompt)
    with torch.no_grad():
        logits = model(torch.tensor([prompt], device=dev), torch.arange(len(prompt), device=dev))[0, -1]
        torch.cuda.synchronize(dev) if dev.type == "cuda" else None
        start = time.perf_counter()
        bar = _progress(n_new)
        task = bar.add_task(f"{backend} decode", total=n_new) if bar else None
        if bar:
            bar.start()
        for i in range(n_new):
            if temperature > 0:
                tok = int(torch.multinomial(torch.softmax(logits.float() / temperature, -1), 1, generator=gen))
            else:
                tok = int(torch.argmax(logits))
            tokens.append(tok)
            if i == n_new - 1:
                break
            pos = len(tokens) - 1
            if step is not None:
                logits = step(tok, pos)
            else:
                logits = model(torch.tensor([[tok]], device=dev), torch.tensor([pos], device=dev))[0, -1]
            if bar:
                bar.advance(task)
        torch.cuda.synchronize(dev) if dev.type == "cuda" else None
        if bar:
            bar.stop()
    return tokens, time.perf_counter() - start, max(n_new - 1, 0)


def generate_megakernel(weights, prompt: list[int], n_new: int, temperature: float, seed: int, chunk: int = 64):
    """Decode in the megakernel; returns (tokens, seconds, decode steps timed = n_new)."""
    from megakernel.interpreter import SamplingParams
    from megakernel.runtime import MegakernelDecoder

    dec = MegakernelDecoder(weights, sampling=SamplingParams(temperature, seed))
    dec.set_prompt(prompt)
    dec.run(0, len(prompt) - 1) if len(prompt) > 1 else None  # the prompt, minus the step that samples
    total = len(prompt) + n_new - 1
    torch.cuda.synchronize()
    start = time.perf_counter()
    bar = _progress(n_new)
    task = bar.add_task("megakernel decode", total=n_new) if bar else None
    if bar:
        bar.start()
    step = len(prompt) - 1
    while step < total:
        n = min(chunk, total - step)
        dec.run(step, n)  # one launch for n steps; raises on a kernel error
        step += n
        if bar:
            bar.advance(task, n)
    if bar:
        bar.stop()
    return dec.tokens(len(prompt) + n_new), time.perf_counter() - start, n_new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=BACKENDS, default="megakernel")
    ap.add_argument("--tokens", type=int, default=128, help="new tokens to generate")
    ap.add_argument("--weights", default="random", help="'random' (seeded) or a local HF safetensors directory")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.tokens < 1 or a.prompt_len < 1:
        ap.error(f"--tokens and --prompt-len must be >= 1, got {a.tokens}, {a.prompt_len}")
    if not torch.cuda.is_available():
        print(f"error: backend {a.backend!r} needs a CUDA GPU; torch {torch.__version__} sees none", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    weights = load_weights(a.weights, a.seed, dev)
    g = torch.Generator().manual_seed(a.seed)
    prompt = torch.randint(0, weights.config.vocab, (a.prompt_len,), generator=g).tolist()
    if a.backend == "megakernel":
        tokens, seconds, steps = generate_megakernel(weights, prompt, a.tokens, a.temperature, a.seed)
    else:
        tokens, seconds, steps = generate_torch(a.backend, weights, prompt, a.tokens, a.temperature, a.seed)
    steps = max(steps, 1)  # decode steps inside the timed window
    print(f"backend={a.backend} new_tokens={a.tokens} tokens/s={steps / seconds:.1f} "
          f"ms/token={1e3 * seconds / steps:.3f}")
    print("tokens:", tokens[len(prompt):][:32], "..." if a.tokens > 32 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
