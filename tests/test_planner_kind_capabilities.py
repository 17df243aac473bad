"""A signal is available for a program kind when the kind has the capabilities its recipes need
(``Recipe.kind_needs``, read from :mod:`argus_rt.kinds.registry`): the planner refuses the others at
plan time, in one line naming the signal, the kind, what it lacks and the signals it supports, before
any task runs. The Proton kind has no marker-only build (no ``variant_cubin``), so the PC-keyed
signals are refused for it; a test-only kind shows that the rule is the capability, not the name."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import argus_rt
from argus_rt.kinds import registry
from argus_rt.kinds.registry import Kind, kinds_with, register_kind
from argus_rt.planner import UnsupportedSignalError, plan_query
from argus_rt.program import ProgramVersion, load_program
from argus_rt.recipes import Recipe, RecipeError, get_recipe, signals_for, unsupported_reason
from argus_rt.regions import RegionTree

ROOT = Path(__file__).resolve().parents[1]
PROTON = ROOT / "examples" / "triton_proton"
PC_KEYED = ("instruction_mix", "barrier_count", "stall_reasons")


@pytest.fixture(scope="module")
def proton_program():
    pytest.importorskip("triton")  # the kind's compiler hook reads Triton's version at load
    return load_program(PROTON)


def _program(kind: str) -> ProgramVersion:
    tree = RegionTree("k")
    tree.add("k/a")
    return ProgramVersion.from_sources("k", {"k.src": "x"}, kind=kind, regions=tree, launch={"kernel": "k"})


@pytest.fixture
def test_kind():
    """Register a kind for one test; removed afterwards."""
    names = []

    def register(kind: Kind) -> Kind:
        names.append(kind.name)
        return register_kind(kind)

    yield register
    for name in names:
        registry.unregister_kind(name)


@pytest.mark.parametrize("signal", PC_KEYED)
def test_a_pc_keyed_signal_of_a_proton_program_is_refused_at_plan_time(proton_program, signal):
    with pytest.raises(UnsupportedSignalError) as info:
        plan_query(proton_program, None, [signal])
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"signal {signal!r} needs a cuda or cupy or numba or triton program")
    assert "kind proton has no 'run_once' or 'variant_cubin'" in text
    assert text.endswith("is proton. Signals for proton: latency, system_timeline")


def test_the_python_api_refuses_before_anything_runs(proton_program, tmp_path):
    with pytest.raises(UnsupportedSignalError, match="signal 'barrier_count' needs .*Signals for proton: latency"):
        argus_rt.query.make_plan(PROTON, None, ["latency", "barrier_count"])
    workspace = tmp_path / "ws"
    with pytest.raises(UnsupportedSignalError, match="signal 'instruction_mix' needs"):
        argus_rt.query(PROTON, signals=["instruction_mix"], workspace=workspace)
    assert not list(workspace.rglob("*.npy"))  # nothing was collected
    assert plan_query(proton_program, None, ["latency"]).tasks  # what the kind has still plans


def test_argus_plan_refuses_in_one_line(proton_program):
    env = {k: v for k, v in os.environ.items() if k != "ARGUS_WORKSPACE"}
    proc = subprocess.run([sys.executable, "-m", "argus_rt.cli", "plan", str(PROTON), "--signals", "stall_reasons"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("argus plan: signal 'stall_reasons' needs a cuda or cupy or numba or triton program")
    assert "'variant_cubin'" in lines[0] and lines[0].endswith("Signals for proton: latency, system_timeline")


def test_what_a_kind_is_offered_is_what_it_can_plan(proton_program):
    assert signals_for("proton") == ["latency", "system_timeline"]
    assert set(PC_KEYED) <= set(signals_for("cuda")) and set(PC_KEYED) <= set(signals_for("triton"))


def test_the_rule_is_the_capability_not_the_kind_name(test_kind):
    test_kind(Kind("scopesonly", traced=True))  # like Proton: a region trace, no marker-only build
    test_kind(Kind("mapped", traced=True, variant_cubin="x:y", run_once="x:z"))
    with pytest.raises(UnsupportedSignalError, match="kind scopesonly has no 'run_once' or 'variant_cubin'.*"
                                                     "Signals for scopesonly: latency, system_timeline"):
        plan_query(_program("scopesonly"), None, ["instruction_mix"])
    plan = plan_query(_program("mapped"), None, ["instruction_mix", "barrier_count"])
    assert {t.op for t in plan.tasks.values() if t.kind == "collect"} == {"pcmap"}
    assert {"latency", *PC_KEYED} <= set(signals_for("mapped"))
    assert kinds_with({"variant_cubin", "run_once"}) >= {"cuda", "triton", "cupy", "numba", "mapped"}
    assert "scopesonly" not in kinds_with({"variant_cubin"})


def test_async_signals_follow_the_discovery_and_probe_hooks(test_kind):
    """async_completion_latency needs both hooks; its probe reference is the traced per-iteration waits
    for a kind that ``traces_iteration_waits`` and region latency for one that does not."""
    test_kind(Kind("halfasync", traced=True, discover_async_sites="x:y"))
    test_kind(Kind("asyncwaits", traced=True, discover_async_sites="x:y", forced_wait_probe="x:z",
                   traces_iteration_waits=True))
    test_kind(Kind("asynclatency", traced=True, discover_async_sites="x:y", forced_wait_probe="x:z"))
    assert "kind halfasync has no 'forced_wait_probe'" in unsupported_reason("async_completion_latency", "halfasync")
    recipe = get_recipe("async_completion_latency")
    assert recipe.prerequisites_for("asyncwaits") == ("iteration_waits",)
    assert recipe.prerequisites_for("triton") == ("iteration_waits",)
    assert recipe.prerequisites_for("asynclatency") == ("latency",)
    synths = {t.op for t in plan_query(_program("asynclatency"), "k/a", ["async_completion_latency"]).tasks.values()
              if t.kind == "synthesize"}
    assert synths == {"latency", "async_completion_latency"}


def test_an_unknown_capability_is_one_line_naming_the_valid_ones():
    with pytest.raises(RecipeError, match=r"unknown kind capabilities \['marker_only_cubin'\]; valid: builds_alongside"):
        Recipe(signal="x", synthesis="copy_metric", qualification="observed", kind_needs={"marker_only_cubin"})
    with pytest.raises(RecipeError, match=r"unknown kind capabilities \['cuda'\]"):
        Recipe(signal="x", synthesis="copy_metric", qualification="observed", capability_prerequisites={"cuda": ()})
    with pytest.raises(ValueError, match=r"unknown kind capabilities \['a', 'b'\]; valid: traced, runner_variants"):
        kinds_with({"a", "b"})
    with pytest.raises(ValueError, match=r"unknown kind capability \['x'\]"):
        registry.get_kind("cuda").has("x")
    with pytest.raises(RecipeError, match="unknown program kinds"):
        Recipe(signal="x", synthesis="copy_metric", qualification="observed", kinds={"nokind"})
