"""Benchmark records (benchmarks/record.py) and docs/benchmarks.md rendered from them, on the CPU."""
from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks import provenance, record, results_doc

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("collector_overhead", "decode", "engine_overhead", "marker_cost", "overlap", "planner_overhead",
           "probe_batching", "trace_overhead")
FIELDS = {"date", "gpu", "command", "commit", "versions", "rows"}
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A git checkout with one committed file, outside the project; $OUT and $ARGUS_COMMIT unset."""
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.delenv(provenance.COMMIT_ENV, raising=False)
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "code.py").write_text("x = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", "code.py")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return root


def _toy_rows(median_ms: float) -> list[dict]:
    reps = [median_ms - 0.1, median_ms, median_ms + 0.3]
    return [{"backend": "a", "ms": median_ms, "spread": {"ms": record.spread(reps)}},
            {"backend": "floor", "ms": 0.5}]


def _record(root: Path, monkeypatch, date: str, median_ms: float, script: str = "toy") -> dict:
    monkeypatch.setattr(record, "utc_now", lambda: date)
    return record.record(script, _toy_rows(median_ms), title=f"{script} title", notes=f"{script} notes",
                         gpu="test GPU", root=root)


def test_spread_is_min_median_max_n():
    assert record.spread([3, 1, 2, 10]) == {"min": 1.0, "median": 2.5, "max": 10.0, "n": 4}
    with pytest.raises(ValueError):
        record.spread([])


@needs_git
def test_record_has_every_field_and_spread(repo, monkeypatch):
    got = _record(repo, monkeypatch, "2026-12-01 10:00:00 UTC", 2.0)
    on_disk = json.loads((repo / "benchmarks" / "results" / "toy.json").read_text())
    assert on_disk == got
    assert FIELDS <= set(got)
    assert got["commit"] == _git(repo, "rev-parse", "HEAD") and got["commit_source"] == "git"
    assert set(got["versions"]) == set(provenance.VERSION_NAMES)
    assert got["versions"]["python"] == platform.python_version()
    for name, version in got["versions"].items():  # a missing version is null with its reason, never guessed
        assert (version is None) == (f"versions.{name}" in got["not_recorded"]), name
    assert got["rows"][0]["spread"]["ms"] == {"min": 1.9, "median": 2.0, "max": 2.3, "n": 3}
    assert got["columns"] == ["backend", "ms"]

    (repo / "code.py").write_text("x = 2\n")  # a tracked change: the record says the tree was not HEAD
    assert _record(repo, monkeypatch, "2026-12-01 10:01:00 UTC", 2.0)["commit"].endswith("-dirty")



@needs_git
def test_record_keeps_the_command_it_is_given(repo, monkeypatch):
    """A run that is not a benchmarks/ script (e.g. examples/agent_client) records its own command line;
    without one, the record names the script and this process's arguments."""
    monkeypatch.setattr(record, "utc_now", lambda: "2026-12-01 10:00:00 UTC")
    given = record.record("toy", _toy_rows(2.0), title="toy title", gpu="test GPU", root=repo,
                          command="python -m examples.agent_client --budget 3")
    assert given["command"] == "python -m examples.agent_client --budget 3"
    assert "`python -m examples.agent_client --budget 3`" in (repo / "docs" / "benchmarks.md").read_text()
    default = record.record("toy", _toy_rows(2.0), title="toy title", gpu="test GPU", root=repo)
    assert default["command"].startswith("python benchmarks/toy.py")

def test_commit_without_git_is_null_with_reason_or_from_env(tmp_path, monkeypatch):
    monkeypatch.delenv(provenance.COMMIT_ENV, raising=False)
    commit, source, why = provenance.git_commit(tmp_path)
    assert commit is None and source is None and "no .git" in why
    monkeypatch.setenv(provenance.COMMIT_ENV, "abc123-dirty")
    commit, source, why = provenance.git_commit(tmp_path)
    assert (commit, why) == ("abc123-dirty", None) and provenance.COMMIT_ENV in source


@needs_git
def test_rerun_replaces_its_section_and_moves_the_old_one_to_history(repo, monkeypatch):
    doc, history = record.doc_paths(repo)
    _record(repo, monkeypatch, "2026-12-01 10:00:00 UTC", 2.0)
    _record(repo, monkeypatch, "2026-12-01 10:00:30 UTC", 7.0, script="other")
    first = doc.read_text()
    old_section = results_doc.split_sections(first)["toy"][1]
    assert not history.exists()

    _record(repo, monkeypatch, "2026-12-01 11:00:00 UTC", 4.0)
    text = doc.read_text()
    assert text.count("## toy title") == 1 and text.count("## other title") == 1
    assert "| a | 4 |" in text and "| a | 2 |" not in text
    assert "3.9 / 4 / 4.3 (3)" in text  # the spread table
    moved = history.read_text()
    assert moved.startswith(results_doc.HISTORY_HEADER)
    assert results_doc.MARKER.sub("", old_section, count=1).strip() in moved and "| a | 4 |" not in moved

    results_doc.update_docs(repo / "benchmarks" / "results", doc, history)  # same runs: nothing changes
    assert doc.read_text() == text and history.read_text() == moved


def test_committed_docs_are_what_the_committed_results_render():
    records = results_doc.load_records(ROOT / "benchmarks" / "results")
    want = results_doc.render_doc(records)
    assert (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8") == want, \
        "docs/benchmarks.md drifted from benchmarks/results/*.json: run python -m benchmarks.record --render"
    assert set(SCRIPTS) <= set(records)
    for name in SCRIPTS:
        rec = records[name]
        assert FIELDS <= set(rec), name
        for field in ("commit", "versions"):  # recorded before these fields existed: null, with the reason
            assert rec[field] is not None or field in rec["not_recorded"], (name, field)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_records_through_the_shared_code(script):
    source = (ROOT / "benchmarks" / f"{script}.py").read_text(encoding="utf-8")
    assert "from benchmarks.record import" in source and "record(" in source
