"""The Triton kind's profiled run stamps its phases (torch, compile, inputs, launch, reference,
jit_check), so a mapping run's ``runner_run`` splits into ``runner_run.<phase>`` and a slow query says
which part of the run under Nsight Compute is slow. CPU: the compile and the module are stand-ins
(plain torch on the CPU); the stamps' plumbing through ``run_variant`` and :class:`StepClock` is real."""
from __future__ import annotations

import json
import time
import types
from pathlib import Path

import pytest

from argus_rt.backends.pcmap import StepClock
from argus_rt.kinds import run_variant
from argus_rt.kinds.triton import run as triton_run
from argus_rt.program import load_program

torch = pytest.importorskip("torch")
SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "triton_corpus" / "softmax" / "argus_program.json"
PHASES = ["torch", "compile", "inputs", "launch", "reference", "jit_check"]


def _stand_in_module(wrong: bool = False):
    def make_inputs(seed=None):
        x = torch.randn(8, 16)
        return {"x": x, "y": torch.empty_like(x)}

    def run(compiled, inputs, probe_out=None):
        time.sleep(0.01)  # the launch: a phase of its own
        inputs["y"].copy_(torch.softmax(inputs["x"], -1) + (1.0 if wrong else 0.0))
        return inputs["y"]

    return types.SimpleNamespace(make_inputs=make_inputs, run=run, reference=lambda x: torch.softmax(x, -1))


@pytest.fixture
def stand_ins(monkeypatch):
    state = {"module": _stand_in_module()}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(triton_run, "triton_compile", lambda program, variant: (state["module"], object()))
    return state


def test_the_run_stamps_its_phases_in_order(stand_ins):
    before = time.time()
    res = triton_run.run_triton_once(load_program(SOFTMAX), "marker_only", check_jit=False)
    stamps = res["phase_stamps"]
    assert list(stamps) == PHASES
    values = [stamps[p] for p in PHASES]
    assert before <= values[0] and values == sorted(values) and values[-1] <= time.time()
    assert stamps["launch"] - stamps["inputs"] >= 0.01 and res["max_rel_err"] < 1e-6


def test_a_wrong_output_still_fails_the_run(stand_ins):
    from argus_rt.kinds.errors import ReferenceMismatchError

    stand_ins["module"] = _stand_in_module(wrong=True)
    with pytest.raises(ReferenceMismatchError, match="relative error"):
        triton_run.run_triton_once(load_program(SOFTMAX), "marker_only", check_jit=False)


def test_the_mapping_run_splits_runner_run_by_the_triton_phases(stand_ins, tmp_path, monkeypatch):
    program = load_program(SOFTMAX)
    path = tmp_path / "program.json"
    path.write_text(json.dumps(program.to_dict()))
    stamps = tmp_path / "stamps.json"
    monkeypatch.setenv(run_variant.TIMINGS_ENV, str(stamps))
    real = triton_run.run_triton_once
    monkeypatch.setattr(triton_run, "run_triton_once", lambda p, v, **kw: real(p, v, check_jit=False))
    clock = StepClock(say=lambda msg: None)
    assert run_variant.main(["run", "--program", str(path), "--variant", "marker_only"]) == 0
    clock.profiled_run(stamps)
    s = clock.seconds
    assert [k.removeprefix("runner_run.") for k in s if k.startswith("runner_run.")] == PHASES
    parts = sum(s[f"runner_run.{p}"] for p in PHASES)
    assert abs(parts - s["runner_run"]) < 0.005
