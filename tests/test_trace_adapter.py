"""The one ``trace`` adapter (argus_rt.backends.trace): its three modes, their outputs and effects, and
the kind hooks it dispatches to (``trace`` for region tracing, ``trace_run`` for a kind that runs every
mode itself), with fake kinds registered here (no GPU: the hooks return the documents)."""
from __future__ import annotations

import pytest

from argus_rt.backends.base import CollectContext, get_backend
from argus_rt.backends.trace import TraceAdapter
from argus_rt.evidence import OpEvents, RegionIntervals
from argus_rt.kinds import registry
from argus_rt.kinds.errors import ProgramRunError
from argus_rt.kinds.registry import Kind, register_kind
from argus_rt.program import ProgramVersion
from argus_rt.regions import RegionTree
from argus_rt.tasks import Task

CALLS: list = []
OP_EVENTS = {"format": "argus.op_events/1", "ctas": 2, "recorded": 2,
             "columns": {"op_id": ["0x1", "0x1"], "iteration": [0, 0], "issue": [5, 7], "complete": [9, 15],
                         "cta": [0, 1]}}


def fake_region_trace(program, outdir, config):
    doc = {"format": "argus.region_intervals/1",
           "columns": {"region_id": [1, 1], "start": [10, 12], "end": [25, 30], "warp": [0, 1]}}
    return doc, outdir / "rings.bin"


def fake_trace_run(mode, program, outdir, *, config, inputs, sampling):
    CALLS.append((mode, program.kind, dict(config), sorted(inputs), dict(sampling)))
    if mode == "probe":
        return OP_EVENTS
    return {"format": "argus.region_intervals/1", "columns": {"region_id": [1], "start": [10], "end": [25]}}


@pytest.fixture
def kinds():
    CALLS.clear()
    register_kind(Kind("runsall", traced=True, trace_run=f"{__name__}:fake_trace_run"))
    register_kind(Kind("nohooks", traced=True))
    register_kind(Kind("tracesonly", traced=True, trace=f"{__name__}:fake_region_trace"))
    yield
    registry.unregister_kind("tracesonly")
    registry.unregister_kind("runsall")
    registry.unregister_kind("nohooks")


def _ctx(tmp_path, kind, config, outputs, inputs=None, sampling=None, warp_roles=None):
    tree = RegionTree("k")
    tree.add("k/a")
    pv = ProgramVersion.from_sources("k", {"k.cu": "x"}, kind=kind, regions=tree, warp_roles=warp_roles)
    task = Task(kind="collect", op="trace", program=pv.id, device="gpu", config=config, outputs=outputs)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return CollectContext(task=task, program=pv, config=config, scope=None, sampling=sampling or {},
                          inputs=inputs or {}, outdir=out, device="")


def test_modes_outputs_and_effects():
    a = TraceAdapter()
    probe = {"probe": {"op_id": "0x1", "iteration": 0}}
    assert [a.mode(c) for c in ({}, {"capacity": 64, "clock": "clock64"}, {"reference": "iteration_waits"}, probe)] \
        == ["region", "region", "reference", "probe"]
    assert [a.outputs_for(c) for c in ({}, {"reference": "iteration_waits"}, probe)] == \
        [("region_intervals",), ("iteration_waits",), ("op_events",)]
    assert a.effects_for({}) == a.effects_for({"reference": "iteration_waits"}) == {"perturbs_timing"}
    assert a.effects_for(probe) == {"forces_completion", "changes_overlap", "perturbs_timing"} == a.effects
    with pytest.raises(ValueError, match=r"^unknown trace config key\(s\) \['ring'\]; valid: capacity, clock "):
        a.validate_config({"ring": 8})
    for bad in ({"ring": 8}, {"probe": {}, "capacity": 8}, {"reference": "latency"}):
        if "ring" not in bad:
            with pytest.raises(ValueError, match=r"^trace takes config .*; got "):
                a.validate_config(bad)
        assert a.effects_for(bad) == frozenset()  # validate_config's reason comes first


def test_a_kind_with_trace_run_runs_every_mode_and_gets_typed_evidence(kinds, tmp_path):
    ctx = _ctx(tmp_path, "runsall", {"probe": {"op_id": "0x1", "iteration": 0}}, ("op_events",),
               inputs={"ttgir": tmp_path / "p.ttgir"}, sampling={"repeats": 3})
    files = get_backend("trace", "runsall").collect(ctx)
    assert CALLS == [("probe", "runsall", ctx.config, ["ttgir"], {"repeats": 3})]
    assert OpEvents.from_outputs(files.get).columns["complete"].tolist() == [9, 15]
    files = TraceAdapter().collect(_ctx(tmp_path, "runsall", {}, ("region_intervals",)))
    assert "raw_trace" not in files and RegionIntervals.from_outputs(files.get).rows == 1


def test_a_region_trace_carries_the_programs_declared_warp_roles(kinds, tmp_path):
    roles = {"producer": [0], "consumer": [1]}
    files = TraceAdapter().collect(_ctx(tmp_path, "tracesonly", {}, ("region_intervals",), warp_roles=roles))
    assert RegionIntervals.from_outputs(files.get).warp_roles == roles and "raw_trace" in files
    (tmp_path / "none").mkdir()
    files = TraceAdapter().collect(_ctx(tmp_path / "none", "tracesonly", {}, ("region_intervals",)))
    assert RegionIntervals.from_outputs(files.get).warp_roles == {}


def test_two_merged_modes_and_missing_hooks_are_one_line_errors(kinds, tmp_path):
    with pytest.raises(ValueError, match=r"declares outputs \['iteration_waits', 'region_intervals'\], but its "
                                         r"config .* publishes only \['iteration_waits'\]: two trace modes"):
        TraceAdapter().collect(_ctx(tmp_path, "runsall", {"reference": "iteration_waits"},
                                    ("iteration_waits", "region_intervals")))
    assert CALLS == []
    with pytest.raises(ProgramRunError, match=r"^region tracing of nohooks programs: not implemented .*'trace' or "
                                              r"'trace_run' hook"):
        TraceAdapter().collect(_ctx(tmp_path, "nohooks", {}, ("region_intervals",)))
    with pytest.raises(ProgramRunError, match=r"^forced-wait probe runs of cuda programs: not implemented .*'trace_run'"):
        TraceAdapter().collect(_ctx(tmp_path, "cuda", {"probe": {"op_id": "0x1", "iteration": 0}}, ("op_events",)))
