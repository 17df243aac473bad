"""Runtime: dependency-driven dispatch, Control branches, failures, SIGKILL, timeouts, devices, reuse.

Collect tasks here are CPU stand-ins (tests/test_runtime_standins.py) run in real spawned workers.
"""
from __future__ import annotations

import json
import time

import pytest

from argus_rt.planner import plan_query
from argus_rt.recipes import Evidence, Recipe, register_recipe, unregister_recipe
from argus_rt.runtime.handlers import register_control, register_expander, register_synthesis, register_transform
from argus_rt.runtime.scheduler import Runtime
from argus_rt.scope import Scope
from argus_rt.tasks import Task
from argus_rt.workspace import Workspace
from argus_rt.workspace_check import verify
from test_runtime_standins import demo_program, standins  # noqa: F401  (fixture)

SITES = {"format": "argus.async_sites/1",
         "sites": [{"op_id": f"tma{j}", "kind": "tma_load", "region": "main/gemm/load", "iterations": [0, 1, 2, 3],
                    "completion": {"barrier": j, "phase": "iter % 2"}} for j in range(2)]}


@register_control("async_discovery", kind="standin")
def _discover(ctx):
    return {"async_sites": ctx.write_json("async_sites", SITES)}


@register_transform("forced_wait_probe", kind="standin")
def _probe(ctx):
    return {"program": ctx.write_program(ctx.program.variant_of("probe", op_id=ctx.config["op_id"],
                                                                iteration=ctx.config["iteration"]))}


@register_synthesis("standin_where")
def _where(ctx):
    rows = [json.loads(p.read_text()) for _dep, p in ctx.input_list("done")]
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": "where", "values": [],
                                              "extra": {"runs": rows}})}


@pytest.fixture
def ws(tmp_path):
    with Workspace(tmp_path / "ws") as w:
        yield w


@pytest.fixture
def sleepy():
    """Recipe 'sleepy': four isolated 0.3 s stand-in collections."""
    evs = tuple(Evidence("standin_sleep", outputs=("done",), variant="base", config={"sleep_s": 0.3, "n": i},
                         isolated=True) for i in range(4))
    register_recipe(Recipe("sleepy", synthesis="standin_where", qualification="observed", evidence=evs), replace=True)
    yield
    unregister_recipe("sleepy")


SIGNALS = ["latency", "instruction_mix", "barrier_count", "stall_reasons", "system_timeline"]


def test_full_query_runs_and_second_identical_query_runs_zero_collects(standins, ws):
    plan = plan_query(demo_program(), "gemm", SIGNALS)
    with Runtime(ws, devices=[""]) as rt:
        first = rt.run(plan)
        assert first.ok, [r.error for r in first.failed()]
        assert first.executed["collect"] == 3  # trace, the mapping run (map + every per-PC counter), systrace
        second = rt.run(plan)
    assert second.ok and second.executed.get("collect", 0) == 0 and sum(second.executed.values()) == 0
    assert second.count("reused") == len(plan.tasks)
    for tid in plan.targets.values():  # the reused facts are the very same blobs
        assert first.outputs(tid)["facts"].sha256 == second.outputs(tid)["facts"].sha256


def test_zoom_in_reuses_the_parent_query_collections(standins, ws):
    pv = demo_program()
    with Runtime(ws, devices=[""]) as rt:
        rt.run(plan_query(pv, "main", ["latency", "instruction_mix"]))
        child = rt.run(plan_query(pv, "main/gemm/mma", ["latency", "instruction_mix"]))
    assert child.ok and child.executed.get("collect", 0) == 0
    assert child.executed["synthesize"] == 2  # only the region-specific syntheses are new


def test_control_task_adds_branches_that_run(standins, ws):
    pv = demo_program()
    plan = plan_query(pv, "gemm", ["async_completion_latency"])
    assert plan.count("collect") == 1  # before discovery: only the reference trace
    with Runtime(ws, devices=["", ""]) as rt:
        res = rt.run(plan)
    assert res.ok, [r.error for r in res.failed()]
    probes = [t for t in res.plan.tasks.values() if t.kind == "collect" and "probe" in t.config]
    assert len(probes) == 8  # 2 sites x 4 iterations, each its own run
    assert all(set(t.effects) == {"forces_completion", "changes_overlap", "perturbs_timing"} for t in probes)
    assert len({t.program for t in probes}) == 8
    facts = res.outputs(plan.targets["async_completion_latency"])["facts"].read_json()
    got = {v["metric"]: v["value"] for v in facts["values"]}
    # reference: the stand-in's op events complete 300 + 20 j ns after issue
    assert got == {f"tma{j}@{i}": 300.0 + 20 * j for j in range(2) for i in range(4)}
    assert {v["qualification"] for v in facts["values"]} == {"derived"}
    ref = {v["join"]["iteration"]: v["join"]["reference_region_mean"] for v in facts["values"]}
    assert ref == {i: 100.0 for i in range(4)}  # main/gemm/load lasts 100 ns in every iteration


