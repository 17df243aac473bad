"""Containment: a program directory may name only files inside itself, program names never become
path syntax, and compiler flags outside the allow-list need --allow-unsafe-flags (CPU only)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from argus_rt.kinds.cuda.build import CudaBuildError, CudaBuildSpec
from argus_rt.nvcc_flags import unsafe_flag
from argus_rt.program import ProgramError, ProgramVersion, UnsafeFlagError, load_program, safe_program_name
from test_input_errors import GT, assert_one_line, run_cli

ROOT = Path(__file__).resolve().parents[1]


def program_copy(tmp_path: Path, edit=None, name: str = "prog") -> Path:
    root = tmp_path / name
    shutil.copytree(GT, root)
    if edit is not None:
        spec_path = root / "argus_program.json"
        spec = json.loads(spec_path.read_text())
        edit(spec)
        spec_path.write_text(json.dumps(spec))
    return root


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file next to (not inside) the program directory: what a hostile description points at."""
    (tmp_path / "secret.py").write_text("def expected(*a):\n    return {}\n")
    return tmp_path / "secret.py"


# ---- paths --------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["sources", "regions", "launch.source", "launch.reference"])
def test_a_symlink_inside_that_points_outside_is_refused(tmp_path, outside, field):
    def edit(spec):
        if field == "sources":
            spec["sources"].append("link.py")
        elif field == "regions":
            spec["regions"] = "link.py"
        elif field == "launch.source":
            spec["launch"]["source"] = "link.py"
        else:
            spec["launch"]["reference"] = "link.py:expected"

    root = program_copy(tmp_path, edit)
    (root / "link.py").symlink_to(outside)
    with pytest.raises(ProgramError, match=r"'link.py' lies outside the program directory"):
        load_program(root)


@pytest.mark.parametrize("field, value", [("launch.reference", "../secret.py:expected"),
                                          ("launch.reference", "/etc/passwd:expected"),
                                          ("launch.source", "sub/../../secret.py")])
def test_launch_files_outside_the_directory_are_refused(tmp_path, outside, field, value):
    key = field.split(".")[1]
    root = program_copy(tmp_path, lambda spec: spec["launch"].__setitem__(key, value))
    with pytest.raises(ProgramError, match=rf"{field}|launch/{key}"):
        load_program(root)


def test_triton_module_outside_the_directory_is_refused(tmp_path, outside):
    src = ROOT / "examples" / "triton"
    root = tmp_path / "triton"
    shutil.copytree(src, root)
    spec = json.loads((root / "argus_program.json").read_text())
    module = spec["launch"]["module"]
    (root / module).unlink()
    (root / module).symlink_to(outside)  # still listed in sources: refused there or as launch.module
    with pytest.raises(ProgramError, match="lies outside the program directory"):
        load_program(root)


def test_a_launch_file_that_does_not_exist_is_named(tmp_path):
    root = program_copy(tmp_path, lambda spec: spec["launch"].__setitem__("source", "missing.cu"))
    with pytest.raises(ProgramError, match="launch.source: 'missing.cu' does not exist"):
        load_program(root)


# ---- names --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["../escape", "a/b", "..", ".hidden", "", "x" * 65, "a\\b"])
def test_program_names_with_path_syntax_are_refused(tmp_path, bad):
    with pytest.raises(ProgramError, match="invalid program name"):
        ProgramVersion.from_sources(bad, {"k.cu": "x"})
    root = program_copy(tmp_path, lambda spec: spec.__setitem__("name", bad))
    with pytest.raises(ProgramError, match="name"):
        load_program(root)


def test_a_directory_name_becomes_a_safe_program_name(tmp_path):
    assert safe_program_name("my kernel (v2)") == "my_kernel__v2_"
    assert safe_program_name("..") == "program" and safe_program_name("._x") == "x"
    root = program_copy(tmp_path, lambda spec: spec.pop("name"), name="odd name;$(x)")
    assert load_program(root).name == "odd_name___x_"


@pytest.mark.parametrize("bad", ["..", "../x", "a/b", ".x"])
def test_cuda_module_names_never_leave_the_cache(bad):
    with pytest.raises(CudaBuildError, match="module name"):
        CudaBuildSpec(name=bad, sources=[str(GT / "ground_truth.cu")])


# ---- flags --------------------------------------------------------------------------------------
SAFE = ["-O0", "-O3", "-lineinfo", "-G", "-DN=128", "-DFLAG", "-Iinclude", "-arch=sm_90a",
        "-gencode=arch=compute_90a,code=sm_90a", "--use_fast_math", "-Xptxas", "-v", "-maxrregcount=128",
        "-std=c++17"]


def test_allowed_flags_load(tmp_path):
    root = program_copy(tmp_path, lambda spec: spec.__setitem__("flags", SAFE))
    (root / "include").mkdir()
    assert load_program(root).flags == tuple(SAFE)


@pytest.mark.parametrize("flags, named", [(["-ccbin", "/tmp/evil"], "-ccbin"), (["-Xcompiler", "-fplugin=x.so"], "-Xcompiler"),
                                          (["-O3", "--compiler-bindir=/tmp"], "--compiler-bindir=/tmp"),
                                          (["@flags.txt"], "@flags.txt"), (["-o", "/etc/x"], "-o"),
                                          (["-I/usr/include"], "-I/usr/include"), (["-I../.."], "-I../.."),
                                          (["-Xptxas", "--evil"], "-Xptxas"), (["-include", "x.h"], "-include")])
def test_unsafe_flags_are_refused_unless_allowed(tmp_path, flags, named):
    root = program_copy(tmp_path, lambda spec: spec.__setitem__("flags", flags))
    with pytest.raises(UnsafeFlagError) as info:
        load_program(root)
    message = str(info.value)
    assert repr(named) in message and "allowed: -O0..-O3" in message and "--allow-unsafe-flags" in message
    assert load_program(root, allow_unsafe_flags=True).flags == tuple(flags)


def test_unsafe_flag_cli_one_line_and_the_override(tmp_path):
    root = program_copy(tmp_path, lambda spec: spec.__setitem__("flags", ["-O3", "-ccbin", "/tmp/evil"]))
    assert_one_line(run_cli("plan", root, "--signals", "latency"), "argus plan:", "flags[1] '-ccbin'",
                    "is not an allowed compiler flag", "allowed: -O0..-O3", "--allow-unsafe-flags")
    assert_one_line(run_cli("query", root, "--signals", "latency", "--workspace", tmp_path / "ws"),
                    "argus query:", "'-ccbin'")
    ok = run_cli("plan", root, "--signals", "latency", "--allow-unsafe-flags")
    assert ok.returncode == 0, ok.stderr


def test_unsafe_flag_unit():
    assert unsafe_flag(["-O3", "-lineinfo"], GT) is None
    assert "flags[2]" in unsafe_flag(["-O3", "-lineinfo", "-ccbin"], GT)
    assert "ptxas options" in unsafe_flag(["-Xptxas"], GT)  # its value is missing
