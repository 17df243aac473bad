"""Row softmax annotated with Proton scopes only (``triton.profiler.language``), as a Proton user writes it.

No Argus markers: Argus reads these scopes through Proton's instrumentation mode (program kind
``proton``, :mod:`argus_rt.backends.proton`). When Proton's instrumentation is off the scopes compile
to nothing, so this is also the plain kernel. fp16 in and out, fp32 math, one program per row.

Scopes (nesting as the kernel opens them; ``regions.json`` names each by its path)::

    row                   the whole row
      load                the row load
      normalize           max, exp, sum, divide
        max               the row maximum (tt.reduce)
        sum               exp and the row sum (tt.reduce)
      store               the row store
"""
from __future__ import annotations

import triton
import triton.language as tl
import triton.profiler.language as pl

N_ROWS, N_COLS = 512, 1000
BLOCK = 1024
NUM_WARPS = 4


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    pl.enter_scope("row")
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    pl.enter_scope("load")
    x = tl.load(x_ptr + row * stride + cols, mask=inside, other=-float("inf")).to(tl.float32)
    pl.exit_scope("load")
    pl.enter_scope("normalize")
    with pl.scope("max"):
        shifted = x - tl.max(x, axis=0)
    with pl.scope("sum"):
        e = tl.exp(shifted)
        total = tl.sum(e, axis=0)
    y = e / total
    pl.exit_scope("normalize")
    pl.enter_scope("store")
    tl.store(y_ptr + row * stride + cols, y.to(tl.float16), mask=inside)
    pl.exit_scope("store")
    pl.exit_scope("row")


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
    """Poison y with NaN, launch, check every element was written. ``probe_out``: an extra buffer
    argument (Argus's region trace of the twin kernel in softmax_markers.py passes one)."""
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
