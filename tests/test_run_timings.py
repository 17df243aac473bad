"""Where a mapping run's time goes: the profiled process stamps its phases, the parent splits the
ncu step by them (``provenance.seconds`` of the pc_region_counts document)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from argus_rt.backends.pcmap import StepClock
from argus_rt.kinds import run_variant
from argus_rt.kinds.cuda import run as cuda_run
from argus_rt.program import load_program

GT = Path(__file__).resolve().parent.parent / "examples" / "ground_truth"


def test_runner_stamps_its_phases_when_asked(tmp_path, monkeypatch):
    program = load_program(GT).variant_of("marker_only")
    path = tmp_path / "program.json"
    path.write_text(json.dumps(program.to_dict()))
    stamps = tmp_path / "stamps.json"
    monkeypatch.setattr(cuda_run, "run_once", lambda p, v, **kw: {"symbol": "k", "max_rel_err": 0.0})
    monkeypatch.delenv(run_variant.TIMINGS_ENV, raising=False)
    before = time.time()
    assert run_variant.main(["run", "--program", str(path), "--variant", "marker_only"]) == 0
    assert not stamps.exists()  # not asked: nothing written
    monkeypatch.setenv(run_variant.TIMINGS_ENV, str(stamps))
    assert run_variant.main(["run", "--program", str(path), "--variant", "marker_only"]) == 0
    got = json.loads(stamps.read_text())
    assert before <= got["main"] <= got["run"] <= got["ran"] <= time.time()


def test_the_ncu_step_is_split_by_the_runner_s_stamps(tmp_path):
    clock = StepClock()
    clock.lap("build")
    start = clock._last
    stamps = tmp_path / "stamps.json"
    stamps.write_text(json.dumps({"main": start + 0.001, "run": start + 0.002, "ran": start + 0.003}))
    time.sleep(0.01)
    clock.profiled_run(stamps)
    s = clock.seconds
    assert set(s) == {"build", "ncu", "ncu_to_main", "runner_setup", "runner_run", "ncu_after_exit"}
    parts = s["ncu_to_main"] + s["runner_setup"] + s["runner_run"] + s["ncu_after_exit"]
    assert abs(parts - s["ncu"]) < 0.005 and s["ncu_after_exit"] >= 0.005
    # no stamps (the runner failed) or stamps outside the step (another run's): only the total
    for bad in (None, {"main": start - 10, "run": start, "ran": start}):
        other = StepClock()
        path = tmp_path / "bad.json"
        if bad is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(json.dumps(bad))
        other.profiled_run(path)
        assert set(other.seconds) == {"ncu"}
