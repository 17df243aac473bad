"""System-trace parsing on a real 2xH200 torch.profiler capture, and nsys detection (CPU)."""
import json
import shutil
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from argus_rt.backends import systrace
from argus_rt.backends.base import BackendUnavailableError
from argus_rt.evidence import EvidenceError, SystemTimeline
from tests.test_evidence_types import assert_bad_metadata_refused

FIX = Path(__file__).parent / "fixtures" / "device_capture"


def _doc():
    return json.loads((FIX / "kineto_rank0.json").read_text())


def _nccl_kernel_ns() -> int:
    """The all-reduce kernel's duration as the capture itself records it (Kineto 'dur' is in us)."""
    (raw,) = [e for e in _doc()["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel")]
    return round(raw["dur"] * 1000)


def test_kineto_capture_has_kernels_streams_and_nccl():
    events = systrace.parse_kineto_trace(_doc())
    cats = [e.category for e in events]
    # The capture ran: matmul on the default stream, matmul on a side stream, a clone, an all-reduce.
    assert cats.count("nccl") == 1 and cats.count("memcpy") == 1 and cats.count("kernel") == 4
    nccl = next(e for e in events if e.category == "nccl")
    assert nccl.name.startswith("ncclDevKernel_AllReduce") and nccl.duration_ns == _nccl_kernel_ns()
    streams = {e.stream for e in events if e.category == "kernel"}
    assert len(streams) == 2  # two CUDA streams
    assert all(e.end_ns >= e.start_ns for e in events)
    assert [e.start_ns for e in events] == sorted(e.start_ns for e in events)


def test_phase_summary_and_document():
    events = systrace.parse_kineto_trace(_doc())
    s = systrace.phase_summary(events)
    assert s["categories"]["nccl"]["count"] == 1 and s["categories"]["nccl"]["busy_ns"] == _nccl_kernel_ns()
    assert s["categories"]["kernel"]["busy_ns"] <= s["categories"]["kernel"]["sum_ns"]
    assert s["nccl_compute_overlap_ns"] == 0  # the all-reduce ran after the matmuls

def test_timeline_is_published_as_typed_columns_and_read_back(tmp_path):
    events = systrace.parse_kineto_trace(_doc())
    files = systrace.timeline_evidence(events, tool="torch_profiler").save(tmp_path / "tl")
    assert set(files) == {"system_timeline", *(f"system_timeline.events.{c}" for c in
                                               ("name", "category", "start_ns", "end_ns", "device", "stream"))}
    assert json.loads(files["system_timeline"].read_text())["format"] == "argus.system_timeline/2"
    back = SystemTimeline.from_outputs(files.get)
    assert back.tool == "torch_profiler" and back.events["start_ns"].dtype == np.int64
    assert back.document(lists=True)["events"] == [asdict(e) for e in events]
    # an older workspace's inline document reads back to the same evidence
    old = SystemTimeline.from_document(json.loads(json.dumps(back.document(lists=True))))
    assert {c: a.tolist() for c, a in old.events.items()} == {c: a.tolist() for c, a in back.events.items()}


def assert_timeline_rule_matches_the_trace(tmp_path, collect, files: dict, pv) -> None:
    """The systrace adapter's ``files`` are typed timeline evidence of every event of its Kineto trace, and
    the system_timeline rule reads them to the per-(category, name) totals the trace itself gives."""
    from argus_rt.runtime.handlers import TaskContext, get_handler
    from argus_rt.tasks import Task

    assert json.loads(Path(files["system_timeline"]).read_text())["format"] == "argus.system_timeline/2"
    timeline = SystemTimeline.from_outputs(files.get)
    events = systrace.parse_kineto_trace(json.loads(Path(files["kineto_trace"]).read_text()))
    assert timeline.rows == len(events) and timeline.tool == "torch_profiler"
    synth = Task(kind="synthesize", op="system_timeline", program=pv.id, deps=(collect.id,))
    (tmp_path / "synth").mkdir()
    ctx = TaskContext(task=synth, program=pv, programs=lambda pid: pv, outdir=tmp_path / "synth",
                      deps={collect.id: collect}, inputs={f"{collect.id}/{n}": p for n, p in files.items()})
    facts = json.loads(Path(get_handler("synthesize", "system_timeline")(ctx)["facts"]).read_text())
    expected = defaultdict(lambda: [0.0, 0])
    for e in events:
        expected[f"{e.category}:{e.name}"][0] += e.duration_ns
        expected[f"{e.category}:{e.name}"][1] += 1
    assert {v["metric"]: [v["value"], v["samples"]] for v in facts["values"]} == dict(expected)


