"""`plan` (of a CUDA program), `build` and `trace` start fast: they never import torch (about 1-2 s)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from argus_rt.resources import example

PROBE = """
import contextlib, io, json, sys
from argus_rt.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "torch": "torch" in sys.modules}))
"""


def _run(argv: list[str], cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [
    ["plan", str(example("ground_truth")), "--region", "ground_truth/stage_b", "--signals",
     "latency,instruction_mix"],
    ["trace", "missing.npz"],
], ids=["plan", "trace"])
def test_command_does_not_import_torch(argv, tmp_path):
    # `discover` (and `plan` of a Triton program) is not listed: it compiles the kernel the JIT would
    # run, through Triton's own argument specialisation, whose native code imports torch on first use
    out = _run(argv, tmp_path)
    assert out["torch"] is False, f"argus {argv[0]} imported torch"


def test_build_does_not_import_torch(tmp_path):
    from argus_rt.kinds.cuda.build import find_nvcc

    try:
        find_nvcc()
    except Exception as exc:  # no CUDA toolkit on this machine: nothing to build with
        pytest.skip(f"no nvcc: {exc}")
    src = example("cuda") / "nested_regions.cu"
    out = _run(["build", str(src), "-I", str(src.parent), "--mode", "0"], tmp_path)
    assert out == {"rc": 0, "torch": False}
