"""Every combination of the five signals plans on every Triton example with collections whose
outputs are distinct and are what their backend publishes for their configuration (issue 15 item 4).

The bug this guards against: ``latency`` (trace config ``{}``, a region trace) and
``iteration_waits`` (trace config ``{"reference": ...}``, the traced TMA reference) were merged into one
run whose merged config selects the reference mode only, so the run "did not produce declared
output(s) ['region_intervals']" and both signals were lost."""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

pytest.importorskip("triton")

from argus_rt.backends.base import get_backend  # noqa: E402
from argus_rt.planner import resolve_recipes  # noqa: E402
from argus_rt.program import load_program  # noqa: E402
from argus_rt.query import make_plan  # noqa: E402
from argus_rt.recipes import get_recipe, register_recipe  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "examples"
PROGRAM_FILES = [ROOT / "triton" / "argus_program.json"] + sorted(ROOT.glob("triton_corpus/*/argus_program*.json"))
SIGNALS = ("latency", "async_completion_latency", "instruction_mix", "barrier_count", "stall_reasons")
COMBINATIONS = [c for n in range(1, len(SIGNALS) + 1) for c in itertools.combinations(SIGNALS, n)]


def collection_problems(plan, kind: str) -> list[str]:
    """What is wrong with a plan's collections (empty: nothing)."""
    problems = []
    tasks = list(plan.tasks.values())
    collects = [t for t in tasks if t.kind == "collect"]
    seen: dict[tuple[str, str], str] = {}
    for t in collects:
        adapter = get_backend(t.op, kind)
        publishes = adapter.outputs_for(t.config) if hasattr(adapter, "outputs_for") else adapter.outputs
        if set(t.outputs) - set(publishes):
            problems.append(f"{t.id} ({t.op} {t.config}) declares {sorted(t.outputs)}, publishes {sorted(publishes)}")
        for out in t.outputs:
            if (t.program, out) in seen:
                problems.append(f"{out} of {t.program} from two collections: {seen[(t.program, out)]} and {t.id}")
            seen[(t.program, out)] = t.id
    for recipe in resolve_recipes(plan.query["signals"], kind):
        for ev in recipe.evidence:
            name = f"{recipe.signal}:{ev.backend}"
            runs = [t for t in collects if name in t.requests]
            if len(runs) != 1 or set(ev.outputs) - set(runs[0].outputs):
                problems.append(f"{name} needs {list(ev.outputs)} from one collection, got "
                                f"{[(t.id, t.outputs) for t in runs]}")
    return problems


@pytest.mark.parametrize("path", PROGRAM_FILES, ids=[f"{p.parent.name}/{p.name}" for p in PROGRAM_FILES])
def test_every_signal_combination_plans_distinct_declared_collections(path):
    program = load_program(path)
    for combo in COMBINATIONS:
        plan = make_plan(program, None, list(combo))
        assert collection_problems(plan, "triton") == [], combo
        targets = plan.to_dict()["targets"]
        assert set(combo) <= set(targets), (combo, sorted(targets))


def test_the_check_fails_on_the_merged_trace_run_it_guards_against():
    """With iteration_waits not isolated (the old recipe), latency + async_completion_latency plan one
    trace run that declares region_intervals but publishes iteration_waits only: the check says so."""
    program = load_program(ROOT / "triton" / "argus_program.json")
    old = get_recipe("iteration_waits")
    merged = dataclasses.replace(old, evidence=tuple(dataclasses.replace(ev, isolated=False) for ev in old.evidence))
    register_recipe(merged, replace=True)
    try:
        plan = make_plan(program, None, ["latency", "async_completion_latency"])
    finally:
        register_recipe(old, replace=True)
    problems = collection_problems(plan, "triton")
    assert any("declares ['iteration_waits', 'region_intervals'], publishes ['iteration_waits']" in p for p in problems)


def test_the_triton_trace_adapter_refuses_a_merged_run_before_running():
    adapter = get_backend("trace", "triton")
    assert adapter.outputs_for({}) == ("region_intervals",)
    assert adapter.outputs_for({"reference": "iteration_waits"}) == ("iteration_waits",)
    assert adapter.outputs_for({"probe": {"op_id": "0x1", "iteration": 0}}) == ("op_events",)

    class Ctx:
        config = {"reference": "iteration_waits"}
        task = type("T", (), {"id": "c-1", "outputs": ("iteration_waits", "region_intervals")})()

    with pytest.raises(ValueError, match=r"declares outputs \['iteration_waits', 'region_intervals'\], but its "
                                         r"config .* publishes only \['iteration_waits'\]: two trace modes were merged"):
        adapter.collect(Ctx())


def test_a_kernel_without_pipelined_async_ops_gets_an_empty_explained_reference(monkeypatch, tmp_path):
    """async_completion_latency on softmax (no async op at all): the traced reference has nothing to
    time and says so, instead of failing the run (and, merged, the query's latency with it). The
    cp.async matmul is traced now: its copies' and dot's waits (tests/test_probe_async_families.py)."""
    from argus_rt.kinds.triton import jit_equivalence, probes

    monkeypatch.setattr(jit_equivalence, "check_against_jit", lambda program, mod, **kw: {"ttgir_sha256": "stand-in"})
    program = load_program(ROOT / "triton_corpus" / "softmax" / "argus_program.json")
    doc = probes.collect_triton_reference(program, tmp_path)
    assert doc["format"] == "argus.iteration_waits/1" and doc["launches"] == 0
    assert all(v == [] for v in doc["columns"].values())
    assert doc["wait"].startswith("none: kernel 'softmax_kernel' has no pipelined async op with a consumer wait in "
                                  "a loop (its async sites: none)")
    assert doc["jit_check"] == {"ttgir_sha256": "stand-in"}
