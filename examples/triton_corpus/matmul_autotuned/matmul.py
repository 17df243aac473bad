"""FP16 matmul C[M, N] = A[M, K] @ B[K, N] with grouped program ordering and pointer-arithmetic
loads (no TMA), under ``@triton.autotune`` over four configs.

Grouped ordering: programs walk ``GROUP_M`` row blocks of C column by column, so consecutive
programs reuse the same B columns from L2. Loads are plain ``tl.load`` of pointer tensors that
advance by ``BK`` each K step, masked at the K edge.

Argus measures one compiled kernel, so the program names one config: ``argus_program.json``'s
``"config": 0`` is :data:`CHOSEN`; Argus passes its ``all_kwargs()`` as the autotuner passes the
config it picked. A launch that names none of the configs is refused, listing them.

Regions::

    matmul               the whole kernel
    matmul/kloop         the K loop
    matmul/kloop/load    the A and B tile loads
    matmul/kloop/mma     the tl.dot
    matmul/epilogue      convert and store C
"""
from __future__ import annotations

import triton
import triton.language as tl

from argus_rt import triton_regions as argus

M, N, K = 2048, 2048, 1024
CONFIGS = [
    triton.Config({"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BM": 128, "BN": 64, "BK": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BM": 64, "BN": 128, "BK": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BM": 64, "BN": 64, "BK": 32, "GROUP_M": 4}, num_warps=4, num_stages=5),
]
CHOSEN = CONFIGS[0]
ITERATIONS = K // CHOSEN.kwargs["BK"]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    argus.begin("matmul")
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(M, BM)
    blocks_n = tl.cdiv(N, BN)
    per_group = GROUP_M * blocks_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(blocks_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    argus.begin("matmul/kloop")
    for k in range(0, tl.cdiv(K, BK)):
        argus.begin("matmul/kloop/load")
        k_left = K - k * BK
        a = tl.load(a_tile, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_tile, mask=rk[:, None] < k_left, other=0.0)
        argus.end("matmul/kloop/load")
        argus.begin("matmul/kloop/mma")
        acc = tl.dot(a, b, acc)
        argus.end("matmul/kloop/mma")
        a_tile += BK
        b_tile += BK * stride_bk
    argus.end("matmul/kloop")
    argus.begin("matmul/epilogue")
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :], acc.to(tl.float16),
             mask=(cm[:, None] < M) & (cn[None, :] < N))
    argus.end("matmul/epilogue")
    argus.end("matmul")


def compile_reference(capability: int = 90, config: triton.Config = CHOSEN):
    """The kernel Triton's JIT builds for one autotune config of this program's launch
    (``argus_program.json`` with ``launch.config`` = that config's index), without a GPU."""
    from pathlib import Path

    from argus_rt.kinds.triton.program import compile_program_file

    return compile_program_file(Path(__file__).with_name("argus_program.json"), capability=capability,
                                config=CONFIGS.index(config))


def grid(meta: dict) -> tuple[int]:
    """One program per (BM, BN) tile of C, for whichever config was compiled (the autotuner's pick, or
    the one ``launch.config`` names): ``meta`` holds the launch's constexprs, as the JIT passes them."""
    return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)


def make_inputs(seed: int | None = None) -> dict:
    """Fresh random a [M, K], b [K, N] fp16 on the GPU and an output c."""
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed) if seed is not None else gen.seed()
    a = torch.randn(M, K, dtype=torch.float16, device="cuda", generator=gen)
    b = torch.randn(K, N, dtype=torch.float16, device="cuda", generator=gen)
    return {"a": a, "b": b, "c": torch.empty(M, N, dtype=torch.float16, device="cuda")}


def run(compiled, inputs: dict, probe_out=None):
    """Poison c with NaN, launch the compiled config (then the instrumentation buffer if any), check c."""
    import torch

    a, b, c = inputs["a"], inputs["b"], inputs["c"]
    c.fill_(float("nan"))
    args = [a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0)]
    compiled[grid](*args + ([probe_out] if probe_out is not None else []))
    torch.cuda.synchronize()
    if torch.isnan(c).any():
        raise RuntimeError("matmul left unwritten (NaN) elements in c")
    return c


def reference(a, b):
    """Plain PyTorch: fp32 accumulate, fp16 result."""
    return (a.float() @ b.float()).half()