def test_control_branches_respect_the_iteration_window(standins, ws):
    plan = plan_query(demo_program(), "gemm", ["async_completion_latency"], Scope(iterations=(1, 3)))
    with Runtime(ws, devices=[""]) as rt:
        res = rt.run(plan)
    assert res.ok
    facts = res.outputs(plan.targets["async_completion_latency"])["facts"].read_json()
    assert sorted(v["metric"] for v in facts["values"]) == ["tma0@1", "tma0@2", "tma1@1", "tma1@2"]


def test_sigkilled_worker_fails_only_dependents_and_branch_reruns(standins, tmp_path):
    marker = tmp_path / "killed-once"
    pv = demo_program(kill_once=str(marker), only="pcmap")
    plan = plan_query(pv, "gemm", ["latency", "instruction_mix", "system_timeline"])
    mapping = next(t.id for t in plan.tasks.values() if t.op == "pcmap")
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""]) as rt:
        res = rt.run(plan)
        assert marker.exists()
        assert res.results[mapping].status == "failed" and "killed" in res.results[mapping].error
        assert res.results[plan.targets["instruction_mix"]].status == "blocked"
        assert res.results[plan.targets["latency"]].status == "done"  # independent branches finish
        assert res.results[plan.targets["system_timeline"]].status == "done"
        # nothing of the half-written file is visible: index consistent, no blob holds it
        assert verify(ws) == []
        assert ws.outputs(mapping) is None and ws.task_status(mapping)["status"] == "failed"
        for blob in ws.blobs.rglob("*"):
            if blob.is_file():
                assert b'"region_id": [1, 2' not in blob.read_bytes()
        assert ws.stats()["staging_dirs"] >= 1  # the leftover is only in staging
        again = rt.rerun_failed(res)
        assert again.ok
        # only the failed collect and its blocked dependents (the map and instruction_mix) ran again
        assert again.executed == {"collect": 1, "synthesize": 2}
        assert verify(ws) == []
        ws.clean_staging()
        assert ws.stats()["staging_dirs"] == 0


def test_failing_task_blocks_only_its_dependents(standins, ws):
    pv = demo_program(fail="tool exploded", only="systrace")
    plan = plan_query(pv, "gemm", ["latency", "system_timeline"])
    with Runtime(ws, devices=[""]) as rt:
        res = rt.run(plan)
    sys_t = plan.targets["system_timeline"]
    assert res.results[sys_t].status == "blocked"
    assert res.results[plan.targets["latency"]].status == "done"
    err = [r.error for r in res.failed() if r.status == "failed"]
    assert len(err) == 1 and "RuntimeError: tool exploded" in err[0]


def test_collect_timeout_kills_the_worker_and_the_next_task_runs(standins, ws):
    pv = demo_program(sleep_s=30, only="systrace")
    plan = plan_query(pv, "gemm", ["system_timeline", "latency"], timeouts={"collect": 1.5})
    start = time.monotonic()
    with Runtime(ws, devices=[""]) as rt:
        res = rt.run(plan)
        assert time.monotonic() - start < 20
        sys_c = next(t.id for t in plan.tasks.values() if t.op == "systrace")
        assert res.results[sys_c].status == "failed" and res.results[sys_c].error.startswith("timeout")
        assert res.results[plan.targets["latency"]].status == "done"
        # the killed worker is replaced: a later collection on the same device still runs
        later = rt.run(plan_query(pv, "gemm", ["instruction_mix"]))
        assert later.ok and later.executed["collect"] == 1  # the mapping run
        assert rt.workers[0].started_processes == 2


def test_collections_are_serialised_per_device_and_parallel_across_devices(standins, sleepy, ws):
    plan = plan_query(demo_program(), "gemm", ["sleepy"])
    assert plan.count("collect") == 4
    with Runtime(ws, devices=["0", "1"]) as rt:
        rt.start_workers()  # both processes up before the clock matters
        res = rt.run(plan)
    assert res.ok, [r.error for r in res.failed()]
    runs = res.outputs(plan.targets["sleepy"])["facts"].read_json()["extra"]["runs"]
    assert {r["device"] for r in runs} <= {"0", "1"}
    by_dev: dict = {}
    for r in runs:
        by_dev.setdefault(r["device"], []).append((r["start"], r["end"]))
    for spans in by_dev.values():  # never two runs at once on one device
        spans.sort()
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(spans, spans[1:]))
    assert len({r["pid"] for r in runs}) == len(by_dev)  # one worker process per device
    if len(by_dev) == 2:  # both devices worked: overlapping in time
        (a0, a1), (b0, b1) = min(by_dev["0"]), min(by_dev["1"])
        assert a0 < b1 and b0 < a1


