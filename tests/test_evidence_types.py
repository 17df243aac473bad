"""Typed evidence (argus_rt.evidence): .npy columns plus JSON metadata, checked on load, read by synthesis
through the workspace exactly as the older inline JSON documents were."""
import ast
import io
import json
from pathlib import Path

import numpy as np
import pytest

from argus_rt.evidence import (
    AsyncSites,
    EvidenceError,
    IterationWaits,
    OpEvents,
    PcCounters,
    PcRegionCounts,
    RegionIntervals,
    check_recording_ctas,
)
from argus_rt.program import ProgramVersion
from argus_rt.runtime.handlers import TaskContext, get_handler
from argus_rt.tasks import Task
from argus_rt.workspace import Workspace
from tests.test_synthesis import intervals, program


def region_doc(rng, pv):
    return dict(intervals(pv, rng), dropped=2, notes=["kept in details"])


def test_each_format_round_trips_its_columns_dtypes_and_metadata(tmp_path):
    pv = program()
    ev = RegionIntervals.from_document(region_doc(np.random.default_rng(0), pv))
    ev.save(tmp_path / "ri")
    back = RegionIntervals.load(tmp_path / "ri")
    assert back.clock == "ns" and back.coord_kind == "iteration" and back.dropped == 2
    assert back.details == {"notes": ["kept in details"]}
    for name, col in ev.columns.items():
        assert back.columns[name].dtype == col.dtype and (back.columns[name] == col).all()
    ops = OpEvents.from_document({"format": "argus.op_events/1", "ctas": 4, "recorded": 2, "columns": {
        "op_id": ["0x0000002a"] * 2, "iteration": [3, 3], "issue": [10, 20], "complete": [15, 31], "cta": [1, 2]}})
    back = OpEvents.load(Path(ops.save(tmp_path / "op")["op_events"]).parent)
    assert back.columns["op_id"].tolist() == ["0x0000002a"] * 2 and back.ctas == 4 and back.recorded == 2
    waits = IterationWaits.from_document({"format": "argus.iteration_waits/1", "wait": "w", "ctas": 2,
                                          "loops": [{"loop": 0, "wait_line": 7}],
                                          "columns": {"cta": [0, 1], "iteration": [0, 0], "begin": [1, 2],
                                                      "end": [4, 6]},
                                          "trips": {"cta": [0, 1], "loop": [0, 0], "trips": [1, 1]}})
    waits.save(tmp_path / "iw")
    back = IterationWaits.load(tmp_path / "iw")
    assert back.trips["trips"].tolist() == [1, 1] and back.loops == [{"loop": 0, "wait_line": 7}]
    pcs = PcCounters.from_document({"format": "argus.pc_counters/1", "method": "m", "pcs": ["k@0x0", "k@0x10"],
                                    "opcodes": ["FFMA", "BAR.SYNC"],
                                    "metrics": {"inst_executed": [3, 4], "stall:long_scoreboard": [0.5, 1.5]}})
    files = pcs.save(tmp_path / "pc")
    assert set(files) == {"pc_counters", "pc_counters.pcs.pc", "pc_counters.pcs.opcode", "pc_counters.metrics.m0",
                          "pc_counters.metrics.m1"}
    back = PcCounters.load(tmp_path / "pc")
    assert back.metric("stall:long_scoreboard").tolist() == [0.5, 1.5] and back.metric("inst_executed").dtype == np.int64
    meta = json.loads((tmp_path / "pc" / "meta.json").read_text())
    assert meta["format"] == "argus.pc_counters/2" and "metrics" not in meta and meta["metric_names"][1].startswith("stall")
    # the inline view is the documented /1 shape: each type reads its own document() back unchanged
    assert back.document(lists=True) == {"format": "argus.pc_counters/1", "method": "m", "pcs": ["k@0x0", "k@0x10"],
                                         "opcodes": ["FFMA", "BAR.SYNC"],
                                         "metrics": {"inst_executed": [3, 4], "stall:long_scoreboard": [0.5, 1.5]}}
    for typed in (ev, ops, waits, pcs):
        inline = typed.document(lists=True)
        assert type(typed).from_document(json.loads(json.dumps(inline))).document(lists=True) == inline


