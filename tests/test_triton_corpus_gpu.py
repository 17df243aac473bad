"""Every signal in one query, on every Triton program we ship (issue 15, "every signal together").

One `argus query` per program with latency, async_completion_latency, instruction_mix, barrier_count
and stall_reasons. Each collection checks the kernel against its PyTorch reference first and against
the JIT (the TTGIR Argus measures is the one Triton's JIT builds for the launch), so an answered
query also says Argus measured the user's own kernel. The CPU side (tests/test_triton_corpus.py)
plans every combination of the five signals."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from argus_rt.kinds.triton.async_sites import PROBE_KINDS, discover  # noqa: E402
from argus_rt.kinds.triton.program import program_ttgir  # noqa: E402
from argus_rt.program import load_program  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = [ROOT / "examples" / "triton" / "argus_program.json", ROOT / "examples" / "triton_minimal" / "argus_program.json",
            *sorted((ROOT / "examples" / "triton_corpus").glob("*/argus_program*.json"))]
IDS = [f"{p.parent.name}{p.stem.removeprefix('argus_program')}" for p in PROGRAMS]
ALL_SIGNALS = ("latency", "async_completion_latency", "instruction_mix", "barrier_count", "stall_reasons")


def _probed_kinds(program) -> set[str]:
    """The families probed in ``program`` (TMA loads, cp.async copies, WGMMA dots with a wait in their loop)."""
    ttgir, iterations = program_ttgir(program)
    return {s.kind for s in discover(ttgir, None, iterations=iterations).sites
            if s.kind in PROBE_KINDS and s.completion.consumer_wait_line}


@pytest.mark.gpu
@pytest.mark.parametrize("path", PROGRAMS, ids=IDS)
def test_every_signal_answers_in_one_query(path, tmp_path):
    program = load_program(path)
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "argus_rt.cli", "query", str(path), "--signals", ",".join(ALL_SIGNALS),
           "--workspace", str(tmp_path / "ws"), "--json", str(out), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-1500:], proc.stderr[-1500:])
    report = json.loads(out.read_text())
    assert report["unanswered"] == [], report["unanswered"]
    by_signal = {s: [v for v in report["values"] if v["signal"] == s] for s in ALL_SIGNALS}
    lat = [v for v in by_signal["latency"] if v["metric"] == "mean"]
    assert lat and all(v["qualification"] == "observed" and v["value"] > 0 for v in lat)
    mix = by_signal["instruction_mix"]
    assert mix and all(v["qualification"] == "attributed" for v in mix)
    assert sum(v["value"] or 0 for v in mix if v["region"] and "(inclusive)" not in v["metric"]) > 0
    assert by_signal["barrier_count"] and by_signal["stall_reasons"]
    probes = by_signal["async_completion_latency"]
    kinds = _probed_kinds(program)
    if kinds:  # one derived latency per (async op, iteration) of every family, joined to the reference wait
        assert {v["join"]["kind"] for v in probes} >= kinds, ({v["join"]["kind"] for v in probes}, kinds)
        reached = [v for v in probes if v["join"].get("reached", True)]
        assert reached and all(v["qualification"] == "derived" and v["value"] > 0 for v in reached)
        assert all(0 < v["join"]["ctas"] <= v["join"]["of_ctas"] for v in reached)
        # an iteration no CTA runs (causal attention: a loop bound that depends on the program id) is
        # reported as not reached, with no value; a loop whose trips are the same in every CTA has none
        unreached = [v for v in probes if v not in reached]
        assert all(v["value"] is None and v["notes"][0].startswith("not reached") for v in unreached)
        assert not unreached or "causal" in path.name, [v["metric"] for v in unreached]
    else:  # nothing to probe: answered with no values, the other signals not lost with it
        assert probes == []
