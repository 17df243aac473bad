"""Every shipped example is a program a new user can plan (CPU) and query (GPU) as documented.

The README names example directories; each must hold an argus_program.json. On the GPU the query
runs the program's own reference check before anything is measured, so an answered latency also
means the kernel computed the right output.
"""
from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

import argus_rt
from argus_rt.kinds.registry import get_kind
from argus_rt.recipes import signals_for
from argus_rt.regions import RegionTree
from argus_rt.resources import examples_dir

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in examples_dir().iterdir() if (p / "argus_program.json").is_file())
# what an example of each kind is planned for here: of these three signals, those its kind's capabilities give
# (a kind without a marker-only build, Proton, gets latency), so a new kind's example needs no line here;
# the Triton examples, latency only
THREE_SIGNALS = ("latency", "instruction_mix", "barrier_count")
SIGNALS_BY_KIND = collections.defaultdict(lambda: list(THREE_SIGNALS), triton=["latency"])


def _signals_for_example(kind: str) -> list[str]:
    offered = set(signals_for(kind))
    signals = [s for s in SIGNALS_BY_KIND[kind] if s in offered]
    assert "latency" in signals, (kind, sorted(offered))  # every shipped example is traced
    return signals


def _root_region(name: str) -> str:
    tree = RegionTree.load(examples_dir() / name / "regions.json")
    return next(r.name for r in tree if r.parent is None)


def test_every_example_directory_the_readme_names_is_a_program():
    named = set(re.findall(r"examples/([A-Za-z0-9_]+)/", (ROOT / "README.md").read_text()))
    assert named, "README names no example directory"
    def is_program_or_collection(d: Path) -> bool:  # a program, or a folder of programs (the corpus)
        subdirs = [p for p in d.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))]
        return (d / "argus_program.json").is_file() or bool(subdirs) and all(
            (p / "argus_program.json").is_file() for p in subdirs)

    missing = sorted(n for n in named if not is_program_or_collection(examples_dir() / n))
    assert not missing, f"README names example dirs without argus_program.json: {missing}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_plans_on_the_cpu(name):
    program = argus_rt.example(name)
    kind = argus_rt.query.load_program(program).kind
    signals = _signals_for_example(kind)
    plan = argus_rt.query.make_plan(program, _root_region(name), signals)
    assert {t.kind for t in plan.tasks.values()} >= {"collect", "synthesize"}
    assert set(plan.targets) == set(signals)


@pytest.mark.gpu
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_query_answers_on_the_gpu(name, tmp_path):
    program = argus_rt.example(name)
    kind = argus_rt.query.load_program(program).kind
    check = get_kind(kind).hook("environment_problem")
    problem = check() if check else None
    if problem:  # e.g. numba-cuda 0.30.4 under numpy 2.5: no kernel of the kind compiles on this machine
        pytest.skip(problem)
    region = _root_region(name)
    report = argus_rt.query(program, region, ["latency"], workspace=tmp_path / "ws")
    assert report.unanswered == [], report.unanswered
    # The root may carry no markers of its own (the megakernel's "decode"): its subtree must be timed.
    lat = [v for v in report.values if v["signal"] == "latency" and (v["region"] or "").startswith(region)
           and v["metric"] == "mean"]
    assert lat and all(v["qualification"] == "observed" for v in lat), (kind, lat)
    assert any((v["value"] or 0) > 0 for v in lat), (kind, lat)