def _saved(tmp_path):
    ev = RegionIntervals.from_document(region_doc(np.random.default_rng(1), program()))
    ev.save(tmp_path / "ev")
    return tmp_path / "ev"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(clock=3), r"meta.json: field 'clock' is 3, expected a string$"),
    (lambda d: d.update(clock="ms"), r"meta.json: field 'clock' is 'ms', expected 'ns' or 'cycles'$"),
    (lambda d: d.update(dropped=None), r"meta.json: field 'dropped' is null, expected an integer$"),
    (lambda d: d.update(colour="red"), r"meta.json: unknown field\(s\) \['colour'\]; valid: format, tables, clock"),
    (lambda d: d["tables"]["columns"]["start"].update(length=3), r"columns.start.npy: column columns.start is <i8\[400\], "
                                                                 r"its metadata says <i8\[3\]$"),
    (lambda d: d["tables"]["columns"].pop("end"), r"meta.json: missing column\(s\) \['end'\]"),
    (lambda d: d.update(format="argus.region_intervals/9"), r"expected evidence format 'argus.region_intervals/2' "
                                                            r"\(or the older 'argus.region_intervals/1'\), got"),
])
def test_bad_metadata_is_one_line_naming_the_file_and_field(tmp_path, edit, message):
    assert_bad_metadata_refused(RegionIntervals, _saved(tmp_path), edit, message)


