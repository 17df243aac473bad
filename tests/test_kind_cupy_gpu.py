"""The CuPy program kind on a GPU: ``argus query examples/cupy --signals latency,instruction_mix,barrier_count``.

The example (examples/cupy/row_softmax.cu, one CTA of 4 warps per row, 256 rows) is launched by CuPy
from the cubins Argus built; every collection checks its output, and the trace-free variant's, against
the NumPy reference first. Also: the options CuPy itself passes to NVRTC for the same RawModule are
the ones Argus compiles with, and the machine code is the same.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cupy"
SIGNALS = "latency,instruction_mix,barrier_count"
REGIONS = ["softmax", "softmax/max", "softmax/max/reduce", "softmax/sum", "softmax/sum/reduce", "softmax/normalize"]
WARPS = 256 * 128 // 32  # CTAs x warps per CTA: every warp runs each region once per launch


def _values(report, signal, region=None):
    return [v for v in report["values"] if v["signal"] == signal and (region is None or v["region"] == region)]


@pytest.mark.gpu
def test_query_cupy_example(tmp_path):
    keep = Path(os.environ.get("ARGUS_TEST_ARTIFACTS", tmp_path))
    out = keep / "report_cupy.json"
    cmd = [sys.executable, "-m", "argus_rt.cli", "query", str(EXAMPLE), "--region", "softmax", "--signals", SIGNALS,
           "--workspace", str(tmp_path / "ws"), "--json", str(out), "--markdown", str(keep / "report_cupy.md"),
           "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["unanswered"] == [], report["unanswered"]
    for name in REGIONS:  # observed from the CuPy-launched traced variant, one occurrence per warp
        lat = {v["metric"]: v for v in _values(report, "latency", name)}
        assert lat and all(v["qualification"] == "observed" for v in lat.values()), name
        assert lat["mean"]["value"] > 0 and lat["count"]["value"] % WARPS == 0 < lat["count"]["value"], (name, lat)
    mean = {v["region"]: v["value"] for v in _values(report, "latency") if v["metric"] == "mean"}
    assert mean["softmax"] >= mean["softmax/max"] >= mean["softmax/max/reduce"]
    assert mean["softmax/sum"] >= mean["softmax/sum/reduce"]
    mix = _values(report, "instruction_mix")
    assert mix and all(v["qualification"] == "attributed" for v in mix)
    ops = {(v["region"], v["metric"]): v["value"] for v in mix}
    assert ops[("softmax/sum", "MUFU")] > 0 and ops[("softmax/normalize", "MUFU")] > 0  # expf
    assert ops.get(("softmax/max", "MUFU"), 0) == 0
    bars = _values(report, "barrier_count")
    assert bars and all(v["qualification"] == "attributed" for v in bars)
    bar = {v["region"]: v["value"] for v in bars if v["metric"] == "BAR"}
    for name in ("softmax/max/reduce", "softmax/sum/reduce"):  # two __syncthreads per warp in each
        assert bar[name] == pytest.approx(2 * WARPS, rel=0.02), (name, bar)
    for name in ("softmax", "softmax/max", "softmax/sum", "softmax/normalize"):
        assert bar.get(name, 0) == pytest.approx(0.0, abs=0.5), (name, bar)


@pytest.mark.gpu
def test_the_measured_variants_and_the_trace_free_one_match_the_reference():
    pytest.importorskip("cupy")
    from argus_rt.kinds.cupy.run import run_once
    from argus_rt.program import load_program

    program = load_program(EXAMPLE)
    for variant in ("marker_only", "traced"):
        res = run_once(program, variant, trace_config={"capacity": 256} if variant == "traced" else None)
        check = res["reference_check"]
        assert check["variant"] == variant and check["max_rel_err"] <= check["rtol"], check
        assert check["trace_free"]["max_rel_err"] <= check["rtol"], check
        assert check["trace_free"]["bitwise_equal"], f"{variant}: markers changed the kernel's arithmetic: {check}"
        if variant == "traced":
            rows = res["intervals"].rows
            assert len(rows) == WARPS * len(REGIONS) and not res["intervals"].incomplete


@pytest.mark.gpu
def test_argus_compiles_with_the_options_cupy_passes_to_nvrtc(tmp_path, monkeypatch):
    """CuPy's own RawModule compile of the trace-free source (Argus's three options among the user's),
    watched at NVRTC: its option list is Argus's for the arch CuPy picks, and its SASS is Argus's."""
    cupy = pytest.importorskip("cupy")
    from cupy.cuda import compiler

    from argus_rt.kinds.cuda.build import disassemble, sass_lines
    from argus_rt.kinds.cupy.build import build_variant, nvrtc_options
    from argus_rt.program import load_program
    from argus_rt.resources import csrc_dir

    prog_dir = tmp_path / "prog"
    shutil.copytree(EXAMPLE, prog_dir)
    source = (EXAMPLE / "row_softmax.cu").read_text() + f"\n// {uuid.uuid4().hex}: never in CuPy's kernel cache\n"
    (prog_dir / "row_softmax.cu").write_text(source)
    spec = json.loads((prog_dir / "argus_program.json").read_text())
    spec["launch"]["arch"] = f"sm_{compiler._get_arch()}"  # what CuPy compiles for on this GPU (sm_90 on an H200)
    (prog_dir / "argus_program.json").write_text(json.dumps(spec))
    program = load_program(prog_dir)

    seen = []
    real = compiler._NVRTCProgram.compile

    def watched(self, options=(), log_stream=None):
        out = real(self, options, log_stream)
        seen.append((tuple(options), out[0]))
        return out

    monkeypatch.setattr(compiler._NVRTCProgram, "compile", watched)
    extra = ("-DARGUS_MODE=0", f"-I{csrc_dir()}", f"-I{prog_dir.resolve()}")
    cupy.RawModule(code=source, options=tuple(program.flags) + extra).get_function("row_softmax")
    compiles = [(o, b) for o, b in seen if any(x.startswith("-arch=sm_") for x in o)]
    assert len(compiles) == 1, [o for o, _ in seen]
    options, cubin = compiles[0]
    assert list(options) == nvrtc_options(program, "trace_free")
    theirs = tmp_path / "cupy.cubin"
    theirs.write_bytes(bytes(cubin))
    assert sass_lines(disassemble(theirs)) == sass_lines(disassemble(build_variant(program, "trace_free")))
