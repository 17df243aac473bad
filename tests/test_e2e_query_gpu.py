"""End to end on a GPU: ``argus query <program> --region R --signals latency,instruction_mix,barrier_count``.

Programs: the ground-truth kernel and the CUDA example (examples/cuda/nested_regions.cu). Each program's
runner checks the kernel's output against its plain PyTorch reference before anything is measured.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SIGNALS = "latency,instruction_mix,barrier_count"




def _query(program: Path, region: str, tmp_path: Path, signals: str = SIGNALS, tag: str = "",
           exit_code: int = 0) -> dict:
    """Run `argus query` in a fresh process; it exits 1 when some signal is unanswered."""
    # ARGUS_TEST_ARTIFACTS (optional): a folder that keeps the reports (the device script sets it).
    keep = Path(os.environ.get("ARGUS_TEST_ARTIFACTS", tmp_path))
    out = keep / f"report_{program.name}{tag}.json"
    cmd = [sys.executable, "-m", "argus_rt.cli", "query", str(program), "--region", region, "--signals", signals,
           "--workspace", str(tmp_path / "ws"), "--json", str(out),
           "--markdown", str(keep / f"report_{program.name}{tag}.md"), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert proc.returncode == exit_code, proc.stderr[-2000:]
    return json.loads(out.read_text())


def _values(report, signal, region=None):
    return [v for v in report["values"] if v["signal"] == signal and (region is None or v["region"] == region)]


def _check_report(report, region, shared_regions):
    assert report["unanswered"] == [], report["unanswered"]
    lat = _values(report, "latency", region)
    assert lat and all(v["qualification"] == "observed" and (v["value"] or 0) > 0 for v in lat)
    mix = _values(report, "instruction_mix")
    assert mix and all(v["qualification"] == "attributed" for v in mix)
    ffma = {v["region"]: v for v in mix if v["metric"] == "FFMA"}
    for name in shared_regions:  # regions that call the shared helper carry its ambiguity
        assert ffma[name]["value"] > 0 and ffma[name]["ambiguity"]["entropy_nats"] > 0
    assert _values(report, "barrier_count")


@pytest.mark.gpu
def test_query_ground_truth(tmp_path):
    from argus_rt.program import load_program

    program = load_program(ROOT / "examples" / "ground_truth")  # reference.py is its plain reference
    report = _query(ROOT / "examples" / "ground_truth", "ground_truth", tmp_path)
    _check_report(report, "ground_truth", ["ground_truth/stage_a", "ground_truth/stage_b"])
    args = program.launch["args"]
    warps = 128 * 256 // 32
    bar = {v["region"]: v["value"] for v in _values(report, "barrier_count") if v["metric"] == "BAR"}
    assert bar["ground_truth/stage_b/inner"] == pytest.approx(warps * args[5]["int32"], rel=0.02)
    assert bar["ground_truth/stage_a"] == pytest.approx(0.0, abs=0.5)
    # side by side: plain -lineinfo attribution puts every barrier in ground_truth.cu and the whole
    # shared helper in gt_helper.cuh (no region identity)
    files = {(v["signal"], v["join"]["source_file"]): v["value"] for v in report["values"]
             if "source_file" in (v.get("join") or {})}
    assert files[("barrier_count", "ground_truth.cu")] == pytest.approx(bar["ground_truth/stage_b/inner"], rel=1e-6)
    assert files[("barrier_count", "gt_helper.cuh")] == 0
    assert files[("instruction_mix", "gt_helper.cuh")] > 0


@pytest.mark.gpu
def test_query_cuda_example(tmp_path):
    program = ROOT / "examples" / "cuda"
    report = _query(program, "example", tmp_path)
    _check_report(report, "example", ["example/stage_a", "example/stage_b"])


@pytest.mark.gpu
def test_query_triton_example(tmp_path):
    """The Triton TMA matmul: latency from the region-traced TTGIR variant (observed, per CTA; the
    collect checks C against the PyTorch reference first and every traced launch must reproduce it
    bit for bit), instruction mix and barriers attributed through the marker-only build's PC map."""
    report = _query(ROOT / "examples" / "triton", "tma_matmul", tmp_path)
    assert report["unanswered"] == [], report["unanswered"]
    regions = ["tma_matmul", "tma_matmul/kloop", "tma_matmul/kloop/load", "tma_matmul/kloop/mma",
               "tma_matmul/epilogue"]
    ctas = 16 * 16
    for name in regions:
        lat = {v["metric"]: v for v in _values(report, "latency", name)}
        assert lat and all(v["qualification"] == "observed" for v in lat.values()), name
        assert lat["mean"]["value"] > 0, (name, lat["mean"])
        per_cta = 8 if name.startswith("tma_matmul/kloop/") else 1
        n = lat["count"]["value"]  # one occurrence per CTA (per trip in the K loop) per timed launch
        assert n > 0 and n % (ctas * per_cta) == 0, (name, lat["count"])
    mean = {v["region"]: v["value"] for v in _values(report, "latency") if v["metric"] == "mean"}
    assert mean["tma_matmul"] >= mean["tma_matmul/kloop"] >= mean["tma_matmul/kloop/mma"]
    mix = {(v["region"], v["metric"]): v["value"] for v in _values(report, "instruction_mix")}
    assert mix[("tma_matmul/kloop/mma", "HGMMA")] > 0
    assert mix.get(("tma_matmul/epilogue", "HGMMA"), 0) == 0


@pytest.mark.gpu
@pytest.mark.hopper
def test_query_triton_async_completion_latency(tmp_path):
    """`argus query examples/triton --region tma_matmul/kloop --signals async_completion_latency`: discovery
    expands 24 forced-wait probes (2 TMA loads and the WGMMA dot x 8 K iterations); every probe launch must reproduce the
    reference kernel's output bit for bit (checked in the collect, after the reference is checked
    against PyTorch by the module's run()); each (op, iteration) gets a derived latency joined to the
    traced reference's consumer wait of the same iteration."""
    report = _query(ROOT / "examples" / "triton", "tma_matmul/kloop", tmp_path,
                    signals="async_completion_latency", tag="_async")
    assert report["unanswered"] == [], report["unanswered"]
    values = _values(report, "async_completion_latency")
    keys = {(v["join"]["op_id"], v["join"]["iteration"]) for v in values}
    assert len(values) == 24 and len(keys) == 24 and {it for _, it in keys} == set(range(8))
    assert sorted({v["join"]["kind"] for v in values}) == ["tma_load", "wgmma"]
    assert all(v["qualification"] == "derived" and v["value"] > 0 for v in values)
    assert all(v["join"]["reference_wait_ns"] is not None and v["join"]["reference_wait_ns"] >= 0 for v in values)
