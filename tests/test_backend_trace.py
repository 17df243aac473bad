"""Region-tracing adapter and CUDA variant runner: what runs without a GPU (CPU)."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from argus_rt.backends import trace
from argus_rt.kinds import run_variant
from argus_rt.kinds.cuda import run as cuda_run
from argus_rt.program import ProgramVersion, load_program
from argus_rt.trace import INTERVAL_DTYPE, Intervals
from toolchain import needs_nvcc

ROOT = Path(__file__).resolve().parent.parent
GT = ROOT / "examples" / "ground_truth"


def _with_launch(program, **changes):
    launch = dict(program.launch, **changes)
    return ProgramVersion.from_sources(program.name, {"x": "y"}, kind=program.kind, launch=launch,
                                       regions=program.regions, root=program.root)


def test_launch_description_of_the_ground_truth():
    launch = cuda_run.CudaLaunch.from_program(load_program(GT))
    assert launch.ctas == 128 and launch.threads_per_cta == 256 and launch.source == "ground_truth.cu"
    assert launch.reference == "reference.py:expected" and launch.arch == "sm_90"


def test_bad_launch_descriptions_name_the_problem():
    p = load_program(GT)
    with pytest.raises(cuda_run.ProgramRunError, match="unknown key\\(s\\) \\['gird'\\]; valid: source"):
        cuda_run.CudaLaunch.from_program(_with_launch(p, gird=[1]))
    with pytest.raises(cuda_run.ProgramRunError, match="grid must be a list of 1-3 positive ints"):
        cuda_run.CudaLaunch.from_program(_with_launch(p, grid=[0]))
    with pytest.raises(cuda_run.ProgramRunError, match="tensor dtype 'float8' unknown"):
        cuda_run.CudaLaunch.from_program(_with_launch(p, args=[{"tensor": "float8", "shape": [4]}]))
    with pytest.raises(cuda_run.ProgramRunError, match="init 'ones' unknown; valid: randn"):
        cuda_run.CudaLaunch.from_program(_with_launch(p, args=[{"tensor": "float32", "shape": [4], "init": "ones"}]))
    with pytest.raises(cuda_run.ProgramRunError, match="must be one of"):
        cuda_run.CudaLaunch.from_program(_with_launch(p, args=[{"int32": 1, "float32": 2.0}]))
    with pytest.raises(cuda_run.ProgramRunError, match="source 'nope.cu' not found"):
        cuda_run.CudaLaunch.from_program(_with_launch(p, source="nope.cu"))
    with pytest.raises(cuda_run.ProgramRunError, match="coord_kind 'epoch' unknown"):
        cuda_run.CudaLaunch.from_program(_with_launch(p, coord_kind="epoch"))
    with pytest.raises(cuda_run.ProgramRunError, match="kind 'triton'"):
        cuda_run.CudaLaunch.from_program(load_program(ROOT / "examples" / "triton"))
    with pytest.raises(cuda_run.ProgramRunError, match="cannot build variant 'probe'"):
        cuda_run.build_variant(p, "probe")


def test_runner_argv_round_trips_the_program(tmp_path):
    p = load_program(GT).variant_of("marker_only")
    argv = run_variant.runner_argv(p, "marker_only", tmp_path)
    assert argv[1:4] == ["-m", "argus_rt.kinds.run_variant", "run"] and argv[-1] == "marker_only"
    back = ProgramVersion.from_dict(json.loads((tmp_path / "program.json").read_text()))
    assert back.id == p.id and Path(back.root).is_absolute()
    env = run_variant.runner_env()
    assert env["PYTHONPATH"].split(":")[0] == str(ROOT) and env["NCCL_NVLS_ENABLE"] == "0"


def test_runner_entry_point_registers_the_trace_adapter_once(tmp_path):
    """The profiled process runs ``runner_argv``'s module as ``__main__`` and then imports the CUDA
    runner; the trace adapter is then found under its real module, registered once."""
    module = run_variant.runner_argv(load_program(GT), "marker_only", tmp_path)[2]
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{module!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_module({module!r}, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "import argus_rt.kinds.cuda.runner\n"
        "from argus_rt.backends.base import get_backend\n"
        "print(type(get_backend('trace')).__module__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run_variant.runner_env(),
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "argus_rt.backends.trace"


def test_intervals_document_columns():
    rows = np.zeros(2, dtype=INTERVAL_DTYPE)
    rows["region_id"] = [7, 9]
    rows["start"], rows["end"] = [100, 150], [400, 300]
    rows["coord"] = [0, 1]
    iv = Intervals(rows, "ns")
    doc = cuda_run.intervals_document(iv, SimpleNamespace(dropped=3), "iteration")
    assert doc["format"] == "argus.region_intervals/1" and doc["clock"] == "ns" and doc["dropped"] == 3
    assert doc["columns"]["region_id"] == [7, 9] and doc["columns"]["end"] == [400, 300]
    assert doc["coord_kind"] == "iteration" and doc["incomplete"] is False


def test_adapter_config():
    a = trace.TraceAdapter()
    a.validate_config({"capacity": 64})
    with pytest.raises(ValueError, match="valid: capacity, clock"):
        a.validate_config({"capacty": 64})


@needs_nvcc
def test_variants_build_and_symbol_lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    p = load_program(GT)
    from argus_rt import sass

    cubins = {v: cuda_run.build_variant(p, v) for v in ("trace_free", "marker_only", "traced")}
    assert cuda_run.kernel_symbol(cubins["marker_only"], "ground_truth_kernel") == "_Z19ground_truth_kernelPKfS0_Pfiiii"
    counts = {v: sass.select_function(sass.parse_sass(sass.disassemble(c)), "ground_truth").opcode_counts()
              for v, c in cubins.items()}
    assert "PMTRIG" not in counts["trace_free"] and counts["marker_only"]["PMTRIG"] == 8 * 3
    assert "PMTRIG" not in counts["traced"]
    with pytest.raises(cuda_run.ProgramRunError, match="not found in .*functions: _Z19"):
        cuda_run.kernel_symbol(cubins["marker_only"], "other_kernel")


def test_adapters_declare_no_more_effects_than_the_plan():
    """The device worker refuses an adapter whose effects exceed the planned run's (seen on the
    device once for 'trace'): check every built-in adapter of mine against a real plan."""
    from argus_rt.backends.base import get_backend
    from argus_rt.query import make_plan

    plan = make_plan(load_program(GT), "ground_truth", ["latency", "instruction_mix", "barrier_count", "stall_reasons"])
    collects = [t for t in plan.tasks.values() if t.kind == "collect"]
    assert {t.op for t in collects} == {"trace", "pcmap"}
    for task in collects:
        adapter = get_backend(task.op)
        effects = adapter.effects_for(task.config)  # what the worker checks (one trace adapter, per-mode effects)
        assert set(effects) <= set(task.effects), (task.op, effects, task.effects)
        adapter.validate_config(task.config)


def test_program_with_changed_launch_round_trips(tmp_path):
    import dataclasses

    p = load_program(GT)
    launch = p.launch
    launch["args"][3] = {"int32": 1234}
    q = dataclasses.replace(p, launch_json=json.dumps(launch, sort_keys=True, separators=(",", ":")))
    run_variant.runner_argv(q, "marker_only", tmp_path)
    back = ProgramVersion.from_dict(json.loads((tmp_path / "program.json").read_text()))
    assert back.id == q.id and back.launch["args"][3] == {"int32": 1234}
