"""The Perfetto timeline beyond region slices: forced-wait probe runs as issue -> completion slices linked by
flows, and torch.profiler's kernels of the same launches on the region trace's clock (the offset between
%globaltimer and the profiler's clock, and its uncertainty). CPU only: synthetic region traces placed
inside the kernel slices of a real torch.profiler trace (tests/fixtures/device_capture/kineto_rank0.json).

The files are checked against argus_rt/schemas/chrome_trace.schema.json and for what Perfetto's JSON
importer needs to draw them as meant (nesting per track, each flow bound to one start and one end slice
of non-zero length). Perfetto's own TraceProcessor is not used: the ``perfetto`` package downloads its
trace_processor binary at run time, which a CPU CI machine without that host cannot do.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from argus_rt.backends.systrace import parse_kineto_trace
from argus_rt.schema_check import validator
from argus_rt.trace import INTERVAL_DTYPE, Intervals, chrome_trace
from argus_rt.trace.align import (
    ClockAlignmentError,
    align_with_profiler,
    concat,
    globaltimer_offset,
    kernel_slices,
    launch_span,
)
from argus_rt.trace.anchors import TIMER_STEP_NS
from argus_rt.trace.chrome import nesting_problems
from argus_rt.trace.probe_tracks import PROBE_PID_BASE, ProbeTrackError, flow_problems, probe_events

KINETO = Path(__file__).parent / "fixtures" / "device_capture" / "kineto_rank0.json"
GEMM = "sm80_xmma_gemm"
TRUE_OFFSET = 5_158_306_000_000_000 - 123_456_789  # profiler ns - globaltimer ns, unknown to the code


def schema_errors(doc):
    return [f"{list(e.path)}: {e.message}" for e in validator("chrome_trace").iter_errors(doc)]


def launch(start: int, end: int, warps: int = 2) -> Intervals:
    """One traced launch on %globaltimer: per warp an outer region [start, end] with an inner one nested."""
    rows = np.zeros(2 * warps, dtype=INTERVAL_DTYPE)
    for w in range(warps):
        inner = (start + 100 * (w + 1), end - 50 * (w + 1))
        for k, (s, e, depth, rid) in enumerate(((start, end, 0, 0xA), (*inner, 1, 0xB))):
            r = rows[2 * w + k]
            r["sm"], r["cta"], r["warp"], r["region_id"], r["depth"] = 3, 0, w, rid, depth
            r["start"], r["end"], r["duration"], r["coord"] = s, e, e - s, 0xFFFFFFFF
            r["parent"] = -1 if depth == 0 else 2 * w
    return Intervals(rows, "ns")


@pytest.fixture(scope="module")
def profiler():
    return parse_kineto_trace(json.loads(KINETO.read_text()))


def traced_launches(profiler, margins):
    """Region traces inside the fixture's 4 GEMM kernel slices, ``margins`` ns (head, tail) inside each."""
    slices = kernel_slices(profiler, GEMM)
    assert len(slices) == 4
    return [launch(k.start_ns - TRUE_OFFSET + head, k.end_ns - TRUE_OFFSET - tail)
            for k, (head, tail) in zip(slices, margins)], slices


# ---- clock alignment ---------------------------------------------------------------------------------
def test_the_offset_interval_holds_the_true_offset_and_its_width_is_the_tightest_launch_s_slack(profiler):
    margins = [(900, 400), (300, 700), (1200, 150), (500, 500)]
    launches, slices = traced_launches(profiler, margins)
    off = globaltimer_offset([launch_span(iv) for iv in launches], slices, GEMM)
    assert off.low_ns <= TRUE_OFFSET <= off.high_ns
    # low is set by the smallest head margin (+ one timer step), high by the smallest tail margin
    assert off.low_ns == TRUE_OFFSET - min(h for h, _ in margins) - TIMER_STEP_NS
    assert off.high_ns == TRUE_OFFSET + min(t for _, t in margins)
    assert off.uncertainty_ns == (300 + TIMER_STEP_NS + 150) / 2 and off.launches == 4
    one = globaltimer_offset([launch_span(launches[0])], slices[:1], GEMM)
    assert one.uncertainty_ns == (900 + TIMER_STEP_NS + 400) / 2 > off.uncertainty_ns  # more launches narrow it