def test_the_adapter_publishes_the_capture_typed_and_the_rule_totals_it(tmp_path, monkeypatch):
    """The adapter's collect on the saved 2xH200 capture (the profiler run stood in for by its file)."""
    from types import SimpleNamespace

    from argus_rt.backends.base import CollectContext
    from argus_rt.tasks import Task
    from tests.test_synthesis import program

    monkeypatch.setattr(systrace, "profile_callable",
                        lambda fn, outdir: Path(shutil.copy(FIX / "kineto_rank0.json", Path(outdir) / "kineto.json")))
    pv = program()
    collect = Task(kind="collect", op="systrace", program=pv.id, device="gpu", outputs=("system_timeline",))
    (tmp_path / "out").mkdir()
    ctx = CollectContext(task=collect, program=SimpleNamespace(launch={"python": "json:dumps"}), config={},
                         scope=None, sampling={}, inputs={}, outdir=tmp_path / "out", device="")
    assert_timeline_rule_matches_the_trace(tmp_path, collect, systrace.SystraceAdapter().collect(ctx), pv)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(tool=3), r"meta.json: field 'tool' is 3, expected a string or null$"),
    (lambda d: d["tables"]["events"].pop("end_ns"), r"meta.json: missing column\(s\) \['end_ns'\]"),
    (lambda d: d["tables"]["events"].update(colour={"dtype": "<i8", "length": 6}),
     r"meta.json: unknown column 'colour' in 'events'; valid: name, category, start_ns"),
])
def test_bad_timeline_metadata_is_one_line_naming_the_file_and_field(tmp_path, edit, message):
    systrace.timeline_evidence(systrace.parse_kineto_trace(_doc()), tool="torch_profiler").save(tmp_path)
    assert_bad_metadata_refused(SystemTimeline, tmp_path, edit, message)


def test_inline_timeline_rows_must_share_their_fields():
    rows = [{"name": "k", "category": "kernel", "start_ns": 0, "end_ns": 5, "step": 0},
            {"name": "k", "category": "kernel", "start_ns": 5, "end_ns": 9}]
    with pytest.raises(EvidenceError, match=r"doc: event 1 has no 'step'"):
        SystemTimeline.from_document({"format": "argus.system_timeline/1", "events": rows}, "doc")
    rows[1]["step"], rows[1]["end_ns"] = 0, 4
    with pytest.raises(EvidenceError, match=r"doc: event 1 ends before it starts \(start_ns 5, end_ns 4\)"):
        SystemTimeline.from_document({"format": "argus.system_timeline/1", "events": rows}, "doc")


def test_union_counts_overlap_once():
    ev = [systrace.TimelineEvent("a", "kernel", 0, 100, 0, 1), systrace.TimelineEvent("b", "kernel", 50, 150, 0, 2),
          systrace.TimelineEvent("n", "nccl", 120, 220, 0, 3)]
    s = systrace.phase_summary(ev)
    assert s["categories"]["kernel"]["busy_ns"] == 150 and s["categories"]["kernel"]["sum_ns"] == 200
    assert s["nccl_compute_overlap_ns"] == 30


def test_bad_traces():
    with pytest.raises(systrace.SystraceError, match="traceEvents"):
        systrace.parse_kineto_trace({"events": []})
    with pytest.raises(systrace.SystraceError, match="no device kernels"):
        systrace.parse_kineto_trace({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]})
    with pytest.raises(systrace.SystraceError, match="lacks numeric"):
        systrace.parse_kineto_trace({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "x"}]})


def test_nsys_that_writes_only_qdstrm_is_detected():
    log = (FIX / "nsys_probe.txt").read_text()  # what the H200 machine's nsys printed
    with pytest.raises(systrace.NsysNoReportError, match="only a raw .qdstrm stream \\(nsys_gt.qdstrm\\)"):
        systrace.check_nsys_output(log, ["/tmp/x/nsys_gt.qdstrm"])
    assert systrace.check_nsys_output("ok", ["/tmp/x/r.nsys-rep"]) == Path("/tmp/x/r.nsys-rep")
    with pytest.raises(systrace.NsysNoReportError, match="no report"):
        systrace.check_nsys_output("Error: license", [])


def test_nsys_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(systrace.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(systrace.Path, "is_file", lambda self: False)
    assert systrace.find_nsys() is None
    with pytest.raises(BackendUnavailableError, match="nsys is not installed"):
        systrace.run_nsys(["./a.out"], tmp_path)


def test_adapter_config():
    a = systrace.SystraceAdapter()
    a.validate_config({"tool": "nsys"})
    with pytest.raises(ValueError, match="tool 'perf' unknown; valid: torch_profiler, nsys"):
        a.validate_config({"tool": "perf"})
    with pytest.raises(ValueError, match="unknown systrace config key"):
        a.validate_config({"tools": "nsys"})
