"""`argus discover` goes through the kind registry: a kind without async-site discovery gets one line
naming the kinds with it; a program's table equals its TTGIR file's; --iterations overrides the launch."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from argus_rt.cli import main
from argus_rt.kinds.registry import kinds_with

ROOT = Path(__file__).resolve().parent.parent
TRITON = ROOT / "examples" / "triton"


@pytest.mark.parametrize("example", ["cuda", "cupy", "numba"])
def test_a_kind_without_discovery_is_one_line_naming_the_kinds_with_it(example, capsys):
    assert main(["discover", str(ROOT / "examples" / example)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    with_hook = ", ".join(sorted(kinds_with(["discover_async_sites"])))
    assert len(err) == 1 and "Traceback" not in err[0]
    assert f"has no 'discover_async_sites' (kinds with one: {with_hook})" in err[0], err[0]


def test_bad_emit_probe_is_checked_before_compiling(capsys):
    assert main(["discover", str(ROOT / "examples" / "cuda"), "--emit-probe", "a3", "--out", "x"]) == 2
    assert "--emit-probe takes OP@ITER (e.g. a@3) and needs --out; got 'a3'" in capsys.readouterr().err


def test_program_and_its_ttgir_file_print_the_same_sites(tmp_path, capsys):
    pytest.importorskip("triton")
    from argus_rt.kinds.triton.discovery import program_ttgir
    from argus_rt.program import load_program

    ttgir, iterations = program_ttgir(load_program(TRITON))
    f = tmp_path / "k.ttgir"
    f.write_text(ttgir)
    region = "tma_matmul/kloop"
    assert main(["discover", str(TRITON), "--region", region, "--json", str(tmp_path / "p.json")]) == 0
    from_program = capsys.readouterr().out
    assert main(["discover", str(f), "--iterations", str(iterations), "--region", region,
                 "--json", str(tmp_path / "f.json")]) == 0
    from_file = capsys.readouterr().out
    assert from_program == from_file and "probe candidates (op x iteration):" in from_program
    p, t = (json.loads((tmp_path / n).read_text()) for n in ("p.json", "f.json"))
    assert p["sites"] == t["sites"] and p["program"] != t["program"]  # the program's id, the file's path

    # --iterations on a program overrides its launch's: as the same TTGIR with that count
    assert main(["discover", str(TRITON), "--region", region, "--iterations", "3"]) == 0
    overridden = capsys.readouterr().out
    assert main(["discover", str(f), "--iterations", "3", "--region", region]) == 0
    assert overridden == capsys.readouterr().out and "(3 iterations)" in overridden
    # a probe of an op the region lacks: one line naming the valid ones
    assert main(["discover", str(TRITON), "--region", region, "--emit-probe", "zz@1", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "no async site 'zz' in region 'tma_matmul/kloop'; valid: 0x" in err and "(tma_load a)" in err


def test_a_kinds_input_errors_come_from_the_registry(tmp_path, capsys):
    pytest.importorskip("triton")
    from argus_rt.errors import ArgusInputError, input_error_classes
    from argus_rt.kinds.registry import find_kind, kind_input_errors
    from argus_rt.kinds.triton.discovery import program_ttgir
    from argus_rt.kinds.triton.kernel_check import ProbeError
    from argus_rt.program import load_program

    assert find_kind("triton").input_errors == ("argus_rt.kinds.triton.kernel_check:ProbeError",)
    assert ProbeError in kind_input_errors() and ProbeError in input_error_classes()
    assert not issubclass(ProbeError, ArgusInputError)  # so only the registry makes it bad input
    ttgir, _ = program_ttgir(load_program(TRITON))
    f = tmp_path / "k.ttgir"
    f.write_text(ttgir)
    assert main(["discover", str(f), "--iterations", "8", "--emit-probe", "a@99", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "iteration 99 is not served by op 0x" in err[0], err