def test_the_merged_timeline_puts_every_region_inside_its_kernel_slice(profiler, tmp_path):
    launches, _ = traced_launches(profiler, [(900, 400), (300, 700), (1200, 150), (500, 500)])
    doc = chrome_trace(concat(*launches), names={0xA: "outer", 0xB: "outer/inner"})
    off = align_with_profiler(doc, [launch_span(iv) for iv in launches], profiler, GEMM)
    assert schema_errors(doc) == [] and nesting_problems(doc) == []
    assert doc["otherData"]["clock_alignment"]["offset_ns"] == off.offset_ns
    assert min(ev["ts"] for ev in doc["traceEvents"] if "ts" in ev) == 0
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "torch.profiler.kernel" and GEMM in e["name"]]
    outer = sorted((e for e in doc["traceEvents"] if e.get("name") == "outer" and e["tid"] == 0), key=lambda e: e["ts"])
    assert len(kernels) == len(outer) == 4
    slack = off.uncertainty_ns * 1e-3 + 1e-6  # us
    for k, o in zip(sorted(kernels, key=lambda e: e["ts"]), outer):
        assert k["ts"] - slack <= o["ts"] and o["ts"] + o["dur"] <= k["ts"] + k["dur"] + slack
    # the NCCL kernel and the copy come along, on their streams, in the profiler's own order
    cats = {e["cat"] for e in doc["traceEvents"] if e.get("cat", "").startswith("torch.profiler")}
    assert cats == {"torch.profiler.kernel", "torch.profiler.nccl", "torch.profiler.memcpy",
                    "torch.profiler.annotation"}
    path = tmp_path / "aligned.json"
    path.write_text(json.dumps(doc))
    assert schema_errors(json.loads(path.read_text())) == []


def test_slices_that_are_not_the_traced_launches_are_refused(profiler):
    launches, slices = traced_launches(profiler, [(100, 100)] * 4)
    spans = [launch_span(iv) for iv in launches]
    shuffled = [slices[1], slices[0], slices[2], slices[3]]  # launch 0 is not inside slice 1 at one offset
    with pytest.raises(ClockAlignmentError, match="no single offset puts every traced launch inside its kernel slice"):
        globaltimer_offset(spans, shuffled, GEMM)
    with pytest.raises(ClockAlignmentError, match=r"3 traced launch\(es\) and 4 profiled kernel slice\(s\)"):
        globaltimer_offset(spans[:3], slices, GEMM)
    with pytest.raises(ClockAlignmentError, match="no kernel slice named like 'softmax'.*sm80_xmma_gemm"):
        kernel_slices(profiler, "softmax")


def test_a_cycle_trace_cannot_be_aligned():
    iv = launch(0, 1000)
    with pytest.raises(ClockAlignmentError, match="needs a %globaltimer region trace .ns.; this one is in cycles"):
        launch_span(Intervals(iv.rows, "cycles"))


# ---- probe runs ---------------------------------------------------------------------------------------
def op_events(issue, complete, ctas=(0, 1), launches=(0, 1), op="0x0000002a", it=3):
    """argus.op_events/1 as argus_rt.kinds.triton.probes writes it: one row per (launch, recording CTA)."""
    rows = [(la, c) for la in launches for c in ctas]
    return {"format": "argus.op_events/1", "clock": "ns", "ctas": 4, "recorded": len(ctas), "launches": len(launches),
            "columns": {"op_id": [op] * len(rows), "iteration": [it] * len(rows),
                        "issue": [issue + 10_000 * la + 7 * c for la, c in rows],
                        "complete": [complete + 10_000 * la + 7 * c for la, c in rows],
                        "sm": [5 + c for _, c in rows], "cta": [c for _, c in rows], "launch": [la for la, _ in rows]}}


def test_probe_runs_are_in_flight_slices_flowing_into_their_completion():
    origin = 1_000_000
    runs = [{"doc": op_events(origin + 2_000, origin + 2_640), "label": "c-probe1", "kind": "tma_load"},
            {"doc": op_events(origin + 5_000, origin + 5_900, ctas=(2,), launches=(0,), op="0x0000002b", it=0),
             "label": "c-probe2", "kind": None}]
    doc = chrome_trace(launch(origin, origin + 20_000))
    doc["traceEvents"] += probe_events(runs, origin)
    assert schema_errors(doc) == [] and nesting_problems(doc) == [] and flow_problems(doc) == []
    slices = [e for e in doc["traceEvents"] if e.get("cat") == "argus.probe"]
    assert len(slices) == 2 * (4 + 1)
    by_flow: dict = {}
    for e in slices:
        by_flow.setdefault(e["bind_id"], {})["out" if e.get("flow_out") else "in"] = e
    assert len(by_flow) == 5
    for pair in by_flow.values():
        out, into = pair["out"], pair["in"]
        assert out["name"].endswith(" in flight") and into["name"].endswith(" complete")
        assert out["pid"] == into["pid"] >= PROBE_PID_BASE and into["tid"] == out["tid"] + 1
        assert into["ts"] == pytest.approx(out["ts"] + out["dur"])  # the flow goes from issue to completion
        assert out["dur"] * 1e3 == pytest.approx(out["args"]["latency_ns"]) and into["dur"] * 1e3 == TIMER_STEP_NS
    first = next(e for e in slices if e["pid"] == PROBE_PID_BASE and e["tid"] == 0 and e.get("flow_out"))
    assert first["name"] == "tma_load 0x0000002a@3 in flight" and first["ts"] == pytest.approx(2.0)
    assert first["args"] == {"op_id": "0x0000002a", "iteration": 3, "launch": 0, "cta": 0, "latency_ns": 640, "sm": 5}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert "probe tma_load 0x0000002a@3 (c-probe1)" in names and "probe 0x0000002b@0 (c-probe2)" in names


