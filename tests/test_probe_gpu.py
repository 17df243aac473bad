"""GPU: forced-wait probes of the TMA matmul change timing, not results; all 16 candidates report.

Opens with the plain PyTorch reference; fresh random fp16 inputs (never zeros); outputs poisoned
with NaN before every launch.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "triton"))

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]


@pytest.fixture(scope="module")
def inputs():
    import tma_matmul as tm
    import torch

    torch.manual_seed(1234)
    a = torch.randn(tm.M, tm.K, dtype=torch.float16, device="cuda")
    b = torch.randn(tm.N, tm.K, dtype=torch.float16, device="cuda")
    return a, b


def test_reference_kernel_matches_pytorch(inputs):
    from benchmarks.probe_batching import reference_check

    a, b = inputs
    assert reference_check(a, b) < 2e-3  # fp16 inputs, fp32 accumulation, fp16 output


def test_ttgir_roundtrip_is_bit_identical(inputs, tmp_path):
    """Compiling the reference's own TTGIR from a file (the probe path) gives the same C."""
    import tma_matmul as tm
    import torch

    from argus_rt.kinds.triton.probes import compile_ttgir

    a, b = inputs
    ref = tm.compile_reference()
    again = compile_ttgir(ref.asm["ttgir"], tmp_path, "roundtrip")
    c1 = torch.full((tm.M, tm.N), float("nan"), dtype=torch.float16, device="cuda")
    c2 = torch.full_like(c1, float("nan"))
    tm.launch(ref, a, b, c1)
    tm.launch(again, a, b, c2)
    torch.cuda.synchronize()
    assert not torch.isnan(c1).any()
    assert torch.equal(c1, c2)


def test_all_16_probes_identical_outputs_and_latencies(inputs, tmp_path):
    import tma_matmul as tm

    from argus_rt.kinds.triton.discovery import discover
    from benchmarks.probe_batching import make_pool, run_batch

    a, b = inputs
    d = discover(tm.compile_reference().asm["ttgir"], "tma_matmul/kloop", iterations=tm.ITERATIONS)
    candidates = [(f"0x{s.op_id:08x}", i) for s, i in d.candidates("tma_load")]
    assert len(candidates) == 16
    pool = make_pool(4)
    try:
        res = run_batch(candidates, a, b, pool, tmp_path, repeats=2)
    finally:
        pool.shutdown()
    assert res["mismatches"] == []
    rows = res["rows"]
    assert sorted((r["op_id"], r["iteration"]) for r in rows) == sorted(candidates)
    for r in rows:
        assert r["qualification"] == "derived"
        assert 0 < r["latency_ns"] < 1e6, r  # a 16 KiB TMA tile lands in well under a millisecond
        assert r["latency_cycles"] > 0
        assert r["reference_wait_ns"] is not None and r["reference_wait_ns"] >= 0


def test_collect_triton_probe_publishes_op_events(tmp_path):
    """The Collect-side entry point: one probe program -> argus.op_events/1, output bit-identical."""
    import tma_matmul as tm

    from argus_rt.kinds.triton.discovery import discover, program_ttgir
    from argus_rt.kinds.triton.probes import collect_triton_probe, make_forced_wait_probe
    from argus_rt.program import load_program

    base = load_program(ROOT / "examples" / "triton")
    ttgir, iterations = program_ttgir(base)
    d = discover(ttgir, None, iterations=iterations)
    site = d.site("b")
    probe = make_forced_wait_probe(ttgir, d, site.op_id, 3)
    path = tmp_path / "probe.ttgir"
    path.write_text(probe.ttgir)
    pv = base.variant_of("probe", op_id=f"0x{site.op_id:08x}", iteration=3)
    doc = collect_triton_probe(pv, path, tmp_path, repeats=2)["op_events"]
    cols = doc["columns"]
    gx, gy, gz = tm.grid()
    n = gx * gy * gz
    assert doc["format"] == "argus.op_events/1" and len(cols["issue"]) == 2 * n
    assert set(cols["op_id"]) == {f"0x{site.op_id:08x}"} and set(cols["iteration"]) == {3}
    assert all(c > i for i, c in zip(cols["issue"], cols["complete"]))
    assert all(0 <= s < 1024 for s in cols["sm"]) and len(set(cols["sm"])) > 1
