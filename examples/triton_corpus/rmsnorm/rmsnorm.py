"""RMSNorm, one program per row, the whole row in one block: y = x / sqrt(mean(x^2) + eps) * w.

fp16 in and out; the mean of squares is one ``tl.sum`` (a ``tt.reduce`` in TTGIR). No loop.

Regions::

    rmsnorm           the whole kernel
    rmsnorm/reduce    load x, sum of squares, rsqrt
    rmsnorm/scale     load w, scale and store
"""
from __future__ import annotations

import triton
import triton.language as tl

from argus_rt import triton_regions as argus
from argus_rt.kinds.triton.program import module_compiler

N_ROWS, N_COLS = 4096, 4096
BLOCK = 4096
NUM_WARPS, NUM_STAGES = 8, 1
ITERATIONS = 1
EPS = 1e-6


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    argus.begin("rmsnorm")
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    argus.begin("rmsnorm/reduce")
    x = tl.load(x_ptr + row * stride + cols, mask=inside, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    argus.end("rmsnorm/reduce")
    argus.begin("rmsnorm/scale")
    w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (x * inv_rms * w).to(tl.float16), mask=inside)
    argus.end("rmsnorm/scale")
    argus.end("rmsnorm")


# The JIT's kernel for the launch in argus_program.json (built on the CPU, no GPU needed).
compile_reference = module_compiler(__file__, NUM_STAGES)


def grid() -> tuple[int, int, int]:
    return (N_ROWS, 1, 1)


def make_inputs(seed: int | None = None) -> dict:
    """Fresh random x [N_ROWS, N_COLS] and w [N_COLS] (fp16, GPU) and an output y."""
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed) if seed is not None else gen.seed()
    x = torch.randn(N_ROWS, N_COLS, dtype=torch.float16, device="cuda", generator=gen)
    w = torch.randn(N_COLS, dtype=torch.float16, device="cuda", generator=gen)
    return {"x": x, "w": w, "y": torch.empty_like(x)}


def run(compiled, inputs: dict, probe_out=None):
    """Poison y with NaN, launch (kernel arguments, then the instrumentation buffer if any), check y."""
    import torch

    x, y = inputs["x"], inputs["y"]
    y.fill_(float("nan"))
    args = [x, inputs["w"], y, x.shape[1], x.stride(0), EPS]
    compiled[grid()](*args + ([probe_out] if probe_out is not None else []))
    torch.cuda.synchronize()
    if torch.isnan(y).any():
        raise RuntimeError("rmsnorm left unwritten (NaN) elements in y")
    return y


def reference(x, w):
    """Plain PyTorch RMSNorm in fp32, rounded to fp16."""
    import torch

    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).half()
