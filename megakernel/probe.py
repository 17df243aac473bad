"""One megakernel launch to measure with Nsight Compute, for any decoder configuration.

    ncu --clock-control none --launch-skip 1 --launch-count 1 --metrics dram__bytes_read.sum,... \\
        python -m megakernel.probe '{"prefetch_own": true}' [--steps 16]

Launch 1 decodes a 130-token random prompt (positions 0..129), launch 2 (the one to measure) the
next ``--steps`` steps. Random TinyLlama-1.1B weights; the decoder keywords come as JSON.
"""
from __future__ import annotations

import argparse
import json

import torch

from tinyllama.config import get_config
from tinyllama.weights import random_weights

from .dag import TileShape
from .runtime import MegakernelDecoder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kwargs", nargs="?", default="{}", help="MegakernelDecoder keywords as JSON "
                    "(tiles as a dict of TileShape fields, build_flags as a list)")
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args()
    kw = json.loads(a.kwargs)
    if "tiles" in kw:
        kw["tiles"] = TileShape(**kw["tiles"])
    if "build_flags" in kw:
        kw["build_flags"] = tuple(kw["build_flags"])
    if isinstance(kw.get("prefetch_own"), list):
        kw["prefetch_own"] = tuple(kw["prefetch_own"])
    if "prefetch_gate" in kw:  # [[op, phase, bytes or null], ...]
        kw["prefetch_gate"] = tuple(tuple(g) for g in kw["prefetch_gate"])
    c = get_config("tinyllama-1.1b", max_seq=1024)
    dec = MegakernelDecoder(random_weights(c, seed=0, device="cuda"), **kw)
    prompt = torch.randint(0, c.vocab, (130,), generator=torch.Generator().manual_seed(0)).tolist()
    dec.set_prompt(prompt)
    dec.run(0, 130)
    ns = dec.run(130, a.steps)
    print(f"probe {kw}: {a.steps} steps, median device step {sorted(ns)[len(ns) // 2] / 1e6:.3f} ms")


if __name__ == "__main__":
    main()
