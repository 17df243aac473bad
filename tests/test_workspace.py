"""Versioned workspace: content addressing, atomic commits, binding to inputs, forks, refused joins."""
from __future__ import annotations

import itertools
import sqlite3

import pytest

from argus_rt.program import IncompatibleVersionsError, ProgramVersion
from argus_rt.regions import RegionTree
from argus_rt.tasks import Task
from argus_rt.workspace import Workspace, WorkspaceError
from argus_rt.workspace_check import verify


def prog(text="v1") -> ProgramVersion:
    tree = RegionTree("p")
    tree.add("a/b")
    return ProgramVersion.from_sources("p", {"k.cu": text}, regions=tree, compiler="nvcc 13.0")


def commit_text(ws, task, **files):
    staged = ws.new_staging(task.id)
    paths = {}
    for name, text in files.items():
        paths[name] = staged / f"{name}.txt"
        paths[name].write_text(text)
    return ws.commit(task, paths, inputs=[("t-" + "0" * 20, "program", "ab" * 32)])


def test_commit_is_content_addressed_and_bound_to_task_and_inputs(tmp_path):
    ws = Workspace(tmp_path)
    pv = prog()
    ws.put_program(pv)
    t1 = Task(kind="synthesize", op="x", program=pv.id, config={"n": 1})
    t2 = Task(kind="synthesize", op="x", program=pv.id, config={"n": 2})
    o1 = commit_text(ws, t1, facts="same bytes")
    o2 = commit_text(ws, t2, facts="same bytes")
    assert o1["facts"].sha256 == o2["facts"].sha256 and o1["facts"].path == o2["facts"].path
    assert o1["facts"].read_bytes() == b"same bytes"
    assert o1["facts"].program == pv.id and o1["facts"].inputs == (("t-" + "0" * 20, "program", "ab" * 32),)
    assert verify(ws) == []
    assert ws.stats()["staging_dirs"] == 2  # emptied staging dirs remain until the runtime or clean_staging removes them
    ws.close()
    again = Workspace(tmp_path)  # persistent
    assert again.outputs(t1.id)["facts"].read_bytes() == b"same bytes"
    assert again.get_program(pv.id) == pv
    mode = sqlite3.connect(tmp_path / "index.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_uncommitted_staging_is_invisible_and_verify_catches_corruption(tmp_path):
    ws = Workspace(tmp_path)
    t = Task(kind="collect", op="trace", program=prog().id, device="gpu")
    staged = ws.new_staging(t.id)
    (staged / "half.json").write_text('{"incomplete')
    assert ws.outputs(t.id) is None and ws.task_status(t.id) is None
    out = commit_text(ws, Task(kind="synthesize", op="y", program="pv"), facts="x" * 100)
    out["facts"].path.write_bytes(b"tampered")
    assert any("does not match" in p for p in verify(ws))
    out["facts"].path.unlink()
    assert any("missing" in p for p in verify(ws))


def test_verify_decodes_as_json_only_what_the_writer_declared_json(tmp_path):
    ws = Workspace(tmp_path)
    commit_text(ws, Task(kind="synthesize", op="log", program="pv"), log="[INFO] text, not JSON", brace="{x")
    assert verify(ws) == []
    t = Task(kind="synthesize", op="j", program="pv")
    staged = ws.new_staging(t.id)
    (staged / "facts.json").write_text('{"incomplete')
    ws.commit(t, {"facts": staged / "facts.json"}, inputs=[])
    problems = verify(ws)
    assert len(problems) == 1 and "not valid JSON" in problems[0]


def test_failure_records_do_not_hide_done_results(tmp_path):
    ws = Workspace(tmp_path)
    t = Task(kind="synthesize", op="z", program="pv")
    ws.record_failure(t, "boom")
    assert ws.task_status(t.id)["status"] == "failed" and ws.outputs(t.id) is None
    commit_text(ws, t, facts="ok")
    ws.record_failure(t, "late failure report")
    assert ws.task_status(t.id)["status"] == "done"


def test_user_strings_never_become_paths(tmp_path):
    ws = Workspace(tmp_path)
    for bad in ("../../etc/passwd", "c-../x", "c-" + "g" * 20, ""):
        with pytest.raises(WorkspaceError, match="invalid task id"):
            ws.new_staging(bad)
    pv = prog()
    ws.put_program(pv)
    for bad in ("../escape", "a/b", "", "x" * 65, ".hidden"):
        with pytest.raises(WorkspaceError, match="invalid branch name"):
            ws.fork(pv.id, bad)
    with pytest.raises(WorkspaceError, match="invalid blob hash"):
        ws.blob_path("../" * 10)
    # a region or source name full of path syntax is only ever data (program names refuse it)
    tree = RegionTree("p")
    tree.add("..:x/..y")
    odd = ProgramVersion.from_sources("p", {"../k.cu": "x"}, regions=tree)
    ws.put_program(odd)
    t = Task(kind="synthesize", op="x", program=odd.id, region="..:x/..y")
    commit_text(ws, t, facts="1")
    assert all(p.resolve().is_relative_to(tmp_path.resolve()) for p in tmp_path.rglob("*"))
    assert not (tmp_path.parent / "p").exists()


def test_fork_from_an_earlier_version_and_refused_joins(tmp_path):
    ws = Workspace(tmp_path)
    v1 = prog("v1")
    v2 = v1.derive({"k.cu": "v2"})
    v3 = v2.derive({"k.cu": "v3"})
    for v in (v1, v2, v3):
        ws.put_program(v)
    ws.fork(v3.id, "main")
    ws.fork(v1.id, "retry")  # an optimizer backs up to v1
    alt = v1.derive({"k.cu": "v2-alternative"})
    ws.advance("retry", alt)
    assert ws.branches() == {"main": v3.id, "retry": alt.id}
    assert alt.parent == v1.id and ws.get_program(alt.id).parent == v1.id
    with pytest.raises(WorkspaceError, match="was not derived from branch"):
        ws.advance("main", v2.derive({"k.cu": "other"}))
    with pytest.raises(WorkspaceError, match="unknown branch 'nope'; branches: main, retry"):
        ws.branch_head("nope")
    traced, marker = v1.variant_of("traced"), v1.variant_of("marker_only")
    ws.put_program(traced)
    ws.put_program(marker)
    ws.check_joinable([v1.id, traced.id, marker.id])  # variants of one base: fine
    with pytest.raises(IncompatibleVersionsError, match="refusing to join"):
        ws.check_joinable([traced.id, v2.id])


def test_program_versions_hash_content_flags_and_compiler():
    a = prog("x")
    assert a.id == prog("x").id
    assert a.id != prog("y").id
    assert a.id != ProgramVersion.from_sources("p", {"k.cu": "x"}, regions=a.regions, compiler="nvcc 12.4").id
    assert a.id != ProgramVersion.from_sources("p", {"k.cu": "x"}, regions=a.regions, compiler="nvcc 13.0",
                                               flags=["-O0"]).id
    probe = a.variant_of("traced").variant_of("probe", op_id="tma0", iteration=3)
    assert probe.base == a.id and probe.base_id == a.id
    assert ProgramVersion.from_dict(probe.to_dict()) == probe
    assert probe.id != a.variant_of("probe", op_id="tma0", iteration=4).id
    with pytest.raises(ValueError, match="unknown program variant 'fast'; valid: trace_free"):
        a.variant_of("fast")
    with pytest.raises(ValueError, match="needs parameters"):
        a.variant_of("probe")


def test_damaged_or_missing_blob_counts_as_absent_and_a_commit_rewrites_it(tmp_path):
    ws = Workspace(tmp_path)
    t = Task(kind="synthesize", op="x", program="pv")
    out = commit_text(ws, t, facts="true bytes")["facts"]
    out.path.write_bytes(b"edit bytes")  # same size, other content
    assert ws.outputs(t.id) is None  # not reused
    with pytest.raises(WorkspaceError, match="does not match its hash"):
        out.read_bytes()
    again = commit_text(ws, t, facts="true bytes")["facts"]  # the rerun's identical bytes replace the damage
    assert again.read_bytes() == b"true bytes" and verify(ws) == []
    again.path.unlink()
    assert ws.outputs(t.id) is None
    with pytest.raises(WorkspaceError, match="cannot be read"):
        again.read_bytes()
    assert commit_text(ws, t, facts="true bytes")["facts"].read_bytes() == b"true bytes"


def test_an_output_whose_input_was_produced_again_is_stale(tmp_path):
    ws = Workspace(tmp_path)
    dep = Task(kind="collect", op="trace", program="pv", device="gpu")
    user = Task(kind="synthesize", op="latency", program="pv", deps=(dep.id,))
    first = commit_text(ws, dep, region_intervals="run 1")["region_intervals"]
    staged = ws.new_staging(user.id)
    (staged / "f").write_text("facts of run 1")
    ws.commit(user, {"facts": staged / "f"}, inputs=[(dep.id, "region_intervals", first.sha256)])
    assert ws.outputs(user.id) is not None
    commit_text(ws, dep, region_intervals="run 2")  # the collect ran again (its blob was damaged)
    assert ws.outputs(user.id) is None  # computed from bytes its dependency no longer holds
    assert any("stale" in p for p in verify(ws))


def test_staging_refuses_symlinks_at_any_depth(tmp_path):
    ws = Workspace(tmp_path / "ws")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("not the task's")
    t = Task(kind="synthesize", op="x", program="pv")
    staged = ws.new_staging(t.id)
    (staged / "sub").symlink_to(outside, target_is_directory=True)
    (staged / "link").symlink_to(outside / "secret")
    for path in (staged / "sub" / "secret", staged / "link"):
        with pytest.raises(WorkspaceError, match="is a symbolic link"):
            ws.commit(t, {"facts": path}, inputs=[])
    assert (outside / "secret").read_text() == "not the task's"
    assert not any(p.is_file() for p in ws.blobs.rglob("*"))


def test_a_damaged_task_record_counts_as_absent(tmp_path):
    ws = Workspace(tmp_path)
    t = Task(kind="collect", op="trace", program="pv", device="gpu")
    commit_text(ws, t, region_intervals="x")
    with ws._tx() as db:
        db.execute("UPDATE tasks SET record=? WHERE id=?", ('{"kind": "collect"', t.id))
    assert ws.outputs(t.id) is None and ws.done_tasks("collect", "trace", "pv") == []
    assert any("damaged record" in p for p in verify(ws))
    commit_text(ws, t, region_intervals="x")  # the rerun writes the record again
    assert ws.outputs(t.id) is not None and verify(ws) == []


def test_staging_refuses_a_symlinked_directory_below_a_real_one(tmp_path):
    ws = Workspace(tmp_path / "ws")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("not the task's")
    t = Task(kind="synthesize", op="x", program="pv")
    staged = ws.new_staging(t.id)
    (staged / "real").mkdir()
    (staged / "real" / "ok").write_text("the task's")
    (staged / "real" / "sub").symlink_to(outside, target_is_directory=True)
    # the good output shares the checked directories with the bad one: the link is still found
    with pytest.raises(WorkspaceError, match="sub is a symbolic link"):
        ws.commit(t, {"a": staged / "real" / "ok", "b": staged / "real" / "sub" / "secret"}, inputs=[])
    assert ws.outputs(t.id) is None and (outside / "secret").read_text() == "not the task's"


def test_durable_commit_fsyncs_files_and_each_blob_directory_once_before_the_index(tmp_path, monkeypatch):
    import os

    ws = Workspace(tmp_path, durable=True)
    t = Task(kind="synthesize", op="x", program="pv")
    staged = ws.new_staging(t.id)
    import hashlib

    by_shard = {}  # two different contents whose blobs share a shard directory
    for i in itertools.count():
        text = f"content {i}"
        pair = by_shard.setdefault(hashlib.sha256(text.encode()).hexdigest()[:2], [])
        pair.append(text)
        if len(pair) == 2:
            break
    files = {}
    for i, text in enumerate([*pair, "other", pair[0]]):  # the last is a duplicate of the first
        files[f"o{i}"] = staged / f"o{i}"
        files[f"o{i}"].write_text(text)
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        assert ws.task_status(t.id) is None  # everything is on disk before the task is recorded
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    out = ws.commit(t, files, inputs=[])
    monkeypatch.undo()
    assert sorted(p for p in synced if "staging" in p) == sorted(str(p.resolve()) for p in files.values())
    dirs = [p for p in synced if "staging" not in p]
    blob_dirs = {str(rec.path.parent.resolve()) for rec in out.values()}
    assert len(blob_dirs) == 2 and sorted(dirs) == sorted(blob_dirs)  # once each: o0 and o1 share one
    assert ws.task_status(t.id)["status"] == "done" and verify(ws) == []
