"""`argus discover`: program directory and .ttgir inputs, JSON output, probe emission, clear errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("triton")

from argus_rt.cli import main  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "triton"


def test_discover_program_json_and_probe(tmp_path, capsys):
    out = tmp_path / "probe.ttgir"
    assert main(["discover", str(EXAMPLE), "--region", "tma_matmul/kloop/load", "--json",
                 "--emit-probe", "b@6", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(text[: text.rindex("}") + 1])
    assert [s["label"] for s in doc["sites"]] == ["a", "b"]
    assert doc["sites"][1]["completion"]["phase_by_iteration"]["6"] == 0
    assert "%argus_pbar" in out.read_text()


def test_discover_ttgir_file_needs_iterations(tmp_path, capsys):
    assert main(["discover", str(EXAMPLE), "--json"]) == 0
    capsys.readouterr()
    from argus_rt.kinds.triton.discovery import program_ttgir
    from argus_rt.program import load_program

    ttgir, _ = program_ttgir(load_program(EXAMPLE))
    f = tmp_path / "k.ttgir"
    f.write_text(ttgir)
    assert main(["discover", str(f)]) == 2
    assert "needs --iterations" in capsys.readouterr().err
    assert main(["discover", str(f), "--iterations", "8", "--region", "tma_matmul/kloop"]) == 0
    assert "probe candidates (op x iteration): 24 (tma_load 16, wgmma 8)" in capsys.readouterr().out
    assert main(["discover", str(f), "--iterations", "8", "--region", "nope"]) == 2
    assert "valid regions: tma_matmul" in capsys.readouterr().err
    # every family is probed: the WGMMA dot too
    assert main(["discover", str(f), "--iterations", "8", "--emit-probe", "acc@1", "--out", str(tmp_path / "x")]) == 0
    assert "wrote probe 0x" in capsys.readouterr().out and "{pendings = 0 : i32}" in (tmp_path / "x").read_text()
    sync = tmp_path / "sync.ttgir"
    sync.write_text(ttgir.replace("isAsync = true", "isAsync = false"))
    assert main(["discover", str(sync), "--iterations", "8", "--emit-probe", "acc@1", "--out", str(tmp_path / "y")]) == 2
    assert "is not asynchronous" in capsys.readouterr().err
