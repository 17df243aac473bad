"""`argus query examples/triton --region tma_matmul/kloop --signals async_completion_latency` up to the
GPU collect, on the CPU: the plan, the real discovery Control task and its 24 branches (two TMA loads
and the WGMMA dot, 8 iterations each), probe transforms compiled to cubins, and a run through the runtime where only the two GPU collections
(traced reference, probe) are CPU stand-ins that write the documented evidence formats."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton")

from argus_rt.backends.base import get_backend, register_backend  # noqa: E402
from argus_rt.kinds.triton import probes as P  # noqa: E402
from argus_rt.program import load_program  # noqa: E402
from argus_rt.scope import Scope  # noqa: E402
from tests.backend_swap import StandinTritonTraceBase, standin_triton_trace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
N_CTAS = 3
NOISE = (-1, 0, 1)  # per-CTA offsets: the median over CTAs is the middle one exactly


def wait_ns(it: int) -> int:
    return 1000 + 100 * it


def probe_ns(op_id: str, it: int) -> int:
    return 400 + 10 * it + int(op_id, 16) % 7


class StandinTritonTrace(StandinTritonTraceBase):
    """CPU stand-in for the Triton 'trace' adapter (tests only): same configs, effects and formats;
    builds the evidence with the real document helpers from synthetic device buffers."""

    outputs = ("op_events", "iteration_waits")

    def collect(self, ctx):
        rng = np.random.default_rng(abs(hash(ctx.task.id)) % 2**32)
        if "reference" in ctx.config:
            iters = ctx.program.launch["iterations"]
            buf = np.zeros((N_CTAS, iters, 2), dtype=np.int64)
            for c in range(N_CTAS):
                for it in range(iters):
                    begin = 10**12 + int(rng.integers(0, 10**6))
                    buf[c, it] = (begin, begin + wait_ns(it) + NOISE[c])
            doc = P.iteration_waits_document(buf.ravel(), N_CTAS, iters, wait="stand-in")
            return {"iteration_waits": ctx.write_json("iteration_waits", doc)}
        # a probe: the Transform's probe TTGIR and cubin must have reached this collect
        assert Path(ctx.inputs["ttgir"]).read_text().count("%argus_probe_out") > 0
        assert Path(ctx.inputs["cubin"]).stat().st_size > 0
        op_id, it = ctx.config["probe"]["op_id"], ctx.config["probe"]["iteration"]
        assert ctx.program.params["op_id"] == op_id and ctx.program.params["iteration"] == it
        buf = np.zeros((N_CTAS, P.WORDS_PER_CTA), dtype=np.int64)
        for c in range(N_CTAS):
            ns0 = 2 * 10**12 + int(rng.integers(0, 10**6))  # another run's clock: never compared
            buf[c] = (ns0, ns0 + probe_ns(op_id, it), 5, 5 + 2 * probe_ns(op_id, it), c)
        doc = P.op_events_document(buf.ravel(), N_CTAS, int(op_id, 16), it)
        return {"op_events": ctx.write_json("op_events", doc)}


if os.environ.get("ARGUS_TRITON_STANDIN_WORKER") == "1":  # spawned workers import this module
    register_backend(StandinTritonTrace(), kind="triton", replace=True)


@pytest.fixture
def standin_trace():
    with standin_triton_trace(StandinTritonTrace(), "ARGUS_TRITON_STANDIN_WORKER"):
        yield


@pytest.fixture(scope="module")
def program():
    return load_program(ROOT / "examples" / "triton")


def test_fresh_process_finds_the_triton_trace_adapter():
    code = ("from argus_rt.backends.base import get_backend, backend_module; "
            "a = get_backend('trace', 'triton'); print(type(a).__name__, backend_module('trace', 'triton'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["TraceAdapter", "argus_rt.backends.trace"]


def test_plan_uses_the_traced_iteration_reference(program):
    from argus_rt.planner import plan_query

    plan = plan_query(program, "tma_matmul/kloop", ["async_completion_latency"])
    ops = sorted((t.kind, t.op) for t in plan.tasks.values())
    assert ops == [("collect", "trace"), ("control", "async_discovery"), ("synthesize", "async_completion_latency"),
                   ("synthesize", "iteration_waits"), ("transform", "variant")]
    ref = next(t for t in plan.tasks.values() if t.kind == "collect")
    assert ref.config == {"reference": "iteration_waits"} and ref.outputs == ("iteration_waits",)
    adapter = get_backend("trace", "triton")
    adapter.validate_config(ref.config)
    assert adapter.effects_for(ref.config) <= set(ref.effects)  # the worker's check passes
    # latency on a Triton program: the adapter accepts the region-tracing config and the worker's effect check passes
    lat = next(t for t in plan_query(program, "tma_matmul", ["latency"]).tasks.values() if t.kind == "collect")
    adapter.validate_config(lat.config)
    assert adapter.effects_for(lat.config) <= set(lat.effects)
    assert lat.outputs == ("region_intervals",)
    # CUDA programs keep region latency as the reference
    from argus_rt.recipes import get_recipe

    assert get_recipe("async_completion_latency").prerequisites_for("cuda") == ("latency",)


def test_discovery_expands_one_probe_run_per_site_and_iteration(program, tmp_path):
    from argus_rt.branches import BranchBuilder
    from argus_rt.probe_expander import PROBE_EFFECTS
    from argus_rt.runtime.handlers import TaskContext, get_handler
    from argus_rt.tasks import Task

    control = Task(kind="control", op="async_discovery", program=program.id, region="tma_matmul/kloop")
    out = tmp_path / "control"
    out.mkdir()
    outputs = get_handler("control", "async_discovery", "triton")(
        TaskContext(task=control, program=program, programs=lambda pid: program, inputs={}, outdir=out))
    builder = BranchBuilder(control, {program.id: program.to_dict()})
    get_handler("expander", "forced_wait_probes")(
        TaskContext(task=control, program=program, programs=lambda pid: program,
                    inputs={"async_sites": Path(outputs["async_sites"])}, outdir=out), builder)
    collects = [t for t in builder.new_tasks.values() if t.kind == "collect"]
    assert len(collects) == 24 and len(builder.fed) == 24  # TMA loads a, b and the WGMMA dot, 8 iterations each
    assert {t.outputs for t in collects} == {("op_events",)}  # what the Triton adapter publishes
    adapter = get_backend("trace", "triton")
    for t in collects:
        adapter.validate_config(t.config)
        assert adapter.effects_for(t.config) <= set(t.effects) == set(PROBE_EFFECTS)


def test_iteration_waits_document_agrees_with_the_benchmark_helper():
    rng = np.random.default_rng(11)
    n, iters = 5, 8
    begin = rng.integers(1, 10**9, (n, iters))
    buf = np.stack([begin, begin + rng.integers(0, 5000, (n, iters))], axis=-1).ravel()
    doc = P.iteration_waits_document(buf, n, iters)
    cols = {k: np.asarray(v) for k, v in doc["columns"].items()}
    ref = P.iteration_waits(buf, n, iters)
    for it in range(iters):
        sel = cols["iteration"] == it
        assert np.median(cols["end"][sel] - cols["begin"][sel]) == ref[it]
    buf2 = buf.copy()
    buf2[2 * (iters * 1 + 3)] = buf2[2 * (iters * 1 + 3) + 1] = 0  # CTA 1, iteration 3 never recorded, 4.. were
    with pytest.raises(P.ProbeError, match="CTA 1 did not record iteration 3 of loop 0 but recorded iteration 4"):
        P.iteration_waits_document(buf2, n, iters)


def test_query_runs_end_to_end_with_stand_in_collects(program, standin_trace, tmp_path):
    from argus_rt.planner import plan_query
    from argus_rt.report import Report
    from argus_rt.runtime.scheduler import Runtime
    from argus_rt.workspace import Workspace

    plan = plan_query(program, "tma_matmul/kloop", ["async_completion_latency"], Scope(iterations=(2, 4)))
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_workers=2) as rt:
        res = rt.run(plan)
        assert res.ok, [(r.op, r.error) for r in res.failed()]
        report = Report.from_run(plan, res)
    probes = [t for t in res.plan.tasks.values() if t.kind == "collect" and "probe" in t.config]
    assert len(probes) == 6  # 2 TMA loads and the WGMMA dot x iterations 2, 3: each its own run
    values = report.select("async_completion_latency")
    sites = json.loads(next(r for r in res.results.values() if r.op == "async_discovery")
                       .outputs["async_sites"].path.read_text())["sites"]
    assert sorted(s["kind"] for s in sites) == ["tma_load", "tma_load", "wgmma"]
    want = {(s["op_id"], it): (probe_ns(s["op_id"], it), wait_ns(it), s["kind"]) for s in sites for it in (2, 3)}
    got = {(v["join"]["op_id"], v["join"]["iteration"]): (v["value"], v["join"]["reference_wait_ns"], v["join"]["kind"])
           for v in values}
    assert got == want
    assert {v["qualification"] for v in values} == {"derived"}
    assert {v["region"] for v in values} == {s["region"] for s in sites}
    assert all(v["samples"] == N_CTAS for v in values)


def test_collections_check_the_kernel_against_its_pytorch_reference():
    from types import SimpleNamespace

    import torch

    gen = torch.Generator().manual_seed(5)
    inputs = {"a": torch.randn(64, 32, generator=gen).half(), "b": torch.randn(48, 32, generator=gen).half()}
    mod = SimpleNamespace(reference=lambda a, b: (a.float() @ b.float().T).half())
    good = mod.reference(inputs["a"], inputs["b"])
    assert P.check_module_reference(mod, inputs, good) == 0.0
    bad = good.clone()
    bad[:8] = 0  # a kernel that skipped a tile
    with pytest.raises(P.ProbeError, match="relative error .* > 0.01"):
        P.check_module_reference(mod, inputs, bad)
    with pytest.raises(P.ProbeError, match="no plain reference"):
        P.check_module_reference(SimpleNamespace(), inputs, good)
