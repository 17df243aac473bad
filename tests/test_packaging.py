"""Packaging: the package list, the wheel's contents, and a non-editable install that runs the demo.

A regular (non-editable) install must carry the CUDA headers, the examples and the JSON schemas,
and find them through argus_rt.resources without the checkout: the demo's CPU steps run from a
directory that is not the checkout, with only the installed copy importable.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from toolchain import NVCC

ROOT = Path(__file__).resolve().parents[1]

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _code_packages() -> set[str]:
    found = set()
    for top in ("argus_rt", "megakernel", "tinyllama", "overlap"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    return found


def test_package_list_names_every_package_directory():
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    data = set(_pyproject()["tool"]["setuptools"]["package-dir"])
    assert data == {"argus_rt.data.csrc", "argus_rt.data.examples"}
    assert listed - data == _code_packages()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources it builds.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("argus_rt", "csrc", "examples", "megakernel", "tinyllama", "overlap"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (whl,) = out.glob("argus_rt-*.whl")
    return whl


def test_wheel_ships_headers_examples_and_schemas(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in ("csrc/argus/argus.cuh", "csrc/argus/argus_layout.h", "csrc/megakernel/megakernel.cu"):
        assert f"argus_rt/data/{rel}" in names
    for example in ("cuda", "ground_truth", "triton"):
        assert f"argus_rt/data/examples/{example}/argus_program.json" in names
    shipped_schemas = {n for n in names if n.startswith("argus_rt/schemas/")}
    in_checkout = {f"argus_rt/schemas/{p.name}" for p in (ROOT / "argus_rt" / "schemas").glob("*.json")}
    assert shipped_schemas == in_checkout
    assert not [n for n in names if "__pycache__" in n]


def test_non_editable_install_runs_the_demo_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                           "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target), ARGUS_CACHE_DIR=str(tmp_path / "cache"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"), CUDA_VISIBLE_DEVICES="")
    where = subprocess.run([sys.executable, "-c", "import argus_rt, argus_rt.resources as r; "
                            "print(argus_rt.__file__); print(r.csrc_dir()); print(r.example('cuda'))"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        assert Path(line).is_relative_to(target), line
    demo = subprocess.run([sys.executable, "-m", "argus_rt.cli", "demo"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Traceback" not in demo.stdout + demo.stderr
    if NVCC is not None:
        assert "failed" not in demo.stdout.lower(), demo.stdout[-3000:]
