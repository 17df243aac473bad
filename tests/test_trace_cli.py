"""`argus trace` and `argus build` from the command line (no GPU)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from argus_rt.cli import main
from argus_rt.regions import RegionTree
from argus_rt.trace import TraceConfig, save_raw
from tests.ring_writer import RingWriter
from toolchain import NVCC

ROOT = Path(__file__).resolve().parents[1]


def _saved_trace(tmp_path, tree):
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=8, seq=9)
    w = RingWriter(cfg)
    rid = tree["example/stage_a"].id
    w.emit(0, 0, 2, "begin", rid, 100)
    w.emit(0, 0, 2, "end", rid, 350)
    return save_raw(tmp_path / "t.npz", w.raw, cfg, unbuffered=0)


def test_trace_show_and_chrome(tmp_path, capsys):
    tree = RegionTree.load(ROOT / "examples" / "cuda" / "regions.json")
    raw = _saved_trace(tmp_path, tree)
    out_json = tmp_path / "c.json"
    rc = main(["trace", str(raw), "--manifest", str(ROOT / "examples" / "cuda" / "regions.json"), "--chrome", str(out_json)])
    text = capsys.readouterr().out
    assert rc == 0 and "example/stage_a" in text and "250" in text
    events = json.loads(out_json.read_text())["traceEvents"]
    assert any(e.get("name") == "example/stage_a" and e.get("dur") == 0.25 for e in events)


def test_trace_chrome_to_stdout(tmp_path, capsys):
    tree = RegionTree.load(ROOT / "examples" / "cuda" / "regions.json")
    raw = _saved_trace(tmp_path, tree)
    rc = main(["trace", str(raw), "--manifest", str(ROOT / "examples" / "cuda" / "regions.json"), "--chrome", "-"])
    captured = capsys.readouterr()
    assert rc == 0 and "example/stage_a" in captured.err  # the table moves to stderr
    events = json.loads(captured.out)["traceEvents"]  # stdout carries only the trace
    assert any(e.get("name") == "example/stage_a" and e.get("dur") == 0.25 for e in events)


def test_trace_unknown_id_fails(tmp_path, capsys):
    other = RegionTree("other")
    other.add("x")
    other.save(tmp_path / "m.json")
    tree = RegionTree.load(ROOT / "examples" / "cuda" / "regions.json")
    raw = _saved_trace(tmp_path, tree)
    assert main(["trace", str(raw), "--manifest", str(tmp_path / "m.json")]) == 2  # bad input: exit 2
    assert "not in the program's regions" in capsys.readouterr().err


def test_build_all_modes(tmp_path, capsys, monkeypatch):
    if NVCC is None:
        pytest.skip("no nvcc where argus_rt.tools looks")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    rc = main(["build", str(ROOT / "examples" / "cuda" / "nested_regions.cu")])
    out = capsys.readouterr().out
    assert rc == 0
    lines = [l for l in out.splitlines() if l.startswith("mode ")]
    assert len(lines) == 3
    assert "0 marker footprints" in lines[0] and "8 marker footprints" in lines[1] and "0 marker footprints" in lines[2]


def test_build_bad_arch(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    if NVCC is None:
        pytest.skip("no nvcc where argus_rt.tools looks")
    assert main(["build", str(ROOT / "examples" / "cuda" / "nested_regions.cu"), "--mode", "0", "--arch", "sm_1"]) == 1
    assert "cannot build 'sm_1'" in capsys.readouterr().err
