"""The JIT-equivalence check's per-process cache is keyed by the launch, not by the TTGIR alone: two shapes
of one configuration compile to the same TTGIR, and a runtime reused across queries must not give the
second shape the first one's result (its times). CPU: the compile, the JIT and the GPU are stand-ins."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("triton")  # the key names Triton's version

from argus_rt.kinds.triton import jit_equivalence  # noqa: E402
from argus_rt.kinds.triton import program as triton_program  # noqa: E402
from argus_rt.program import load_program  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "triton_minimal"
TTGIR = "module {\n  tt.func @scale_kernel() {\n    tt.return\n  }\n}\n"  # one TTGIR for every shape


class _Kernel:
    asm = {"ttgir": TTGIR}


class _JitFunction:
    """Stands for the @triton.jit function: ``fn[grid](*args)`` records the launch."""

    def __init__(self) -> None:
        self.launches: list[tuple] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, args))
            return _Kernel()
        return launch


class _Module:
    """Stands for the program's module: ``run`` launches ``n`` elements, as the program's launch says."""

    def __init__(self, n: int) -> None:
        self.n = n

    def make_inputs(self, seed=None) -> dict:
        return {"n": self.n}

    def run(self, compiled, inputs):
        return compiled[(inputs["n"] // 1024,)](inputs["n"])


def _shape_program(tmp_path: Path, n: int):
    """triton_minimal at ``n`` elements: the same kernel and configuration, another shape."""
    root = tmp_path / f"scale_{n}"
    shutil.copytree(EXAMPLE, root)
    spec = json.loads((root / "argus_program.json").read_text())
    args = spec["launch"]["args"]
    args["x"]["shape"] = args["y"]["shape"] = [n]
    args["n"] = n
    (root / "argus_program.json").write_text(json.dumps(spec))
    return load_program(root)


@pytest.fixture
def jit(monkeypatch):
    fn = _JitFunction()
    monkeypatch.setattr(jit_equivalence, "_PASSED", {})
    monkeypatch.setattr(jit_equivalence, "_device_name", lambda: "stand-in GPU")
    monkeypatch.setattr(triton_program, "program_compiled", lambda program: _Kernel())
    monkeypatch.setattr(triton_program, "load_kernel", lambda program, mod=None: (mod, fn, {}, {}))
    return fn


def test_two_shapes_with_one_ttgir_are_checked_each(tmp_path, jit):
    small, large = _shape_program(tmp_path, 1 << 20), _shape_program(tmp_path, 1 << 22)
    assert small.id != large.id
    first = jit_equivalence.check_against_jit(small, _Module(1 << 20), timing=False)
    second = jit_equivalence.check_against_jit(large, _Module(1 << 22), timing=False)
    assert first["ttgir_sha256"] == second["ttgir_sha256"]  # the TTGIR cannot tell the shapes apart
    # the second shape ran its own JIT launch: a TTGIR-keyed cache would have answered it with the first's
    assert [args for _grid, args in jit.launches] == [(1 << 20,), (1 << 22,)]


def test_the_same_launch_and_its_variants_reuse_the_check(tmp_path, jit):
    program = _shape_program(tmp_path, 1 << 20)
    jit_equivalence.check_against_jit(program, _Module(1 << 20), timing=False)
    jit_equivalence.check_against_jit(program, _Module(1 << 20), timing=False)
    probe = program.variant_of("probe", op_id=1, iteration=0)  # a probe collection launches the base's kernel
    jit_equivalence.check_against_jit(probe, _Module(1 << 20), timing=False)
    assert len(jit.launches) == 1
    jit_equivalence.check_against_jit(program, _Module(1 << 20), timing=False, seed=7)  # other inputs: checked
    assert len(jit.launches) == 2


def test_the_key_changes_with_everything_that_makes_the_launch(tmp_path, monkeypatch):
    monkeypatch.setattr(jit_equivalence, "_device_name", lambda: "stand-in GPU")
    program = _shape_program(tmp_path, 1 << 20)

    def key(p=program, sha="a" * 64, timing=True, seed=None):
        return jit_equivalence.launch_key(p, sha, timing=timing, seed=seed)

    assert key() == key()
    assert key(program.variant_of("probe", op_id=1, iteration=0)) == key()
    others = [key(_shape_program(tmp_path, 1 << 21)), key(sha="b" * 64), key(timing=False), key(seed=1)]
    launch = json.loads(program.launch_json)
    launch["num_warps"] = 8  # a launch option the TTGIR shows too; the key sees it in the launch either way
    others.append(key(replace(program, launch_json=json.dumps(launch, sort_keys=True))))
    edited = tmp_path / "edited"
    shutil.copytree(EXAMPLE, edited)
    (edited / "scale.py").write_text((edited / "scale.py").read_text().replace("N, BLOCK", "N, BLOCK "))
    others.append(key(load_program(edited)))  # the module sizes the inputs and the grid
    assert len({key(), *others}) == len(others) + 1
