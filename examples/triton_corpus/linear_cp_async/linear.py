"""FP32 linear layer with bias and ReLU, Y = relu(X @ W + bias), software-pipelined with cp.async.

Plain pointer loads (no TMA) in a K loop with ``num_stages=3``: Triton turns the X and W tile loads
into ``ttg.async_copy_global_to_local`` into a 3-slot shared-memory ring, commits each stage's
copies as a group and waits with ``ttg.async_wait`` before the dot (tf32 WGMMA). fp32 elements make
every copy at least 4 bytes, so this pipelines without pointer-alignment specialisation.

Regions::

    linear              the whole kernel
    linear/kloop        the pipelined K loop: loads and dot
    linear/epilogue     bias, ReLU and store
"""
from __future__ import annotations

import triton
import triton.language as tl

from argus_rt import triton_regions as argus
from argus_rt.kinds.triton.program import module_compiler

M, N, K = 2048, 1024, 1024
BM, BN, BK = 64, 64, 32
NUM_WARPS, NUM_STAGES = 4, 3
ITERATIONS = K // BK


@triton.jit
def linear_relu_kernel(x_ptr, w_ptr, bias_ptr, y_ptr, M, N, K, stride_xm, stride_wk, stride_ym,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    argus.begin("linear")
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    argus.begin("linear/kloop")
    for k0 in range(0, K, BK):
        x = tl.load(x_ptr + rm[:, None] * stride_xm + (k0 + rk)[None, :])
        w = tl.load(w_ptr + (k0 + rk)[:, None] * stride_wk + rn[None, :])
        acc = tl.dot(x, w, acc)
    argus.end("linear/kloop")
    argus.begin("linear/epilogue")
    y = tl.maximum(acc + tl.load(bias_ptr + rn)[None, :], 0.0)
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], y)
    argus.end("linear/epilogue")
    argus.end("linear")


# The JIT's kernel for the launch in argus_program.json (built on the CPU, no GPU needed).
compile_reference = module_compiler(__file__, NUM_STAGES)


def grid() -> tuple[int, int, int]:
    return (M // BM, N // BN, 1)


def make_inputs(seed: int | None = None) -> dict:
    """Fresh random x [M, K], w [K, N], bias [N] fp32 on the GPU and an output y."""
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed) if seed is not None else gen.seed()
    x = torch.randn(M, K, device="cuda", generator=gen)
    w = torch.randn(K, N, device="cuda", generator=gen) / K ** 0.5
    bias = torch.randn(N, device="cuda", generator=gen)
    return {"x": x, "w": w, "bias": bias, "y": torch.empty(M, N, device="cuda")}


def run(compiled, inputs: dict, probe_out=None):
    """Poison y with NaN, launch (kernel arguments, then the instrumentation buffer if any), check y."""
    import torch

    x, w, y = inputs["x"], inputs["w"], inputs["y"]
    y.fill_(float("nan"))
    args = [x, w, inputs["bias"], y, M, N, K, x.stride(0), w.stride(0), y.stride(0)]
    compiled[grid()](*args + ([probe_out] if probe_out is not None else []))
    torch.cuda.synchronize()
    if torch.isnan(y).any():
        raise RuntimeError("linear left unwritten (NaN) elements in y")
    return y


def reference(x, w, bias):
    """Plain PyTorch in fp32 (the kernel's tf32 dot differs by rounding only)."""
    import torch

    return torch.relu(x @ w + bias)
