"""Fused attention forward, O = softmax(Q K^T * sm_scale [+ causal mask]) V, with the online softmax
in a ``@triton.jit`` helper and TMA tensor descriptors made on the device.

One program per (query block, batch*head). The helper ``_attend`` walks key/value blocks
``[lo, hi)``: it keeps a running row max ``m_i`` and row sum ``l_i`` (``tl.max``/``tl.sum``) and
rescales the accumulator. Non-causal: one call over all keys. Causal (``CAUSAL=True``): two calls,
the blocks strictly below the diagonal unmasked, then the diagonal block masked; the second loop
starts at ``start_m * BLOCK_M``, a run-time lower bound. The helper's regions therefore have one
span per call site (two when causal).

Descriptors made with ``tl.make_tensor_descriptor`` need a global-scratch allocator: :func:`run`
installs one. fp16 in and out, fp32 accumulation.

Regions::

    attention                       the whole kernel
    attention/kv_loop               the helper's key/value loop (per call site)
    attention/kv_loop/load          the K and V tile loads
    attention/kv_loop/softmax       Q K^T, masking, online softmax update
    attention/kv_loop/pv            P V accumulation
    attention/epilogue              normalise and store O
"""
from __future__ import annotations

import triton
import triton.language as tl

from argus_rt import triton_regions as argus

BATCH_HEADS, N_CTX, HEAD_DIM = 32, 1024, 64
BLOCK_M, BLOCK_N = 128, 64
NUM_WARPS, NUM_STAGES = 4, 3
ITERATIONS = N_CTX // BLOCK_N  # key blocks of a non-causal row block (the most any causal one runs)
SM_SCALE = HEAD_DIM ** -0.5


@triton.jit
def _attend(acc, m_i, l_i, q, k_desc, v_desc, kv_row0, lo, hi, offs_m, qk_scale,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    argus.begin("attention/kv_loop")
    for start_n in range(lo, hi, BLOCK_N):
        argus.begin("attention/kv_loop/load")
        k = k_desc.load([kv_row0 + start_n, 0])
        v = v_desc.load([kv_row0 + start_n, 0])
        argus.end("attention/kv_loop/load")
        argus.begin("attention/kv_loop/softmax")
        qk = tl.dot(q, k.T) * qk_scale
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, -1.0e6)
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        argus.end("attention/kv_loop/softmax")
        argus.begin("attention/kv_loop/pv")
        acc = tl.dot(p.to(tl.float16), v, acc)
        argus.end("attention/kv_loop/pv")
        m_i = m_new
    argus.end("attention/kv_loop")
    return acc, m_i, l_i


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_rows, N_CTX, sm_scale, HEAD_DIM: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    argus.begin("attention")
    start_m = tl.program_id(0)
    row0 = tl.program_id(1) * N_CTX  # first row of this batch*head in the [n_rows, HEAD_DIM] views
    q_desc = tl.make_tensor_descriptor(q_ptr, [n_rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    k_desc = tl.make_tensor_descriptor(k_ptr, [n_rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr, [n_rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    o_desc = tl.make_tensor_descriptor(o_ptr, [n_rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    q = q_desc.load([row0 + start_m * BLOCK_M, 0])
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp(x) = exp2(x * log2(e))
    if CAUSAL:
        acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_desc, v_desc, row0, 0, start_m * BLOCK_M, offs_m, qk_scale,
                                BLOCK_N, False)
        acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_desc, v_desc, row0, start_m * BLOCK_M, (start_m + 1) * BLOCK_M,
                                offs_m, qk_scale, BLOCK_N, True)
    else:
        acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_desc, v_desc, row0, 0, N_CTX, offs_m, qk_scale, BLOCK_N, False)
    argus.begin("attention/epilogue")
    o_desc.store([row0 + start_m * BLOCK_M, 0], (acc / l_i[:, None]).to(tl.float16))
    argus.end("attention/epilogue")
    argus.end("attention")


def compile_reference(capability: int = 90, num_stages: int = NUM_STAGES, causal: bool = False):
    """The kernel Triton's JIT builds for this program's launch (``argus_program.json``, or
    ``argus_program.causal.json`` with ``causal``), for ``sm_<capability>``, without a GPU."""
    from pathlib import Path

    from argus_rt.kinds.triton.program import compile_program_file

    name = "argus_program.causal.json" if causal else "argus_program.json"
    return compile_program_file(Path(__file__).with_name(name), capability=capability, num_stages=num_stages)


def grid() -> tuple[int, int, int]:
    return (N_CTX // BLOCK_M, BATCH_HEADS, 1)


def make_inputs(seed: int | None = None) -> dict:
    """Fresh random q, k, v [BATCH_HEADS, N_CTX, HEAD_DIM] fp16 on the GPU and an output o."""
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed) if seed is not None else gen.seed()

    def rand():
        return torch.randn(BATCH_HEADS, N_CTX, HEAD_DIM, dtype=torch.float16, device="cuda", generator=gen)

    q, k, v = rand(), rand(), rand()
    return {"q": q, "k": k, "v": v, "o": torch.empty_like(q)}


def run(compiled, inputs: dict, probe_out=None):
    """Poison o with NaN, launch (kernel arguments, then the instrumentation buffer if any), check o."""
    import torch

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    o = inputs["o"]
    o.fill_(float("nan"))
    args = [inputs["q"], inputs["k"], inputs["v"], o, BATCH_HEADS * N_CTX, N_CTX, SM_SCALE]
    compiled[grid()](*args + ([probe_out] if probe_out is not None else []))
    torch.cuda.synchronize()
    if torch.isnan(o).any():
        raise RuntimeError("attention left unwritten (NaN) elements in o")
    return o


def reference(q, k, v, causal: bool = False):
    """Plain PyTorch attention in fp32, rounded to fp16."""
    import torch

    s = (q.float() @ k.float().transpose(-1, -2)) * SM_SCALE
    if causal:
        s = s.masked_fill(torch.ones(N_CTX, N_CTX, device=q.device, dtype=torch.bool).tril().logical_not(),
                          float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).half()