def test_a_zero_latency_probe_gets_no_flow_and_broken_flows_are_found():
    events = probe_events([{"doc": op_events(500, 500, ctas=(0,), launches=(0,)), "label": "p", "kind": None}], 0)
    assert [e for e in events if "bind_id" in e] == []
    doc = {"traceEvents": probe_events([{"doc": op_events(500, 900), "label": "p", "kind": None}], 0)}
    assert flow_problems(doc) == []
    ends = [e for e in doc["traceEvents"] if e.get("flow_in")]
    del ends[0]["flow_in"]
    ends[1]["ts"] = -1.0
    assert flow_problems(doc) == [
        f"flow {ends[0]['bind_id']}: slice {ends[0]['name']!r} has a bind_id but neither flow_out nor flow_in",
        f"flow {ends[0]['bind_id']}: 1 start slice(s) and 0 end slice(s), want 1 and 1",
        f"flow {ends[1]['bind_id']}: ends at -1.0 before it starts at {(500 + 10_000 * 0 + 7) * 1e-3}"]


def test_bad_probe_events_are_one_line():
    bad = op_events(900, 500, ctas=(1,), launches=(0,))
    with pytest.raises(ProbeTrackError, match=r"^probe run p: row 0 \(CTA 1\) completes at 507 ns, before its issue "
                                              r"at 907 ns$"):
        probe_events([{"doc": bad, "label": "p"}], 0)
    with pytest.raises(ProbeTrackError, match="expected argus.op_events/1 in ns, got format 'argus.facts/1'"):
        probe_events([{"doc": {"format": "argus.facts/1"}, "label": "p"}], 0)
    short = op_events(1, 2)
    short["columns"]["cta"] = [0]
    with pytest.raises(ProbeTrackError, match="column 'cta' has 1 rows, 'issue' has 4"):
        probe_events([{"doc": short, "label": "p"}], 0)


# ---- the query's probe runs -------------------------------------------------------------------------------
class _Output:
    def __init__(self, doc):
        self.doc = doc

    def read_json(self):
        return self.doc


def test_query_timeline_adds_the_probe_runs_its_async_values_cite_on_the_region_trace_s_clock():
    from argus_rt.commands.query_chrome import add_probe_tracks, probe_runs

    origin = 7_000_000
    probes = {"t-p1": op_events(origin - 3_000, origin - 2_000), "t-p2": op_events(origin + 9_000, origin + 9_500,
                                                                                   op="0x0000002b")}
    outputs = {t: {"op_events": _Output(d)} for t, d in probes.items()} | {"t-ref": {"iteration_waits": _Output({})}}
    workspace = SimpleNamespace(outputs=lambda task: outputs.get(task))

    def value(op, evidence):
        return {"signal": "async_completion_latency", "join": {"op_id": op, "kind": "cp_async"},
                "provenance": {"evidence": [{"task": t, "backend": "trace"} for t in evidence]}}

    values = [value("0x0000002a", ["t-p1"]), value("0x0000002b", ["t-p1", "t-p2"])]  # evidence accumulates
    report = SimpleNamespace(select=lambda signal: values if signal == "async_completion_latency" else [])
    runs = probe_runs(report, workspace)
    assert [(r["label"], r["kind"]) for r in runs] == [("t-p1", "cp_async"), ("t-p2", "cp_async")]
    doc = chrome_trace(launch(origin, origin + 5_000))
    add_probe_tracks(doc, report, workspace, "ns")
    assert schema_errors(doc) == [] and flow_problems(doc) == []
    # probe 1 ran 3 us before the region trace: the axis moved so that it starts at 0, origin with it
    assert doc["otherData"]["origin"] == origin - 3_000
    outer = next(e for e in doc["traceEvents"] if e.get("args", {}).get("depth") == 0)
    assert outer["ts"] == pytest.approx(3.0)
    assert doc["otherData"]["probe_runs"] == {"tasks": ["t-p1", "t-p2"], "axis": "the region trace's %globaltimer axis"}
    cycles = chrome_trace(Intervals(launch(0, 50_000).rows, "cycles"))
    add_probe_tracks(cycles, report, workspace, "cycles")  # no common clock: the probes start their own axis
    first = min(e["ts"] for e in cycles["traceEvents"] if e.get("cat") == "argus.probe")
    assert first == 0 and cycles["otherData"]["origin"] == 0 and schema_errors(cycles) == []
    assert cycles["otherData"]["probe_runs"]["axis"] == (f"their own %globaltimer axis from {origin - 3_000} ns "
                                                         "(the region trace is in cycles)")
