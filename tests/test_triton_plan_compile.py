"""`argus plan` compiles Triton programs on the CPU and reports compile and parse errors as one-line
errors (exit 2); a CUDA program is not built at plan time; a passed check is cached by program id."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("triton")

from argus_rt.cli import main  # noqa: E402
from argus_rt.kinds.triton import program as triton_program  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def softmax_copy(tmp_path, edit_source=None, edit_launch=None) -> Path:
    root = tmp_path / "softmax"
    shutil.copytree(ROOT / "triton_corpus" / "softmax", root)
    if edit_source:
        src = root / "softmax.py"
        src.write_text(edit_source(src.read_text()))
    if edit_launch:
        spec = json.loads((root / "argus_program.json").read_text())
        edit_launch(spec["launch"])
        (root / "argus_program.json").write_text(json.dumps(spec))
    return root


def plan_error(root, capsys) -> str:
    code = main(["plan", str(root), "--signals", "latency"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    return err


def test_a_kernel_that_does_not_compile_is_a_one_line_plan_error(tmp_path, capsys):
    root = softmax_copy(tmp_path, lambda s: s.replace("tl.max(x, axis=0)", "tl.max(x, axis=0) + undefined_name"))
    err = plan_error(root, capsys)
    assert "compiling 'softmax_kernel' of softmax" in err and "undefined_name" in err


def test_a_module_that_fails_at_import_is_a_one_line_plan_error(tmp_path, capsys):
    # a tutorial that asks the driver for the device at import time, on a machine without one
    root = softmax_copy(tmp_path, lambda s: s + "\nDEVICE = triton.runtime.driver.active.get_active_torch_device()\n")
    err = plan_error(root, capsys)
    assert "importing softmax.py failed: RuntimeError: 0 active drivers" in err


def test_launch_description_errors_are_plan_errors(tmp_path, capsys):
    root = softmax_copy(tmp_path, edit_launch=lambda launch: launch["args"].pop("stride"))
    want = "launch.args lacks ['stride']; non-constexpr parameters: x_ptr, y_ptr, n_cols, stride"
    assert want in plan_error(root, capsys)
    root2 = softmax_copy(tmp_path / "b", edit_launch=lambda launch: launch.__setitem__("config", 2))
    assert "is not @triton.autotune'd; launch.config 2 names nothing" in plan_error(root2, capsys)


def test_a_passed_check_is_cached_and_cuda_programs_are_not_built(tmp_path, capsys, monkeypatch):
    root = softmax_copy(tmp_path)
    assert main(["plan", str(root), "--signals", "latency"]) == 0
    markers = list((tmp_path / "cache" / "triton_checks").glob("pv-*.json"))
    assert len(markers) == 1

    def no_compile(program):
        raise AssertionError(f"compiled {program.label()} again")

    monkeypatch.setattr(triton_program, "program_compiled", no_compile)
    assert main(["plan", str(root), "--signals", "latency"]) == 0  # served by the marker
    assert main(["plan", str(ROOT / "cuda"), "--signals", "latency"]) == 0, capsys.readouterr().err
    # an edited kernel is a new program id: checked (here: refused by the stand-in) again
    edited = softmax_copy(tmp_path / "c", lambda s: s + "\n# edited\n")
    with pytest.raises(AssertionError, match="compiled softmax:base again"):
        main(["plan", str(edited), "--signals", "latency"])


def test_query_refuses_a_kernel_that_does_not_compile_before_running_anything(tmp_path, capsys):
    root = softmax_copy(tmp_path, lambda s: s.replace("tl.max(x, axis=0)", "tl.max(x, axis=0) + undefined_name"))
    code = main(["query", str(root), "--signals", "latency", "--workspace", str(tmp_path / "ws")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "undefined_name" in err, err
    assert not (tmp_path / "ws").exists()
