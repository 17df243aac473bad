"""The optimisation client's measurement on one H200, through ``argus mcp`` (no stand-ins).

One candidate (the TMA matmul's own configuration at a shape of its own: a fork with edited module
constants and launch) is measured the way every trial is: ``query`` of ``latency`` + ``kernel_time``.
The collection checks the kernel's output against the PyTorch reference before timing it; the test
then checks ``kernel_time`` against a plain PyTorch timing of the same GEMM shape (within a factor of
10 either way: a wrong unit or a time of another launch would be far outside it) and prints the
seconds the measurement took (the client's cost per measurement).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _torch_gemm_ns(m: int, n: int, k: int) -> float:
    """Median CUDA-event time of torch's fp16 A @ B^T for the shape (the reference a user would compare with)."""
    import torch

    a = torch.randn(m, k, dtype=torch.float16, device="cuda")
    b = torch.randn(n, k, dtype=torch.float16, device="cuda")
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b.T
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e6)
    return sorted(times[5:])[len(times[5:]) // 2]


@pytest.mark.gpu
@pytest.mark.hopper
def test_one_trial_measures_a_forked_tma_matmul_through_mcp(tmp_path):
    pytest.importorskip("mcp")
    import anyio

    from examples.agent_client.evaluator import McpEvaluator
    from examples.agent_client.kernels import KERNELS
    from examples.agent_client.mcp_session import argus_server

    spec = KERNELS["tma_matmul"]
    shape = spec.shapes[1]  # M = N = 4096, K = 512: not the program's own shape

    async def measure():
        async with argus_server(tmp_path / "ws") as tools:
            evaluator = McpEvaluator(spec, tools)
            t0 = time.perf_counter()
            m = await evaluator.measure(spec.start, shape)
            return m, time.perf_counter() - t0

    m, seconds = anyio.run(measure)
    assert m.failure is None, m.failure
    assert m.rel_error is not None and m.rel_error <= 1e-2  # the collection's reference check
    torch_ns = _torch_gemm_ns(shape["M"], shape["N"], shape["K"])
    print(f"kernel_time {m.time_ns:.0f} ns, torch {torch_ns:.0f} ns, one measurement {seconds:.1f} s")
    assert torch_ns / 10 < m.time_ns < torch_ns * 10
