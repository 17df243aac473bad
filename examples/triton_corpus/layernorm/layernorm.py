"""Layer norm over wide rows, one program per row, two passes over column blocks:
y = (x - mean) / sqrt(var + eps) * w + b.

Pass 1 accumulates sum and sum of squares block by block and reduces them with ``tl.sum``; pass 2
normalises block by block. fp16 in and out, fp32 statistics. ``ITERATIONS`` = column blocks per row.

Regions::

    layernorm             the whole kernel
    layernorm/stats       pass 1: the accumulation loop and the two tl.sum reductions
    layernorm/normalize   pass 2: the normalise-and-store loop
"""
from __future__ import annotations

import triton
import triton.language as tl

from argus_rt import triton_regions as argus
from argus_rt.kinds.triton.program import module_compiler

N_ROWS, N_COLS = 2048, 8192
BLOCK = 1024
NUM_WARPS, NUM_STAGES = 8, 1
ITERATIONS = N_COLS // BLOCK
EPS = 1e-5


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    argus.begin("layernorm")
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    argus.begin("layernorm/stats")
    total = tl.zeros([BLOCK], dtype=tl.float32)
    total_sq = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        total += x
        total_sq += x * x
    mean = tl.sum(total, axis=0) / n_cols
    var = tl.sum(total_sq, axis=0) / n_cols - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    argus.end("layernorm/stats")
    argus.begin("layernorm/normalize")
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        x = tl.load(x_row + cols, mask=inside, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=inside, other=0.0).to(tl.float32)
        tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(tl.float16), mask=inside)
    argus.end("layernorm/normalize")
    argus.end("layernorm")


# The JIT's kernel for the launch in argus_program.json (built on the CPU, no GPU needed).
compile_reference = module_compiler(__file__, NUM_STAGES)


def grid() -> tuple[int, int, int]:
    return (N_ROWS, 1, 1)


def make_inputs(seed: int | None = None) -> dict:
    """Fresh random x [N_ROWS, N_COLS], w and b [N_COLS] (fp16, GPU) and an output y."""
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed) if seed is not None else gen.seed()

    def rand(*shape):
        return torch.randn(*shape, dtype=torch.float16, device="cuda", generator=gen)

    x = rand(N_ROWS, N_COLS) + 0.5
    return {"x": x, "w": rand(N_COLS), "b": rand(N_COLS), "y": torch.empty_like(x)}


def run(compiled, inputs: dict, probe_out=None):
    """Poison y with NaN, launch (kernel arguments, then the instrumentation buffer if any), check y."""
    import torch

    x, y = inputs["x"], inputs["y"]
    y.fill_(float("nan"))
    args = [x, inputs["w"], inputs["b"], y, x.shape[1], x.stride(0), EPS]
    compiled[grid()](*args + ([probe_out] if probe_out is not None else []))
    torch.cuda.synchronize()
    if torch.isnan(y).any():
        raise RuntimeError("layernorm left unwritten (NaN) elements in y")
    return y


def reference(x, w, b):
    """Plain PyTorch layer norm in fp32, rounded to fp16."""
    import torch

    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), EPS).half()
