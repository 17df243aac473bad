"""GPU (H200): for every Triton example, the kernel Argus builds on the CPU is the one the JIT runs
on the GPU -- a launch through the JIT on the module's real inputs gives the same TTGIR hash, and
Argus's kernel time is within noise of the JIT launch -- and a launch description that does not
match the real launch is refused with the difference shown.

Run: ``python -m pytest -q -m gpu tests/test_triton_jit_gpu.py``."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]

ROOT = Path(__file__).resolve().parent.parent / "examples"
PROGRAM_FILES = (sorted(ROOT.glob("triton_corpus/*/argus_program*.json")) + [ROOT / "triton" / "argus_program.json"]
                 + [ROOT / "triton_minimal" / "argus_program.json"])


@pytest.mark.parametrize("path", PROGRAM_FILES, ids=[f"{p.parent.name}/{p.name}" for p in PROGRAM_FILES])
def test_argus_kernel_is_the_jit_s_in_ttgir_and_time(path):
    from argus_rt.kinds.triton.jit_equivalence import check_against_jit
    from argus_rt.kinds.triton.probes import _kernel_module
    from argus_rt.kinds.triton.program import program_ttgir
    from argus_rt.program import load_program

    program = load_program(path)
    ttgir, _ = program_ttgir(program)
    result = check_against_jit(program, _kernel_module(program), seed=7)
    assert result["ttgir_sha256"] == hashlib.sha256(ttgir.encode()).hexdigest()
    assert abs(result["ratio"] - 1) <= result["tolerance"], result
    print(f"{program.name}: argus {result['argus_ms']:.4f} ms, jit {result['jit_ms']:.4f} ms, "
          f"ratio {result['ratio']:.3f}")


def test_each_autotune_config_is_the_jit_s():
    from argus_rt.kinds.triton.jit_equivalence import check_against_jit
    from argus_rt.kinds.triton.probes import _kernel_module
    from argus_rt.kinds.triton.program import config_programs
    from argus_rt.program import load_program

    base = load_program(ROOT / "triton_corpus" / "matmul_autotuned" / "argus_program.json")
    for program in config_programs(base):
        check_against_jit(program, _kernel_module(program), seed=3)


def test_a_launch_description_that_is_not_the_real_launch_is_refused():
    from argus_rt.kinds.triton.jit_equivalence import JitMismatchError, check_against_jit
    from argus_rt.kinds.triton.probes import _kernel_module
    from argus_rt.program import load_program

    base = load_program(ROOT / "triton_corpus" / "matmul_autotuned" / "argus_program.json")
    launch = json.loads(json.dumps(base.launch))
    for name in ("a_ptr", "b_ptr"):
        launch["args"][name]["align"] = 8  # claims unaligned operands: Argus would build without cp.async
    wrong = dataclasses.replace(base, launch_json=json.dumps(launch, sort_keys=True))
    with pytest.raises(JitMismatchError, match=r"TTGIR hash differs; first difference, Argus vs JIT, line \d+: .*"
                                               r"; arguments a_ptr: run passes a 256-byte aligned address, "
                                               r"launch.args says align 8; b_ptr: "):
        check_against_jit(wrong, _kernel_module(wrong), timing=False)
