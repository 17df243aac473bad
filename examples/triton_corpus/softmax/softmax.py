"""Row softmax, one program per row: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).

fp16 in and out, fp32 math; ``tl.max`` and ``tl.sum`` reduce over the row (``tt.reduce`` in TTGIR,
printed in MLIR's generic form). A row of ``N_COLS`` <= ``BLOCK`` columns is one load.

Regions::

    softmax              the whole kernel
    softmax/load         the row load
    softmax/normalize    max, exp, sum, divide
    softmax/store        the row store
"""
from __future__ import annotations

import triton
import triton.language as tl

from argus_rt import triton_regions as argus
from argus_rt.kinds.triton.program import module_compiler

N_ROWS, N_COLS = 4096, 1000
BLOCK = 1024
NUM_WARPS, NUM_STAGES = 4, 1
ITERATIONS = 1  # no loop: one logical iteration


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    argus.begin("softmax")
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    argus.begin("softmax/load")
    x = tl.load(x_ptr + row * stride + cols, mask=inside, other=-float("inf")).to(tl.float32)
    argus.end("softmax/load")
    argus.begin("softmax/normalize")
    shifted = x - tl.max(x, axis=0)
    e = tl.exp(shifted)
    y = e / tl.sum(e, axis=0)
    argus.end("softmax/normalize")
    argus.begin("softmax/store")
    tl.store(y_ptr + row * stride + cols, y.to(tl.float16), mask=inside)
    argus.end("softmax/store")
    argus.end("softmax")


# The JIT's kernel for the launch in argus_program.json (built on the CPU, no GPU needed).
compile_reference = module_compiler(__file__, NUM_STAGES)


def grid() -> tuple[int, int, int]:
    return (N_ROWS, 1, 1)


def make_inputs(seed: int | None = None) -> dict:
    """Fresh random x [N_ROWS, N_COLS] fp16 on the GPU and an output y (poisoned by :func:`run`)."""
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed) if seed is not None else gen.seed()
    x = torch.randn(N_ROWS, N_COLS, dtype=torch.float16, device="cuda", generator=gen) * 4
    return {"x": x, "y": torch.empty_like(x)}


def run(compiled, inputs: dict, probe_out=None):
    """Poison y with NaN, launch (kernel arguments, then the instrumentation buffer if any), check y."""
    import torch

    x, y = inputs["x"], inputs["y"]
    y.fill_(float("nan"))
    args = [x, y, x.shape[1], x.stride(0)] + ([probe_out] if probe_out is not None else [])
    compiled[grid()](*args)
    torch.cuda.synchronize()
    if torch.isnan(y).any():
        raise RuntimeError("softmax left unwritten (NaN) elements in y")
    return y


def reference(x):
    """Plain PyTorch: softmax over the last dimension in fp32, rounded to fp16."""
    import torch

    return torch.softmax(x.float(), dim=-1).half()
