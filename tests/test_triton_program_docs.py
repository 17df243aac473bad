"""docs/programs.md shows the minimal Triton program as it is in examples/triton_minimal, and that
program follows the protocol the page documents: it plans, discovers, and names its inputs after
the kernel's own arguments."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

pytest.importorskip("triton")

from argus_rt.cli import main  # noqa: E402
from argus_rt.kinds.triton.program import import_module, load_kernel  # noqa: E402
from argus_rt.kinds.triton.run import TRITON_PROTOCOL  # noqa: E402
from argus_rt.program import load_program  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "programs.md"
EXAMPLE = ROOT / "examples" / "triton_minimal"


def test_the_page_shows_the_example_files_verbatim():
    text = DOC.read_text()
    for name in ("scale.py", "argus_program.json"):
        m = re.search(rf"`examples/triton_minimal/{re.escape(name)}`:\n\n```\w*\n(.*?)^```", text, re.M | re.S)
        assert m, name
        assert m.group(1) == (EXAMPLE / name).read_text(), name


def test_every_protocol_function_and_launch_key_is_documented():
    text = DOC.read_text()
    for fn in TRITON_PROTOCOL + ("compile_reference",):
        assert f"`{fn}(" in text, fn
    for key in ("module", "kernel", "args", "constexprs", "num_warps", "num_stages", "config", "iterations",
                "capability", "shapes", "signature", "rtol"):
        assert re.search(rf"^\| [^|]*`{key}`", text, re.M), key  # in the first column of the launch table


def test_the_minimal_program_plans_discovers_and_names_inputs_after_the_kernel_args(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["plan", str(EXAMPLE), "--signals", "latency,instruction_mix"]) == 0
    assert main(["discover", str(EXAMPLE), "--json", str(tmp_path / "d.json")]) == 0, capsys.readouterr().err
    program = load_program(EXAMPLE)
    mod, fn, args, _ = load_kernel(program)
    kernel_params = [p.name for p in fn.params]
    assert set(inspect.signature(mod.reference).parameters) <= set(kernel_params)
    assert set(args) == {p.name for p in fn.params if not p.is_constexpr}
    assert all(callable(getattr(import_module(program), f, None)) for f in TRITON_PROTOCOL)
    # make_inputs' keys, read from its source (it needs a GPU to run)
    keys = set(re.findall(r'"(\w+)": torch\.', inspect.getsource(mod.make_inputs)))
    assert keys == {"x", "y"} and keys <= set(kernel_params)
