"""The documentation runs as written: README code blocks, the package docstring's example, and
links that stay inside the repository.

- ```python blocks of README.md run in a fresh interpreter fed through stdin (the way a user pastes
  them), in an empty directory, with a private workspace; without a GPU a query's signals come back
  unanswered with a reason, never a traceback.
- ```console blocks: each ``$ argus ...`` line runs; rc 0, or 1 for a query without a GPU (its
  signals are unanswered), never a traceback.
- Markdown links and backticked paths in the top-level docs resolve inside the repository.
"""
from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "DEVELOPERS.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([A-Za-z0-9_-]*)\n(.*?)^```", re.M | re.S)


def fenced(path: Path, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(path.read_text()) if kind == lang]


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _env(tmp_path: Path) -> dict:
    return dict(os.environ, ARGUS_WORKSPACE=str(tmp_path / "ws"), ARGUS_CACHE_DIR=str(tmp_path / "cache"),
                TRITON_CACHE_DIR=str(tmp_path / "triton"), COLUMNS="100")


def _run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-"], input=code, cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)


README_PY = fenced(ROOT / "README.md", "python")
README_CONSOLE = [line[2:] for body in fenced(ROOT / "README.md", "console")
                  for line in body.splitlines() if line.startswith("$ argus ")]


def test_readme_has_runnable_examples():
    assert README_PY and README_CONSOLE


@pytest.mark.parametrize("index", range(len(README_PY)))
def test_readme_python_block_runs(index, tmp_path):
    proc = _run_python(README_PY[index], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("line", README_CONSOLE)
def test_readme_console_line_runs(line, tmp_path):
    # README paths are relative to the checkout, where a reader stands; outputs go to tmp_path.
    argv = [str(ROOT / a) if a.startswith("examples/") else a for a in shlex.split(line)[1:]]
    proc = subprocess.run([sys.executable, "-m", "argus_rt.cli", *argv], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    allowed = {0} if argv[0] != "query" or _gpu() else {0, 1}
    assert proc.returncode in allowed, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr


def _docstring_example(module_path: Path) -> str:
    doc = ast.get_docstring(ast.parse(module_path.read_text()), clean=False) or ""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    ") and line.strip())
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line[4:])
    return "\n".join(block)


def test_package_docstring_example_runs(tmp_path):
    code = _docstring_example(ROOT / "argus_rt" / "__init__.py")
    assert "argus_rt.query(" in code
    proc = _run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Argus report" in proc.stdout and "Traceback" not in proc.stderr


LINK = re.compile(r"\]\(([^)\s]+)\)")
PATHLIKE = re.compile(r"`((?:\.\./|\./)?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.*-]+)+/?)`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_inside_the_repository(doc):
    text = doc.read_text()
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            bad.append(target)
    bad += [p for p in PATHLIKE.findall(text) if p.startswith("../")]
    assert not bad, f"{doc.name} points outside the repository or at nothing: {bad}"
