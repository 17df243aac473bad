"""GPU (Hopper): forced-wait probes of cp.async copies and WGMMA dots change timing, not results, and
report plausible issue-to-completion latencies (issue 20 item 4; CPU side:
``tests/test_probe_async_families.py``).

On ``linear_cp_async`` (fp32, tf32 WGMMA) and ``matmul_autotuned`` (fp16, config 0): both keep
cp.async groups (``num = 2``) and one WGMMA dot (``pendings = 1``) in flight across loop trips.
Each probe is collected through the query's own path (``collect_triton_probe``): the plain reference
runs first on fresh random inputs and is checked against PyTorch, every probe launch must reproduce
its output bit for bit (else ProbeError), and the first launch is a warm-up.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "triton_corpus"

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]

# per program and family: a prologue copy, an in-loop copy, the last copy; a dot early, mid and last
CASES = [("linear_cp_async", "x", 0), ("linear_cp_async", "w", 7), ("linear_cp_async", "x", 31),
         ("linear_cp_async", "acc", 0), ("linear_cp_async", "acc", 16), ("linear_cp_async", "acc", 31),
         ("matmul_autotuned", "a", 1), ("matmul_autotuned", "b", 9), ("matmul_autotuned", "acc", 5),
         ("matmul_autotuned", "acc", 15)]


def _base(name):
    from argus_rt.kinds.triton.async_sites import discover
    from argus_rt.kinds.triton.program import program_ttgir
    from argus_rt.program import load_program

    base = load_program(CORPUS / name / "argus_program.json")
    ttgir, iterations = program_ttgir(base)
    return base, ttgir, discover(ttgir, None, iterations=iterations)


@pytest.mark.parametrize("name,label,it", CASES)
def test_probe_output_is_bit_identical_and_latency_plausible(name, label, it, tmp_path):
    from argus_rt.kinds.triton.probes import collect_triton_probe, make_forced_wait_probe

    base, ttgir, d = _base(name)
    site = next(s for s in d.sites if s.label == label)
    probe = make_forced_wait_probe(ttgir, d, site.op_id, it)
    path = tmp_path / "probe.ttgir"
    path.write_text(probe.ttgir)
    pv = base.variant_of("probe", op_id=f"0x{site.op_id:08x}", iteration=it)
    # raises ProbeError unless every launch's output equals the reference's bit for bit
    doc = collect_triton_probe(pv, path, tmp_path, repeats=3)["op_events"]
    n = doc["ctas"]
    assert doc["recorded"] == n, doc["notes"]  # every CTA runs every trip of these K loops
    cols = {k: np.asarray(v) for k, v in doc["columns"].items()}
    assert len(cols["cta"]) == 3 * n and set(cols["iteration"].tolist()) == {it}
    ns = cols["complete"] - cols["issue"]
    cyc = cols["complete_cycles"] - cols["issue_cycles"]
    assert (ns >= 0).all() and (cyc > 0).all()
    assert 0 < ns.mean() and np.median(ns) < 1e5, (site.kind, np.median(ns))  # well under 100 us
    if site.kind == "cp_async":  # a tile from L2 or HBM: hundreds of cycles at least
        assert 200 < np.median(cyc) < 2e5, np.median(cyc)
    else:  # a 64-row warpgroup's HGMMA chain over one K step (and the previous dot still in flight)
        assert 10 < np.median(cyc) < 2e5, np.median(cyc)
    assert len(set(cols["sm"].tolist())) > 1


@pytest.mark.parametrize("name", ["linear_cp_async", "matmul_autotuned"])
def test_traced_reference_times_the_copy_and_dot_waits_of_every_trip(name, tmp_path):
    from argus_rt.kinds.triton.probes import collect_triton_reference

    base, _, d = _base(name)
    doc = collect_triton_reference(base, tmp_path, repeats=2)
    assert [lp["wait_line"] for lp in doc["loops"]] == sorted({s.completion.consumer_wait_line for s in d.sites})
    assert len(doc["loops"]) == 2  # the cp.async groups' async_wait and the dot's warp_group_dot_wait
    assert set(doc["trips"]["trips"]) == {d.iterations}  # every CTA runs every trip
    cols = {k: np.asarray(v) for k, v in doc["columns"].items()}
    assert (cols["end"] >= cols["begin"]).all() and len(cols["cta"]) == 2 * 2 * doc["ctas"] * d.iterations


def test_query_publishes_derived_latencies_for_both_families(tmp_path):
    path = CORPUS / "linear_cp_async" / "argus_program.json"
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "argus_rt.cli", "query", str(path), "--signals", "async_completion_latency",
           "--scope", "iterations=4:6", "--workspace", str(tmp_path / "ws"), "--json", str(out), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-1500:], proc.stderr[-1500:])
    report = json.loads(out.read_text())
    assert report["unanswered"] == [], report["unanswered"]
    values = [v for v in report["values"] if v["signal"] == "async_completion_latency"]
    assert sorted((v["join"]["kind"], v["join"]["iteration"]) for v in values) == sorted(
        [(k, it) for k in ("cp_async", "cp_async", "wgmma") for it in (4, 5)])
    for v in values:  # each probe its own run, joined to its own traced wait of the same trip
        assert v["qualification"] == "derived" and 0 < v["value"] < 1e5
        assert v["join"]["reached"] and v["join"]["ctas"] == v["join"]["of_ctas"]
        assert v["join"]["reference_wait_ns"] is not None and v["join"]["reference_wait_ns"] >= 0