def test_worker_sees_only_its_device(standins, sleepy, ws):
    register_recipe(Recipe("sleepy1", synthesis="standin_where", qualification="observed",
                           evidence=(Evidence("standin_sleep", outputs=("done",), variant="base"),)), replace=True)
    try:
        plan = plan_query(demo_program(), "gemm", ["sleepy1"])
        with Runtime(ws, devices=["3"]) as rt:
            res = rt.run(plan)
        runs = res.outputs(plan.targets["sleepy1"])["facts"].read_json()["extra"]["runs"]
        assert [r["device"] for r in runs] == ["3"]
    finally:
        unregister_recipe("sleepy1")


def test_undeclared_backend_effects_are_refused(standins, ws):
    from argus_rt.recipes import get_recipe

    old = get_recipe("system_timeline")
    # a recipe that forgets the profiler's exclusive subscriber: the worker must refuse the run
    register_recipe(Recipe("system_timeline", synthesis="system_timeline", qualification="observed",
                           evidence=(Evidence("systrace", outputs=("system_timeline",), variant="trace_free"),),
                           scope_fields=frozenset({"step"})), replace=True)
    try:
        plan = plan_query(demo_program(), "gemm", ["system_timeline"])
        with Runtime(ws, devices=[""]) as rt:
            res = rt.run(plan)
        err = next(r.error for r in res.failed() if r.status == "failed")
        assert "EffectMismatchError" in err and "exclusive_profiler" in err
    finally:
        register_recipe(old, replace=True)


def test_process_cpu_pool_runs_the_same_plan(standins, tmp_path):
    plan = plan_query(demo_program(), "gemm", ["latency", "instruction_mix", "async_completion_latency"])
    with Workspace(tmp_path / "a") as wa, Runtime(wa, devices=[""]) as rt:
        threads = rt.run(plan)
    with Workspace(tmp_path / "b") as wb, Runtime(wb, devices=[""], cpu_pool="process") as rt:
        procs = rt.run(plan)
    assert threads.ok and procs.ok, [r.error for r in procs.failed()]
    for signal, tid in plan.targets.items():  # same facts, byte for byte
        assert threads.outputs(tid)["facts"].sha256 == procs.outputs(tid)["facts"].sha256, signal
    with pytest.raises(ValueError, match="unknown cpu_pool 'fibers'"):
        Runtime(Workspace(tmp_path / "c"), cpu_pool="fibers")


def test_late_answer_of_a_timed_out_attempt_is_never_committed(ws):
    calls = []

    @register_synthesis("standin_late")
    def _late(ctx):
        calls.append(ctx.outdir)
        time.sleep(1.0 if len(calls) == 1 else 1.6)  # attempt 1 finishes while attempt 2 runs
        return {"facts": ctx.write_json("facts", {"attempt": str(ctx.outdir)})}

    register_recipe(Recipe("t_late", synthesis="standin_late", qualification="derived"), replace=True)
    try:  # threads: a timed-out handler runs on detached and may still answer
        with Runtime(ws, devices=[""], cpu_pool="thread") as rt:
            first = rt.run(plan_query(demo_program(), "gemm", ["t_late"], timeouts={"synthesize": 0.3}))
            tid = next(iter(first.plan.targets.values()))
            assert first.results[tid].status == "failed"
            second = rt.run(plan_query(demo_program(), "gemm", ["t_late"], timeouts={"synthesize": 30}))
        assert second.results[tid].status == "done"
        committed = second.outputs(tid)["facts"].read_json()["attempt"]
        assert committed == str(calls[1]) != str(calls[0])
    finally:
        unregister_recipe("t_late")


