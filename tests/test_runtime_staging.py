"""Staging directories: emptied ones are recycled for later attempts (a rename instead of rmdir + mkdir),
and every attempt still starts in an empty, real, private directory.

The ``standin_staging_probe`` handler is registered at import: CPU pool processes import this module by name.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from argus_rt.runtime.handlers import register_synthesis
from argus_rt.runtime.scheduler import Runtime
from argus_rt.runtime.staging import StagingRecycler, claim_staging
from argus_rt.tasks import Plan, Task
from argus_rt.workspace import Workspace
from argus_rt.workspace_check import verify
from test_runtime_standins import demo_program


@register_synthesis("standin_staging_probe")
def _probe(ctx):
    """Reports what its staging directory held when it started; may leave a leftover."""
    seen = sorted(os.listdir(ctx.outdir))
    if ctx.config.get("leftover"):
        (ctx.outdir / "undeclared").write_text("left behind by the handler")
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": "probe", "values": [],
                                              "extra": {"seen": seen, "is_link": os.path.islink(
                                                  ctx.outdir), "n": ctx.config["n"]}})}


def chain_plan(n: int) -> Plan:
    """``n`` tasks, each depending on the one before (so each starts after the previous one committed);
    every fourth leaves an undeclared file in its staging directory."""
    pv = demo_program()
    tasks, prev = [], ()
    for i in range(n):
        t = Task(kind="synthesize", op="standin_staging_probe", program=pv.id, deps=prev,
                 config={"n": i, "leftover": i % 4 == 1}, outputs=("facts",), label=f"probe {i}")
        tasks.append(t)
        prev = (t.id,)
    return Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={t.id: t for t in tasks}, targets={})


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_recycled_staging_dirs_start_empty_and_none_outlive_the_runtime(tmp_path, pool, monkeypatch):
    plan = chain_plan(30)
    made = []  # staging directories made by mkdir in this process (the thread pool's handlers run here)
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if os.fspath(path).startswith(os.path.join(tmp_path, "ws", "staging", "")):
            made.append(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_workers=1, cpu_pool=pool) as rt:
        res = rt.run(plan)
        assert res.ok, [r.error for r in res.failed()]
        extra = [res.outputs(tid)["facts"].read_json()["extra"] for tid in plan.tasks]
        assert all(e["seen"] == [] and not e["is_link"] for e in extra)  # the leftovers never reach a later task
        if pool == "thread":  # most attempts renamed an emptied directory instead of making one
            assert 0 < len(made) < len(plan.tasks) / 2, made
        rt._janitor.submit(lambda: None).result()  # the janitor has released the last one
        kept = list(ws.staging.iterdir())
        assert all(p.is_dir() and not any(p.iterdir()) for p in kept)  # what is kept is empty
    assert list(ws.staging.iterdir()) == []  # close removes the kept directories


def test_claim_staging_renames_an_empty_directory_and_refuses_anything_else(tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    spare = staging / "old"
    spare.mkdir()
    ino = spare.stat().st_ino
    assert claim_staging(staging / "new", str(spare)) == "recycled"
    assert (staging / "new").stat().st_ino == ino and not spare.exists()  # the old name is gone

    spare.mkdir()
    (spare / "late").write_text("written after it was released")
    assert claim_staging(staging / "new2", str(spare)) == "made"
    assert list((staging / "new2").iterdir()) == [] and not spare.exists()

    outside = tmp_path / "outside"
    outside.mkdir()
    spare.symlink_to(outside, target_is_directory=True)
    assert claim_staging(staging / "new3", str(spare)) == "made"
    assert not (staging / "new3").is_symlink() and (staging / "new3").is_dir() and outside.is_dir()

    assert claim_staging(staging / "new4", str(staging / "vanished")) == "made"
    with pytest.raises(FileExistsError):
        claim_staging(staging / "new4")  # a fresh attempt never takes over an existing directory
    (staging / "new4" / "x").write_text("kept")
    assert claim_staging(staging / "new4", exist_ok=True) == "made" and (staging / "new4" / "x").exists()


def test_recycler_keeps_only_empty_directories_up_to_its_limit(tmp_path):
    recycler = StagingRecycler(limit=2)
    dirs = []
    for i in range(4):
        d = tmp_path / f"d{i}"
        d.mkdir()
        dirs.append(d)
    (dirs[0] / "leftover").write_text("x")
    for d in dirs:
        recycler.release(d)
    assert not dirs[0].exists()  # not empty: removed with its leftover
    assert len(recycler) == 2 and dirs[1].exists() and dirs[2].exists() and not dirs[3].exists()  # over the limit
    recycler.release(tmp_path / "missing")  # a directory clean_staging already removed
    assert len(recycler) == 2
    assert recycler.take() == str(dirs[1])
    recycler.close()
    assert not dirs[2].exists() and recycler.take() is None
    assert Path(dirs[1]).exists()  # taken: its new owner's business


@register_synthesis("standin_crash_once")
def _crash_once(ctx):
    """Writes half of its output, then (the first time: ``marker`` absent) dies the way ``mode`` says."""
    half = ctx.outdir / "facts.json"
    half.write_bytes(b'{"format": "argus.facts/1", "PARTIAL' + b"x" * 5000)  # half-written, never valid
    marker = Path(ctx.config["marker"])
    if not marker.exists():
        marker.write_text("crashed once")
        mode = ctx.config["mode"]
        if mode == "abort":
            os.abort()
        if mode == "segfault":
            import ctypes

            ctypes.string_at(0)
        if mode == "exit":
            os._exit(3)
        raise RuntimeError("handler failed mid-write")
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": "crash", "values": [],
                                              "extra": {"mode": ctx.config["mode"]}})}


def test_crashing_tasks_corrupt_nothing_and_their_half_written_files_reach_no_blob_and_no_task(tmp_path):
    pv = demo_program()

    def task(op, n, deps=(), **config):
        return Task(kind="synthesize", op=op, program=pv.id, deps=deps, config={"n": n, **config},
                    outputs=("facts",), timeout_s=120, label=f"{op} {n}")

    crashers = {mode: task("standin_crash_once", i, mode=mode, marker=str(tmp_path / f"{mode}.marker"))
                for i, mode in enumerate(("abort", "segfault", "exit", "raise"))}
    dependents = [task("standin_staging_probe", 100 + i, deps=(t.id,)) for i, t in enumerate(crashers.values())]
    siblings = [task("standin_staging_probe", 200 + i) for i in range(12)]
    tasks = [*crashers.values(), *dependents, *siblings]
    plan = Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={t.id: t for t in tasks}, targets={})
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_workers=2) as rt:
        first = rt.run(plan)
        errors = {mode: first.results[t.id].error or "" for mode, t in crashers.items()}
        assert all(first.results[t.id].status == "failed" for t in crashers.values()), errors
        assert "SIGABRT" in errors["abort"] and "SIGSEGV" in errors["segfault"] and "exit code 3" in errors["exit"]
        assert "RuntimeError: handler failed mid-write" in errors["raise"]
        assert all(first.results[t.id].status == "blocked" for t in dependents)
        assert all(first.results[t.id].status == "done" for t in siblings)  # each crash failed alone
        for t in siblings:  # no sibling's staging directory held a crasher's half-written file
            assert res_extra(first, t)["seen"] == []
        assert verify(ws) == []  # the index and every blob are consistent
        for t in crashers.values():
            assert ws.outputs(t.id) is None and ws.task_status(t.id)["status"] == "failed"
        assert not [p for p in ws.blobs.rglob("*") if p.is_file() and b"PARTIAL" in p.read_bytes()]
        leftovers = [p for p in ws.staging.rglob("facts.json") if b"PARTIAL" in p.read_bytes()]
        assert len(leftovers) == 4  # the half-written files stay in their own staging directories only

        again = rt.run(plan)  # the markers exist now: the crashers succeed
        assert again.ok, [r.error for r in again.failed()]
        assert {res_extra(again, t)["mode"] for t in crashers.values()} == set(crashers)
        assert all(res_extra(again, t)["seen"] == [] for t in dependents)  # fresh directories, not the crashed ones
        assert again.count("reused") == len(siblings) and verify(ws) == []
        assert not [p for p in ws.blobs.rglob("*") if p.is_file() and b"PARTIAL" in p.read_bytes()]
    with Workspace(tmp_path / "ws") as ws:
        assert ws.clean_staging() == 4  # only the crashed attempts' directories were left; close removed the rest
        assert list(ws.staging.iterdir()) == [] and verify(ws) == []


def res_extra(res, task) -> dict:
    return res.outputs(task.id)["facts"].read_json()["extra"]
