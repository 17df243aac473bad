"""Lint in CI: ruff (style and unused names) and import-linter (layers, no cycles), both configured in
pyproject.toml; each test fails with the tool's own report."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    """The tool next to this interpreter (the venv's), else on PATH; skip when neither has it."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (it is in the 'test' extra: pip install -e '.[test]')")
    return found


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_reports_nothing():
    proc = _run([_tool("ruff"), "check", "--no-cache", "."])
    assert proc.returncode == 0, f"ruff check failed:\n{proc.stdout[-8000:]}{proc.stderr[-2000:]}"


def test_import_contracts_are_kept():
    proc = _run([_tool("lint-imports"), "--no-cache"])
    assert proc.returncode == 0, f"lint-imports failed:\n{proc.stdout[-8000:]}{proc.stderr[-2000:]}"
