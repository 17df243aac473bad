"""The numba kind on a GPU: ``argus query examples/numba --signals latency,instruction_mix,barrier_count``.

Every collection launches the cubin Argus built from numba's PTX and checks ``out`` against the
program's NumPy reference first (a mismatch fails the query), so an answered query also means the
kernel summed the rows right. Needs numba-cuda, nvcc, Nsight Compute and an sm_90 GPU.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "numba"
SIGNALS = "latency,instruction_mix,barrier_count"


def _values(report, signal, region=None):
    return [v for v in report["values"] if v["signal"] == signal and (region is None or v["region"] == region)]


@pytest.mark.gpu
@pytest.mark.hopper
def test_query_numba_example(tmp_path):
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pip install -e '.[numba]')")
    from argus_rt.kinds.registry import get_kind

    problem = get_kind("numba").call("environment_problem")  # e.g. numba-cuda 0.30.4 under numpy 2.5
    if problem:
        pytest.skip(problem)
    keep = Path(os.environ.get("ARGUS_TEST_ARTIFACTS", tmp_path))  # the device script keeps the reports
    out = keep / "report_numba.json"
    cmd = [sys.executable, "-m", "argus_rt.cli", "query", str(EXAMPLE), "--region", "row_reduce",
           "--signals", SIGNALS, "--workspace", str(tmp_path / "ws"), "--json", str(out),
           "--markdown", str(keep / "report_numba.md"), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["unanswered"] == [], report["unanswered"]
    for region in ("row_reduce", "row_reduce/load", "row_reduce/tree", "row_reduce/store"):
        lat = _values(report, "latency", region)
        assert lat and all(v["qualification"] == "observed" for v in lat), (region, lat)
        assert any(v["metric"] == "mean" and (v["value"] or 0) > 0 for v in lat), (region, lat)
    mix = _values(report, "instruction_mix")
    assert mix and all(v["qualification"] == "attributed" for v in mix)
    loads = {v["metric"]: v["value"] for v in mix if v["region"] == "row_reduce/load"}
    assert loads.get("LDG", 0) > 0 and loads.get("FADD", 0) > 0, loads  # the strided partial sums
    bars = {v["region"]: v["value"] for v in _values(report, "barrier_count") if v["metric"] == "BAR"}
    # 9 barriers per warp in the tree (one before it, one per level of 256 -> 1), 8 warps x 512 rows
    assert bars.get("row_reduce/tree") == 9 * 8 * 512, bars
    assert not bars.get("row_reduce/load") and not bars.get("row_reduce/store"), bars