def assert_bad_metadata_refused(cls, directory: Path, edit, message: str) -> None:
    """``edit`` the metadata of the evidence saved in ``directory``: ``cls.load`` refuses it in one line
    matching ``message`` and naming the directory."""
    meta = json.loads((directory / "meta.json").read_text())
    edit(meta)
    (directory / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(EvidenceError, match=message) as info:
        cls.load(directory)
    assert "\n" not in str(info.value) and str(directory) in str(info.value)


def test_bad_column_files_are_one_line_errors_and_pickles_are_refused(tmp_path, monkeypatch):
    d = _saved(tmp_path)
    np.save(d / "columns.sm.npy", np.array([{"x": 1}] * 400, dtype=object), allow_pickle=True)
    with pytest.raises(EvidenceError, match=r"columns.sm.npy: column columns.sm is not a readable .npy array \(.*pickle"):
        RegionIntervals.load(d)
    (d / "columns.sm.npy").write_bytes(b"not an array")
    with pytest.raises(EvidenceError, match=r"columns.sm.npy: column columns.sm is not a readable .npy array"):
        RegionIntervals.load(d)
    np.save(d / "columns.sm.npy", np.arange(400, dtype=np.int64))
    raw = bytearray((d / "columns.sm.npy").read_bytes())
    raw[12:14] = b"\0\0"  # null bytes inside the header's text (numpy 2.4 / Python 3.11: ValueError)
    (d / "columns.sm.npy").write_bytes(bytes(raw))
    with pytest.raises(EvidenceError, match=r"columns.sm.npy: column columns.sm is not a readable .npy array"):
        RegionIntervals.load(d)
    import tokenize

    def token_error(*args, **kwargs):  # what numpy 2.5.2 on Python 3.12 raised for such a header (H200, 00:09)
        raise tokenize.TokenError("source code cannot contain null bytes", (1, 0))

    with monkeypatch.context() as m:
        m.setattr(np, "load", token_error)
        with pytest.raises(EvidenceError, match=r"column columns\.\w+ is not a readable \.npy array "
                                                r"\(\('source code cannot contain null bytes'"):
            RegionIntervals.load(d)
    np.save(d / "columns.sm.npy", np.arange(400, dtype=np.float64))
    with pytest.raises(EvidenceError, match=r"columns.sm is <f8\[400\], its metadata says <i8\[400\]"):
        RegionIntervals.load(d)
    (d / "columns.sm.npy").unlink()
    with pytest.raises(EvidenceError, match=r"columns.sm.npy: missing \(column columns.sm of .*meta.json\)"):
        RegionIntervals.load(d)
    (d / "meta.json").write_text("{")
    with pytest.raises(EvidenceError, match=r"meta.json: not JSON"):
        RegionIntervals.load(d)


def test_string_columns_of_any_string_dtype_are_stored_fixed_width(tmp_path):
    """An object (or StringDType) column of str is written as ``<U`` (np.save needs no pickle for it) and
    reads back equal; a column of mixed objects is refused by name before anything is written."""
    from argus_rt.evidence import SystemTimeline

    names = ["void gemm<128>(float*)", "ncclKernel_AllGather", "é"]
    cols = {"name": np.array(names, dtype=object), "category": np.array(["kernel"] * 3, dtype=object),
            **{c: np.arange(3, dtype=np.int64) for c in ("start_ns", "end_ns", "device", "stream")}}
    SystemTimeline(events=cols, tool="torch_profiler").save(tmp_path / "t")
    back = SystemTimeline.load(tmp_path / "t")
    assert back.events["name"].dtype.kind == "U" and back.events["name"].tolist() == names
    cols["name"] = np.array(["a", 1, None], dtype=object)
    with pytest.raises(EvidenceError, match=r"column events.name holds object values that are not all strings"):
        SystemTimeline(events=cols, tool="torch_profiler").save(tmp_path / "u")


def test_a_column_whose_bytes_do_not_check_is_refused_and_nothing_stays(tmp_path, monkeypatch):
    """The H200's null-byte headers (2026-12-02): a column whose serialised bytes do not parse back (its header
    padding zeroed, as seen there) or whose file holds other bytes than were written is an error naming the
    file, and no column file or metadata stays; with the bytes intact the same evidence saves and loads."""
    from argus_rt import fsutil

    real_save, real_write = np.save, fsutil.atomic_write_bytes
    broken = {"save": False, "write": False}

    def zeroed_padding_save(file, arr, allow_pickle=True):  # columns' bytes as seen on the H200
        if broken["save"] and isinstance(file, io.BytesIO):
            scratch = io.BytesIO()
            real_save(scratch, arr, allow_pickle=allow_pickle)
            data = scratch.getvalue()
            file.write(data[:89] + bytes(38) + data[127:])
        else:
            real_save(file, arr, allow_pickle=allow_pickle)

    def torn_write(path, data, **kw):
        if broken["write"] and Path(path).name == "columns.start.npy":
            data = data[:-8] + bytes(8)
        real_write(path, data, **kw)

    monkeypatch.setattr(np, "save", zeroed_padding_save)
    monkeypatch.setattr(fsutil, "atomic_write_bytes", torn_write)
    doc = region_doc(np.random.default_rng(5), program())
    ev = RegionIntervals.from_document(doc)
    for case, match in (("save", r"columns\.\w+\.npy: the column file did not check \(in memory: not a readable \.npy"),
                        ("write", r"columns\.start\.npy: the column file did not check \(on disk: the file's bytes differ")):
        broken[case] = True
        with pytest.raises(EvidenceError, match=match) as refused:
            ev.save(tmp_path / case)
        broken[case] = False
        named = Path(str(refused.value).split(": the column file")[0])
        assert named.parent == tmp_path / case and not named.exists()
        assert not (tmp_path / case / "meta.json").exists()
    ev.save(tmp_path / "ok")
    assert {c: a.tolist() for c, a in RegionIntervals.load(tmp_path / "ok").columns.items()} == doc["columns"]


def test_inline_documents_of_older_workspaces_are_read_and_checked(tmp_path):
    doc = region_doc(np.random.default_rng(2), program())
    (tmp_path / "old.json").write_text(json.dumps(doc))
    ev = RegionIntervals.from_outputs({"region_intervals": tmp_path / "old.json"}.get)
    assert ev.columns["start"].tolist() == doc["columns"]["start"]
    doc["columns"]["cta"] = [0.5] * len(doc["columns"]["cta"])
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with pytest.raises(EvidenceError, match=r"old.json: column columns.cta holds float64, expected integers$"):
        RegionIntervals.from_outputs({"region_intervals": tmp_path / "old.json"}.get)


def commit_and_synthesize(tmp_path, files: dict, collect: Task, pv, rule: str = "latency") -> dict:
    """Commit a collection's files (under ``tmp_path/out``) into a real workspace and run synthesis ``rule`` on
    its outputs, with the inputs the scheduler gives (``<dep>/<name>`` -> blob path)."""
    ws = Workspace(tmp_path / "ws")
    staged = ws.new_staging(collect.id)
    moved = {}
    for name, path in files.items():
        target = staged / Path(path).relative_to(tmp_path / "out")
        target.parent.mkdir(parents=True, exist_ok=True)
        Path(path).replace(target)
        moved[name] = target
    records = ws.commit(collect, moved, [])
    synth = Task(kind="synthesize", op=rule, program=pv.id, region=None, deps=(collect.id,))
    out = tmp_path / "synth"
    out.mkdir()
    ctx = TaskContext(task=synth, program=pv, programs=lambda pid: pv, outdir=out, deps={collect.id: collect},
                      inputs={f"{collect.id}/{n}": r.path for n, r in records.items()})
    return json.loads(Path(get_handler("synthesize", rule)(ctx)["facts"]).read_text())


def publish_triton_trace(tmp_path, monkeypatch, pv, doc: dict) -> tuple[Task, dict]:
    """(the collect task, its files under ``tmp_path/out``): the trace adapter's publication of a Triton
    program's region trace, the run itself stood in for by ``doc`` (its inline document)."""
    from argus_rt.backends.base import CollectContext
    from argus_rt.backends.trace import TraceAdapter
    from argus_rt.kinds.triton import region_trace, trace_run

    monkeypatch.setattr(region_trace, "collect_triton_region_trace", lambda program, workdir, repeats: doc)
    monkeypatch.setattr(trace_run, "require_hopper", lambda: None)
    collect = Task(kind="collect", op="trace", program=pv.id, device="gpu", outputs=("region_intervals",))
    (tmp_path / "out").mkdir()
    ctx = CollectContext(task=collect, program=pv, config={}, scope=None, sampling={}, inputs={},
                         outdir=tmp_path / "out", device="")
    return collect, TraceAdapter().collect(ctx)


def test_a_published_region_trace_gives_the_same_facts_as_its_inline_document(tmp_path, monkeypatch):
    """The trace adapter on a Triton program (its kind's trace_run hook) publishes .npy columns + metadata;
    committed to a workspace and read by the latency rule they give exactly the facts the same evidence
    gave as one inline JSON document."""
    pv = ProgramVersion.from_sources("k", {"k.cu": "x"}, kind="triton", regions=program().regions)
    doc = region_doc(np.random.default_rng(3), pv)
    collect, files = publish_triton_trace(tmp_path, monkeypatch, pv, doc)
    assert json.loads(Path(files["region_intervals"]).read_text())["format"] == "argus.region_intervals/2"
    assert {n for n in files if n.startswith("region_intervals.columns.")} == \
        {f"region_intervals.columns.{c}" for c in doc["columns"]}
    typed = commit_and_synthesize(tmp_path, files, collect, pv)
    legacy_dir = tmp_path / "legacy"
    (legacy_dir / "out").mkdir(parents=True)
    (legacy_dir / "out" / "region_intervals.json").write_text(json.dumps(doc))
    inline = commit_and_synthesize(legacy_dir, {"region_intervals": legacy_dir / "out" / "region_intervals.json"},
                                    collect, pv)

    def values(facts):
        return [(v["region"], v["metric"], v["value"], v["samples"], v["notes"]) for v in facts["values"]]

    assert values(typed) == values(inline) and typed["extra"] == inline["extra"]
    assert any(v[1] == "mean" and v[2] for v in values(typed)) and "2 records were dropped" in typed["values"][0]["notes"][0]


MAP = {"format": "argus.pc_region_counts/1", "method": "sass_cfg+ncu", "kernel": "k",
       "entries": [["k@0x0", 0, 2], ["k@0x10", 7, 3], ["k@0x10", 9, 1]],
       "stacks": [["k@0x0", [], 2], ["k@0x10", [5, 7], 3], ["k@0x10", [5, 9], 1]],
       "pc_methods": {"k@0x0": "static_cfg", "k@0x10": "call_site_split"}, "opcodes": {"k@0x0": "S2R", "k@0x10": "FFMA"},
       "source_file_attribution": {"inst_executed": {"k.cu": 6}}, "notes": [], "provenance": {"cubin": "k.cubin"}}


def test_a_pc_region_map_round_trips_its_stacks_methods_and_metadata(tmp_path):
    files = PcRegionCounts.from_document(MAP).save(tmp_path / "map")
    assert set(files) == {"pc_region_counts", *(f"pc_region_counts.{t}.{c}" for t, cs in (
        ("entries", ("pc", "region", "count")), ("stacks", ("pc", "depth", "count")), ("stack_regions", ("region",)),
        ("pc_methods", ("pc", "method")), ("opcodes", ("pc", "opcode"))) for c in cs)}
    back = PcRegionCounts.load(tmp_path / "map")
    assert back.stacks["depth"].tolist() == [0, 2, 2] and back.stack_regions["region"].tolist() == [5, 7, 5, 9]
    assert back.document() == MAP  # the inline /1 view is the document it was made of
    # NVBit's leaf-only maps wrote their note as one string: read as a one-note list
    leaf = PcRegionCounts.from_document({"format": "argus.pc_region_counts/1", "method": "nvbit",
                                         "entries": MAP["entries"], "notes": "NVBit mapping tool"})
    assert leaf.notes == ["NVBit mapping tool"] and leaf.stacks == {} and leaf.document()["stacks"] == []


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(method=None), r"meta.json: field 'method' is null, expected a string$"),
    (lambda d: d.update(notes="one"), r"meta.json: field 'notes' is \"one\", expected a list of strings$"),
    (lambda d: d["tables"]["stack_regions"]["region"].update(length=3), r"stack_regions.region.npy: column "
     r"stack_regions.region is <i8\[4\], its metadata says <i8\[3\]$"),
    (lambda d: d["tables"]["stacks"].pop("depth"), r"meta.json: table 'stacks' needs columns pc, depth, count"),
])
def test_bad_map_metadata_is_one_line_naming_the_file_and_field(tmp_path, edit, message):
    PcRegionCounts.from_document(MAP).save(tmp_path)
    assert_bad_metadata_refused(PcRegionCounts, tmp_path, edit, message)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(entries=[["k@0x0", 0]]), r"map: entries\[0\] is \["),
    (lambda d: d.update(stacks=[["k@0x0", 0, 2]]), r"map: stacks\[0\] is .*expected \[pc, \[region, ...\], n\]$"),
    (lambda d: d.update(opcodes=["S2R"]), r"map: field 'opcodes' is \[\"S2R\"\], expected an object"),
])
def test_bad_inline_maps_are_one_line_errors(edit, message):
    doc = json.loads(json.dumps(MAP))
    edit(doc)
    with pytest.raises(EvidenceError, match=message):
        PcRegionCounts.from_document(doc, "map")


