"""The Ray engine on a local two-node Ray cluster (``ray.cluster_utils.Cluster``, both nodes on
127.0.0.1, one CPU each) with the CPU stand-in collects: the same plan as the embedded engine, the same
report, one workspace for both; a killed Ray worker fails only its branch, which re-runs; a campaign
of 20 queries runs on the cluster and resumes after an interruption.

Device workers ask for a custom resource instead of a GPU (``COLLECT``), each node offering one.
One cluster serves the whole module and is shut down at its end, with a check that no process of it
is left. The stand-in backend and handlers below are registered at import: Ray's workers and the
worker children import this module by name.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

# Before ray is imported: every address of the test cluster stays on the loopback interface (Ray
# otherwise swaps 127.0.0.1 for this host's outward address), and no usage statistics are collected.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
ray = pytest.importorskip("ray")

from argus_rt.backends.base import BackendAdapter, register_backend  # noqa: E402
from argus_rt.gpu_env import MULTICAST_OFF  # noqa: E402
from argus_rt.query import query  # noqa: E402
from argus_rt.runtime.handlers import register_synthesis  # noqa: E402
from argus_rt.tasks import Plan, Task  # noqa: E402
from argus_rt.workspace import Workspace  # noqa: E402
from argus_rt.workspace_check import verify  # noqa: E402
from test_runtime import SIGNALS  # noqa: E402  (registers the stand-in discovery and probe transform)
from test_runtime_cpu_tasks import alive  # noqa: E402
from test_runtime_standins import demo_program, standins  # noqa: E402,F401  (fixture)

COLLECT = {"num_gpus": 0, "argus_device": 1}  # a device worker per node, no GPU needed
OPTIONS = {"collect_resources": COLLECT}


class VictimCollect(BackendAdapter):
    """The first time (no marker file yet): write the marker with our pids, then hang until killed."""

    name = "ray_victim"
    outputs = ("done",)
    needs_gpu = False

    def collect(self, ctx):
        marker = Path(ctx.config["marker"])
        if not marker.exists():
            marker.write_text(json.dumps({"pid": os.getpid(), "ppid": os.getppid()}))
            time.sleep(120)
        return {"done": ctx.write_json("done", {"n": ctx.config.get("n", 0)})}


class EnvCollect(BackendAdapter):
    """Writes the multicast variables its process sees."""

    name = "ray_env"
    outputs = ("env",)
    needs_gpu = False

    def collect(self, ctx):
        return {"env": ctx.write_json("env", {k: os.environ.get(k) for k in MULTICAST_OFF})}


register_backend(VictimCollect(), replace=True)
register_backend(EnvCollect(), replace=True)


@register_synthesis("ray_victim_cpu")
def _victim_cpu(ctx):
    marker = Path(ctx.task.config["marker"])
    if not marker.exists():
        marker.write_text(json.dumps({"pid": os.getpid()}))
        time.sleep(120)
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": "victim", "values": []})}


@register_synthesis("ray_env_cpu")
def _env_cpu(ctx):
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": "env", "values": [],
                                              "extra": {k: os.environ.get(k) for k in MULTICAST_OFF}})}


def _session_processes(session_dir: str) -> list[int]:
    """Live processes whose command line names the cluster's session directory."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().decode(errors="replace")
        except OSError:
            continue
        if session_dir in text and alive(int(cmdline.parent.name)):
            found.append(int(cmdline.parent.name))
    return found


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes on 127.0.0.1 (one CPU and one ``argus_device`` each); this process is the driver."""
    from ray.cluster_utils import Cluster

    node = {"node_ip_address": "127.0.0.1", "num_cpus": 1, "resources": {"argus_device": 1},
            "include_dashboard": False, "object_store_memory": 80 << 20}
    c = Cluster(initialize_head=True, head_node_args=node)
    session = c.head_node.get_session_dir_path()
    try:
        c.add_node(**{k: v for k, v in node.items() if k != "include_dashboard"})
        ray.init(address=c.address, logging_level="WARNING")
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        deadline = time.monotonic() + 20
        while _session_processes(session) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _session_processes(session)
        assert not left, f"processes of the Ray test cluster outlived it: {left}"


def _strip(report) -> dict:
    """A report without what depends on when and how fast it ran."""
    doc = report.to_dict()
    doc["execution"] = {k: v for k, v in doc["execution"].items() if k not in ("wall_s", "task_seconds")}
    return doc


def test_ray_report_equals_embedded_and_reuse_crosses_engines(cluster, standins, tmp_path):
    pv = demo_program()
    signals = [*SIGNALS, "async_completion_latency"]  # a Control task whose branches appear at run time
    embedded = query(pv, "gemm", signals, workspace=tmp_path / "a", devices=[""])
    on_ray = query(pv, "gemm", signals, workspace=tmp_path / "b", engine="ray", engine_options=OPTIONS)
    assert on_ray.unanswered == [] and embedded.unanswered == []
    assert _strip(on_ray) == _strip(embedded)
    assert on_ray.execution["collect_runs"] == 11  # trace, mapping run, systrace, 8 probes
    with Workspace(tmp_path / "b") as ws:
        assert verify(ws) == []
    # the workspace is the one source of truth: each engine reuses what the other committed
    again = query(pv, "gemm", signals, workspace=tmp_path / "b", devices=[""])
    assert again.execution["tasks"]["done"] == 0 and again.values == embedded.values
    back = query(pv, "gemm", signals, workspace=tmp_path / "a", engine="ray", engine_options=OPTIONS)
    assert back.execution["tasks"]["done"] == 0 and back.values == embedded.values


def _victim_plan(tmp_path: Path) -> tuple[Plan, dict]:
    """A collect that hangs once, its synthesis, and an independent branch whose synthesis hangs once."""
    pv = demo_program()
    hang = Task(kind="collect", op="ray_victim", program=pv.id, config={"marker": str(tmp_path / "collect.json")},
                outputs=("done",), timeout_s=60)
    join = Task(kind="synthesize", op="standin_where", program=pv.id, deps=(hang.id,), outputs=("facts",))
    quick = Task(kind="collect", op="ray_victim", program=pv.id, outputs=("done",), timeout_s=60,
                 config={"marker": str(tmp_path / "never"), "n": 1})
    (tmp_path / "never").write_text("{}")  # this one never hangs
    cpu = Task(kind="synthesize", op="ray_victim_cpu", program=pv.id, deps=(quick.id,), outputs=("facts",),
               config={"marker": str(tmp_path / "cpu.json")}, timeout_s=60)
    tasks = [hang, join, quick, cpu]
    plan = Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={t.id: t for t in tasks}, targets={})
    return plan, {"hang": hang.id, "join": join.id, "quick": quick.id, "cpu": cpu.id}


def _wait_for(path: Path, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout} s")


@pytest.mark.slow
def test_killed_ray_workers_fail_only_their_branches_which_rerun(cluster, standins, tmp_path):
    from argus_rt.engines.ray_engine import RayRuntime

    plan, ids = _victim_plan(tmp_path)
    killed = {}

    def kill() -> None:
        collect = _wait_for(tmp_path / "collect.json")  # the collection hangs in the device actor's child
        os.kill(collect["ppid"], signal.SIGKILL)  # the device actor: a Ray worker process
        killed["actor"], killed["child"] = collect["ppid"], collect["pid"]
        cpu = _wait_for(tmp_path / "cpu.json")  # the synthesis hangs in a Ray task's worker
        os.kill(cpu["pid"], signal.SIGKILL)
        killed["cpu"] = cpu["pid"]

    with Workspace(tmp_path / "ws") as ws, RayRuntime(ws, ship="always", **OPTIONS) as rt:
        killer = threading.Thread(target=kill, daemon=True)
        killer.start()
        res = rt.run(plan)
        killer.join(5)
        assert set(killed) == {"actor", "child", "cpu"}
        status = {name: res.results[tid].status for name, tid in ids.items()}
        assert status == {"hang": "failed", "join": "blocked", "quick": "done", "cpu": "failed"}, status
        assert "killed: Ray worker lost (ActorDiedError" in res.results[ids["hang"]].error
        assert "killed: Ray worker lost (WorkerCrashedError" in res.results[ids["cpu"]].error
        assert verify(ws) == [] and ws.task_status(ids["hang"])["status"] == "failed"
        deadline = time.monotonic() + 20  # the hung collection's child dies with its actor
        while alive(killed["child"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(killed["child"]), "the worker child outlived its killed Ray actor"
        again = rt.rerun_failed(res)  # a fresh device actor takes the collection
        assert again.ok, [r.error for r in again.failed()]
        assert again.executed == {"collect": 1, "synthesize": 2}
        assert again.results[ids["quick"]].status == "reused"
        assert verify(ws) == []


def test_ray_workers_run_with_multicast_off_even_when_asked_otherwise(cluster, tmp_path):
    from argus_rt.engines.ray_engine import RayRuntime

    pv = demo_program()
    collect = Task(kind="collect", op="ray_env", program=pv.id, outputs=("env",), timeout_s=60)
    synth = Task(kind="synthesize", op="ray_env_cpu", program=pv.id, deps=(collect.id,), outputs=("facts",))
    plan = Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={collect.id: collect, synth.id: synth}, targets={})
    unsafe = {"NCCL_NVLS_ENABLE": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "0", "NVSHMEM_DISABLE_NVLS": "0"}
    with Workspace(tmp_path / "ws") as ws, RayRuntime(ws, env_vars=unsafe, devices=[""], **OPTIONS) as rt:
        res = rt.run(plan)
        assert res.ok, [r.error for r in res.failed()]
        actors = rt.device_info()
        assert actors and all(a["env"] == MULTICAST_OFF for a in actors)  # the device actor itself
        assert res.outputs(collect.id)["env"].read_json() == MULTICAST_OFF  # its worker child
        extra = res.outputs(synth.id)["facts"].read_json()["extra"]
        assert extra == MULTICAST_OFF  # a Transform/Synthesize Ray task


def test_ray_engine_spreads_device_workers_over_the_nodes(cluster, tmp_path):
    from argus_rt.engines.ray_engine import RayRuntime

    with Workspace(tmp_path / "ws") as ws, RayRuntime(ws, **OPTIONS) as rt:
        rt.start_workers(timeout=60)
        info = rt.device_info()
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(info) == 2 and {a["node"] for a in info} == nodes  # one per node: one argus_device each


def test_unsatisfiable_collect_resources_fail_the_collections_with_a_reason(cluster, standins, tmp_path):
    pv = demo_program()
    rep = query(pv, "gemm", ["latency"], workspace=tmp_path / "ws", engine="ray",
                engine_options={"collect_resources": {"num_gpus": 1}})  # the test cluster has no GPU
    assert rep.unanswered and "no Ray node offers the resources of a device worker {num_gpus: 1}" \
        in rep.unanswered[0]["reason"]


def test_ray_campaign_of_20_queries_runs_and_resumes(cluster, standins, tmp_path):
    from argus_rt.campaign import load_campaign, run_campaign
    from test_campaign import write_campaign

    path = write_campaign(tmp_path, regions=["main", "main/gemm", "main/gemm/load", "main/gemm/mma",
                                             "main/epilogue"], signals=["latency", "instruction_mix"],
                          engine="ray", engine_options=OPTIONS)
    campaign = load_campaign(path)
    assert len(campaign.queries) == 20

    def stop_after_7(outcome) -> None:
        if outcome.query.index == 6:
            raise KeyboardInterrupt

    first = run_campaign(campaign, workspace=tmp_path / "ws", on_query=stop_after_7)
    assert first.interrupted and len(first.outcomes) == 7
    assert all(o.status == "ran" or o.status == "reused" for o in first.outcomes)
    resumed = run_campaign(campaign, workspace=tmp_path / "ws")
    assert resumed.ok and len(resumed.outcomes) == 20
    for o in resumed.outcomes[:7]:  # finished before the interruption: nothing of them runs again
        assert o.status == "reused" and o.report["execution"]["tasks"]["done"] == 0, o.row()
    assert {o.status for o in resumed.outcomes} == {"ran", "reused"}


@register_synthesis("ray_sleep_cpu")
def _sleep_cpu(ctx):
    time.sleep(float(ctx.task.config["sleep_s"]))
    return {"facts": ctx.write_json("facts", {"format": "argus.facts/1", "signal": "sleep", "values": []})}


def test_ray_timeouts_count_from_the_start_and_kill_the_task(cluster, standins, tmp_path):
    from argus_rt.engines.ray_engine import RayRuntime

    pv = demo_program()
    (tmp_path / "never").write_text("{}")
    slow_collect = Task(kind="collect", op="standin_sleep", program=pv.id, config={"sleep_s": 60}, outputs=("done",),
                        timeout_s=2)
    quick = Task(kind="collect", op="ray_victim", program=pv.id, outputs=("done",), timeout_s=60,
                 config={"marker": str(tmp_path / "never")})
    slow_cpu = Task(kind="synthesize", op="ray_sleep_cpu", program=pv.id, deps=(quick.id,), outputs=("facts",),
                    config={"sleep_s": 60}, timeout_s=2)
    fine_cpu = Task(kind="synthesize", op="ray_sleep_cpu", program=pv.id, deps=(quick.id,), outputs=("facts",),
                    config={"sleep_s": 0.1}, timeout_s=30)
    tasks = [slow_collect, quick, slow_cpu, fine_cpu]
    plan = Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={t.id: t for t in tasks}, targets={})
    with Workspace(tmp_path / "ws") as ws, RayRuntime(ws, **OPTIONS) as rt:
        start = time.monotonic()
        res = rt.run(plan)
        wall = time.monotonic() - start
    assert wall < 40, wall  # nobody waited for the 60 s sleeps
    assert res.results[quick.id].status == "done" and res.results[fine_cpu.id].status == "done"
    assert res.results[slow_collect.id].status == "failed"
    assert res.results[slow_collect.id].error.startswith("timeout: task exceeded its timeout of 2")
    assert res.results[slow_cpu.id].status == "failed"
    assert res.results[slow_cpu.id].error.startswith("timeout: task exceeded its timeout of 2")


def test_query_command_runs_on_ray(cluster, standins, tmp_path, capsys):
    from argus_rt.cli import main
    from test_query import write_program_dir

    prog = write_program_dir(tmp_path / "prog", demo_program())
    out = tmp_path / "r.json"
    args = ["query", str(prog), "--region", "gemm", "--signals", "latency", "--workspace", str(tmp_path / "ws"),
            "--engine", "ray", "--collect-resources", json.dumps(COLLECT), "--json", str(out)]
    assert main(args) == 0, capsys.readouterr()
    doc = json.loads(out.read_text())
    assert doc["unanswered"] == [] and doc["execution"]["collect_runs"] == 1
    assert main(args) == 0  # again: all reused
    assert json.loads(out.read_text())["execution"]["tasks"]["done"] == 0
    assert main(args[:-4] + ["--collect-resources", "[1]"]) == 2
    assert "--collect-resources must be a JSON object" in capsys.readouterr().err


@pytest.mark.slow
def test_a_lost_node_fails_its_collection_and_the_branch_reruns_on_another(cluster, standins, tmp_path):
    """A third node is the only one with the device worker's resource; it is removed while its
    collection hangs, and a fresh node with the resource joins: the rerun runs there. Last in the
    module (the cluster keeps the fresh node)."""
    from argus_rt.engines.ray_engine import RayRuntime

    pv = demo_program()
    hang = Task(kind="collect", op="ray_victim", program=pv.id, config={"marker": str(tmp_path / "collect.json")},
                outputs=("done",), timeout_s=90)
    plan = Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={hang.id: hang}, targets={})
    far = {"node_ip_address": "127.0.0.1", "num_cpus": 0, "resources": {"argus_far": 1},
           "object_store_memory": 80 << 20}
    doomed = cluster.add_node(**far)
    with Workspace(tmp_path / "ws") as ws, RayRuntime(ws, collect_resources={"num_gpus": 0, "argus_far": 1}) as rt:
        got = {}
        runner = threading.Thread(target=lambda: got.setdefault("res", rt.run(plan)), daemon=True)
        runner.start()  # Ray's node handling needs the main thread: the plan runs beside it
        child = _wait_for(tmp_path / "collect.json")["pid"]
        cluster.remove_node(doomed, allow_graceful=False)
        fresh = cluster.add_node(**far).node_id
        runner.join(60)
        lost = got["res"].results[hang.id]
        assert lost.status == "failed" and lost.error.startswith("killed: Ray worker lost"), lost.error
        again = rt.rerun_failed(got["res"])  # the replacement device actor comes up on the fresh node
        assert again.ok, [r.error for r in again.failed()]
        assert {a["node"] for a in rt.device_info()} == {fresh}
    assert not alive(child)
