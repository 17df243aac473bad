"""FP16 TMA matmul with Argus regions: C[M, N] = A[M, K] @ B[N, K]^T, fp32 accumulation.

The probe-batching workload: 3 pipeline stages, an 8-iteration K loop (K = 8 * BLOCK_K) and two
TMA loads per iteration (A and B tiles), so 16 (op, iteration) forced-wait probe candidates.
Tensor descriptors are made on the device (``tl.make_tensor_descriptor``) so every kernel argument
is a pointer or an integer: a TTGIR variant compiled with ``triton.compile(path)`` launches with
the same arguments (plus the probe's timestamp buffer). Triton needs a global-scratch allocator
for device-side descriptors; :func:`launch` installs one.

Regions::

    tma_matmul                 the whole kernel
    tma_matmul/kloop           the pipelined K loop
    tma_matmul/kloop/load      the two TMA loads
    tma_matmul/kloop/mma       the WGMMA
    tma_matmul/epilogue        convert and store C
"""
from __future__ import annotations

import triton
import triton.language as tl

from argus_rt import triton_regions as argus
from argus_rt.kinds.triton.program import module_compiler

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
NUM_STAGES, NUM_WARPS = 3, 4
ITERATIONS = 8
M, N, K = 2048, 2048, ITERATIONS * BLOCK_K


@triton.jit
def tma_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    argus.begin("tma_matmul")
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [K, 1], [BN, BK])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    argus.begin("tma_matmul/kloop")
    for k in range(0, K, BK):
        argus.begin("tma_matmul/kloop/load")
        a = a_desc.load([pid_m * BM, k])
        b = b_desc.load([pid_n * BN, k])
        argus.end("tma_matmul/kloop/load")
        argus.begin("tma_matmul/kloop/mma")
        acc = tl.dot(a, b.T, acc)
        argus.end("tma_matmul/kloop/mma")
    argus.end("tma_matmul/kloop")
    argus.begin("tma_matmul/epilogue")
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))
    argus.end("tma_matmul/epilogue")
    argus.end("tma_matmul")


# The JIT's kernel for the launch in argus_program.json (built on the CPU, no GPU needed).
compile_reference = module_compiler(__file__, NUM_STAGES)


def grid(m: int = M, n: int = N) -> tuple[int, int, int]:
    return (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N), 1)


def launch(compiled, a, b, c, probe_out=None) -> None:
    """Launch a compiled variant (reference or probe) on torch CUDA tensors; ``probe_out`` is the
    int64 timestamp buffer of a probe variant (4 words per CTA)."""
    import torch

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    m, kk = a.shape
    n = b.shape[0]
    args = [a, b, c, m, n, kk] + ([probe_out] if probe_out is not None else [])
    compiled[grid(m, n)](*args)


def make_inputs(seed: int | None = None) -> dict:
    """Fresh random fp16 A [M, K] and B [N, K] on the GPU (never zeros) and a C to be poisoned."""
    import torch

    gen = torch.Generator(device="cuda")
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    a = torch.randn(M, K, dtype=torch.float16, device="cuda", generator=gen)
    b = torch.randn(N, K, dtype=torch.float16, device="cuda", generator=gen)
    return {"a": a, "b": b, "c": torch.empty(M, N, dtype=torch.float16, device="cuda")}


def run(compiled, inputs: dict, probe_out=None):
    """Poison C with NaN, launch, synchronise, check every element was written; returns C."""
    import torch

    c = inputs["c"]
    c.fill_(float("nan"))
    launch(compiled, inputs["a"], inputs["b"], c, probe_out)
    torch.cuda.synchronize()
    if torch.isnan(c).any():
        raise RuntimeError("kernel left unwritten (NaN) elements in C")
    return c


def reference(a, b):
    """Plain PyTorch reference: fp32 accumulate, fp16 result."""
    return (a.float() @ b.float().T).half()
