"""Runtime expansion: the Triton discovery Control handler, the planner's probe expander and the probe
Transform handler work together on the TMA matmul example (CPU only: transforms and compiles)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("triton")

from argus_rt.evidence import AsyncSites  # noqa: E402
from argus_rt.program import load_program  # noqa: E402
from argus_rt.runtime.handlers import TaskContext, get_handler  # noqa: E402
from argus_rt.tasks import Task  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def program():
    p = load_program(ROOT / "examples" / "triton")
    assert p.kind == "triton"
    return p


def _ctx(task, program, tmp, inputs=None):
    out = tmp / task.id
    out.mkdir(parents=True, exist_ok=True)
    return TaskContext(task=task, program=program, programs=lambda pid: program, inputs=inputs or {}, outdir=out)


@pytest.fixture(scope="module")
def discovery_outputs(program, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("control")
    control = Task(kind="control", op="async_discovery", program=program.id, region="tma_matmul/kloop")
    handler = get_handler("control", "async_discovery", "triton")
    return control, handler(_ctx(control, program, tmp))


def test_control_task_publishes_async_sites(discovery_outputs, program):
    _, outputs = discovery_outputs
    assert Path(outputs["async_sites"]).name == "meta.json"  # AsyncSites' store: one checked JSON document
    sites = AsyncSites.from_outputs(outputs.get)
    doc = sites.document()
    assert json.loads(Path(outputs["async_sites"]).read_text()) == doc  # the store is the document, unchanged
    assert doc["format"] == "argus.async_sites/1" and sites.program == program.id
    kinds = [(s["kind"], s["label"]) for s in doc["sites"]]
    assert kinds == [("tma_load", "a"), ("tma_load", "b"), ("wgmma", "acc")]
    # probe candidates: every family (the two TMA loads and the WGMMA dot), 8 iterations each
    assert [len(s["iterations"]) for s in doc["sites"]] == [8, 8, 8]
    assert doc["sites"][2]["logical_iterations"] == list(range(8))
    assert "tma_matmul_kernel" in Path(outputs["ttgir"]).read_text()


def test_expander_and_transform_make_sixteen_linked_probes(discovery_outputs, program, tmp_path):
    control, outputs = discovery_outputs
    from argus_rt.branches import BranchBuilder

    builder = BranchBuilder(control, {program.id: program.to_dict()})
    expand = get_handler("expander", "forced_wait_probes")
    expand(_ctx(control, program, tmp_path, {"async_sites": Path(outputs["async_sites"])}), builder)
    transforms = [t for t in builder.new_tasks.values() if t.kind == "transform"]
    collects = [t for t in builder.new_tasks.values() if t.kind == "collect"]
    assert len(transforms) == 24 and len(collects) == 24  # 2 TMA loads and 1 WGMMA dot x 8 iterations
    assert all("forces_completion" in c.effects for c in collects)
    kinds = {op: s["kind"] for op, s in AsyncSites.from_outputs(outputs.get).by_op_id().items()}
    # run one transform per family: its probe program is the variant the planner expected, linked to the base
    handler = get_handler("transform", "forced_wait_probe", "triton")
    for kind, mark in (("tma_load", r"%argus_pbar"), ("wgmma", r"ttng.warp_group_dot_wait %acc_\d+ \{pendings = 0")):
        task = next(t for t in transforms if t.config["iteration"] == 4 and kinds[t.config["op_id"]] == kind)
        out = handler(_ctx(task, program, tmp_path / kind))
        pv = json.loads(Path(out["program"]).read_text())
        assert pv["id"] == task.config["expect_program"] and pv["base"] == program.id and pv["variant"] == "probe"
        desc = json.loads(Path(out["probe"]).read_text())
        assert desc["op_id"] == task.config["op_id"] and desc["iteration"] == 4 and desc["kind"] == kind
        assert Path(out["cubin"]).stat().st_size > 0 and re.search(mark, Path(out["ttgir"]).read_text())


def test_triton_programs_use_the_one_trace_adapter_and_its_kind_hook(program, tmp_path, monkeypatch):
    import argus_rt.backends.trace  # noqa: F401  (registers the adapter)
    from argus_rt.backends.base import BackendUnavailableError, get_backend
    from argus_rt.kinds import registry
    from argus_rt.kinds.triton import trace_run

    adapter = get_backend("trace", "triton")
    assert adapter is get_backend("trace", "cuda") and adapter.outputs == ("op_events", "iteration_waits")
    assert registry.get_kind("triton").trace_run == "argus_rt.kinds.triton.trace_run:trace_run"
    # its effects are exactly what the planner declares for probe runs, so the worker accepts it
    from argus_rt.probe_expander import PROBE_EFFECTS

    assert set(adapter.effects) <= set(PROBE_EFFECTS)
    adapter.validate_config({})  # region tracing (the latency recipe)
    assert adapter.effects_for({}) == {"perturbs_timing"}
    with pytest.raises(ValueError, match=r"\(region tracing\).*forced-wait probe"):
        adapter.validate_config({"ring": 256})
    with pytest.raises(ValueError, match=r"'reference': one of \['iteration_waits'\]"):
        adapter.validate_config({"reference": "latency"})
    adapter.validate_config({"probe": {"op_id": "0x1", "iteration": 0}})
    adapter.validate_config({"reference": "iteration_waits"})
    assert adapter.effects_for({"reference": "iteration_waits"}) == {"perturbs_timing"}
    assert adapter.effects_for({"probe": {"op_id": "0x1", "iteration": 0}}) == set(PROBE_EFFECTS)
    # Triton's region trace records one timer per marker per CTA: a ring capacity is refused by the kind
    with pytest.raises(ValueError, match=r"Triton region tracing takes no config .*'capacity': 256"):
        trace_run.trace_run("region", program, tmp_path, config={"capacity": 256}, inputs={}, sampling={})
    with pytest.raises(BackendUnavailableError, match=r"needs the 'ttgir' input .*inputs: \[\]"):
        trace_run.trace_run("probe", program, tmp_path, config={"probe": {}}, inputs={}, sampling={})
    try:
        import torch

        hopper = torch.cuda.is_available() and torch.cuda.get_device_capability(0)[0] == 9
    except ImportError:
        hopper = False
    if not hopper:  # every Triton trace run is Hopper TTGIR: elsewhere it is unavailable, with the reason
        with pytest.raises(BackendUnavailableError, match=r"no CUDA GPU|need a Hopper GPU"):
            trace_run.require_hopper()