SITES = {"format": "argus.async_sites/1", "program": "p-1", "kernel": "k", "region": "k/loop", "iterations": 4,
         "sites": [{"op_id": "0x0000002a", "kind": "tma_load", "region": "k/loop/load", "iterations": [0, 1],
                    "completion": {"consumer_wait_line": 12}, "instances": [{"ttgir_line": 9}]}],
         "unsupported": [], "helper_regions": "per_call_site", "regions": [{"name": "k/loop"}], "ttgir_hash": "ab"}


def test_async_sites_store_is_the_checked_document(tmp_path):
    files = AsyncSites.from_document(SITES).save(tmp_path / "sites")
    assert set(files) == {"async_sites"} and json.loads(files["async_sites"].read_text()) == SITES
    back = AsyncSites.load(tmp_path / "sites")
    assert back.iterations == 4 and back.details == {"ttgir_hash": "ab"} and list(back.by_op_id()) == ["0x0000002a"]
    # an older document without the optional fields reads with their defaults
    old = AsyncSites.from_document({"format": "argus.async_sites/1", "sites": [{"op_id": "tma0"}]})
    assert old.regions == [] and old.program is None


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(iterations="8"), r"meta.json: field 'iterations' is \"8\", expected an integer or null$"),
    (lambda d: d["sites"][0].update(iterations=[0, "1"]), r"meta.json: field 'sites\[0\].iterations' is \[0, \"1\"\], "
     r"expected a list of integers$"),
    (lambda d: d["sites"][0].pop("op_id"), r"meta.json: sites\[0\] has no string 'op_id'"),
    (lambda d: d["sites"].append(dict(d["sites"][0])), r"meta.json: op_id '0x0000002a' names two sites \(sites\[1\]"),
    (lambda d: d.update(format="argus.async_sites/2"), r"meta.json: expected evidence format 'argus.async_sites/1', "
     r"got 'argus.async_sites/2'$"),
])
def test_bad_async_sites_are_one_line_naming_the_file_and_field(tmp_path, edit, message):
    doc = json.loads(json.dumps(SITES))
    edit(doc)
    (tmp_path / "meta.json").write_text(json.dumps(doc))
    with pytest.raises(EvidenceError, match=message) as info:
        AsyncSites.load(tmp_path)
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)


def test_recording_ctas_check():
    assert check_recording_ctas("k0", 3, {4, 5}, {0: {4, 5}, 1: {4, 5}}, 8)
    assert not check_recording_ctas("k0", 14, set(), {0: set()}, 8)
    with pytest.raises(EvidenceError, match=r"launch 1 was recorded by 1 of 8 CTAs.*CTA 5 runs iteration 3 but did not"):
        check_recording_ctas("k0", 3, {4, 5}, {0: {4, 5}, 1: {4}}, 8)


def test_synthesis_names_no_kind_backend_or_config_key_when_it_picks_inputs():
    import argus_rt.synthesis as synthesis

    tree = ast.parse(Path(synthesis.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert not [m for m in imported if m.startswith("kinds") or m.startswith("backends")], imported
    called = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in ("_one_dep", "_one_dep_with_output")]
    backend_names = {"trace", "ncu", "pcmap", "nvbit", "systrace", "proton"}
    assert not [ast.unparse(c) for c in called if isinstance(c.args[1], ast.Constant) and c.args[1].value in backend_names]