@register_synthesis("standin_dag")
def _dag_node(ctx):
    if ctx.config.get("fail"):
        raise RuntimeError(f"node {ctx.config['n']} fails on purpose")
    seen = sorted(json.loads(p.read_text())["n"] for _d, p in ctx.input_list("facts"))
    return {"facts": ctx.write_json("facts", {"n": ctx.config["n"], "inputs": seen})}


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def random_dags(draw):
    n = draw(st.integers(2, 14))
    edges = [sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)]
    fails = draw(st.sets(st.integers(0, n - 1), max_size=3))
    return n, edges, fails


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(random_dags())
def test_random_dags_fail_exactly_the_dependents_of_failures(tmp_path_factory, dag):
    from argus_rt.tasks import Plan, Task

    n, edges, fails = dag
    pv = demo_program()
    tasks: list[Task] = []
    for i in range(n):
        tasks.append(Task(kind="synthesize", op="standin_dag", program=pv.id, deps=tuple(tasks[j].id for j in edges[i]),
                          config={"n": i, "fail": i in fails}, outputs=("facts",)))
    plan = Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={t.id: t for t in tasks}, targets={})
    with Workspace(tmp_path_factory.mktemp("dag")) as w, Runtime(w, devices=[""]) as rt:
        res = rt.run(plan)
        again = rt.run(plan)
    # reference: a node is done iff it does not fail and none of its ancestors fails
    bad: set[int] = set()
    reached_failures = 0
    for i in range(n):
        if any(j in bad for j in edges[i]):
            bad.add(i)
        elif i in fails:
            bad.add(i)
            reached_failures += 1
    for i, t in enumerate(tasks):
        status = res.results[t.id].status
        if i in bad:
            blocked = any(j in bad for j in edges[i])
            assert status == ("blocked" if blocked else "failed")
        else:
            assert status == "done"
            assert res.outputs(t.id)["facts"].read_json()["inputs"] == sorted(edges[i])
    assert again.executed.get("synthesize", 0) == reached_failures  # only failing nodes are attempted again
    assert again.count("reused") == n - len(bad)


def test_a_collection_scope_the_backend_cannot_apply_is_refused(standins, ws):
    register_recipe(Recipe("t_sm_trace", synthesis="latency", qualification="observed", collect_filters={"sms"},
                           evidence=(Evidence("trace", outputs=("region_intervals",), effects={"perturbs_timing"}),)),
                    replace=True)
    try:
        plan = plan_query(demo_program(), "gemm", ["t_sm_trace"], Scope(sms=[0]))
        assert [t.scope for t in plan.tasks.values() if t.kind == "collect"] == [{"sms": [0]}]
        with Runtime(ws, devices=[""]) as rt:
            res = rt.run(plan)
        err = next(r.error for r in res.failed() if r.status == "failed")
        assert "cannot restrict a collection to scope field(s) ['sms']; it applies: none" in err
    finally:
        unregister_recipe("t_sm_trace")


@register_expander("standin_broken")
def _broken_expander(ctx, builder):
    raise ValueError("no sites today")


def dependent_of(control: Task) -> Task:
    return Task(kind="synthesize", op="standin_dag", program=control.program, deps=(control.id,), config={"n": 1},
                outputs=("facts",), label="after discovery")


@register_expander("standin_loop")
def _loop_expander(ctx, builder):
    # a branch that needs the Control's own dependent, fed back into it: neither could ever start
    branch = builder.add(Task(kind="synthesize", op="standin_dag", program=ctx.task.program,
                              deps=(dependent_of(ctx.task).id,), config={"n": 99}, outputs=("facts",),
                              label="loop branch"))
    builder.feed(branch)


def control_plan(expander: str) -> tuple:
    from argus_rt.tasks import Plan

    pv = demo_program()
    control = Task(kind="control", op="async_discovery", program=pv.id, config={"expander": expander},
                   outputs=("async_sites",), label="discover")
    user = dependent_of(control)
    plan = Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={control.id: control, user.id: user}, targets={})
    return plan, control, user


def test_a_failed_expansion_fails_the_control_task_and_it_runs_again(ws):
    plan, control, user = control_plan("standin_broken")
    with Runtime(ws, devices=[""]) as rt:
        res = rt.run(plan)
        r = res.results[control.id]
        assert r.status == "failed" and r.error == "expansion failed: ValueError: no sites today"
        assert res.results[user.id].status == "blocked"
        assert ws.task_status(control.id)["status"] == "failed" and ws.outputs(control.id) is None
        again = rt.run(plan)
    assert again.executed["control"] == 1 and again.results[control.id].status == "failed"


def test_branches_that_would_make_a_cycle_are_refused_with_task_names(ws):
    plan, control, user = control_plan("standin_loop")
    with Runtime(ws, devices=[""]) as rt:
        res = rt.run(plan)
    r = res.results[control.id]
    assert r.status == "failed" and "dependency cycle" in r.error
    assert "(after discovery)" in r.error and "(loop branch)" in r.error
