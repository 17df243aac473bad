"""argus_rt.tools: one search order for nvcc, cuobjdump, nvdisasm and ncu, and one error."""
from __future__ import annotations

import os
import stat

import pytest

from argus_rt import tools
from argus_rt.errors import ArgusInputError
from argus_rt.tools import ToolNotFoundError, find_tool


def _exe(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def places(monkeypatch, tmp_path):
    """One fake copy of ``tool`` in each place of the search order, and a function that removes one."""
    for var in ("ARGUS_NVCC", "ARGUS_CUOBJDUMP", "ARGUS_NVDISASM", "ARGUS_NCU", "NCU"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(tools, "CUDA_BIN", tmp_path / "usr-local-cuda" / "bin")
    monkeypatch.setattr(tools, "_triton_bin", lambda: tmp_path / "triton" / "bin")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda-home"))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))

    def make(tool):
        return {
            "env": _exe(tmp_path / "env" / tool),
            "cuda_home": _exe(tmp_path / "cuda-home" / "bin" / tool),
            "path": _exe(tmp_path / "path" / tool),
            "cuda_bin": _exe(tmp_path / "usr-local-cuda" / "bin" / tool),
            "triton": _exe(tmp_path / "triton" / "bin" / tool),
        }

    return make


@pytest.mark.parametrize("tool,var", [("nvcc", "ARGUS_NVCC"), ("cuobjdump", "ARGUS_CUOBJDUMP"),
                                      ("nvdisasm", "ARGUS_NVDISASM"), ("ncu", "ARGUS_NCU")])
def test_search_order(places, monkeypatch, tool, var):
    fakes = places(tool)
    monkeypatch.setenv(var, str(fakes["env"]))
    order = ["env", "cuda_home", "path", "cuda_bin"] + (["triton"] if tool in ("cuobjdump", "nvdisasm") else [])
    for place in order:
        assert find_tool(tool) == fakes[place], f"{tool}: expected the {place} copy"
        os.remove(fakes[place])
    with pytest.raises(ToolNotFoundError):
        find_tool(tool)


def test_triton_copy_is_never_used_for_nvcc_or_ncu(places):
    for tool in ("nvcc", "ncu"):
        fakes = places(tool)
        for place in ("env", "cuda_home", "path", "cuda_bin"):
            os.remove(fakes[place])
        with pytest.raises(ToolNotFoundError):
            find_tool(tool)


def test_stale_override_falls_back(places, monkeypatch, tmp_path):
    fakes = places("nvcc")
    monkeypatch.setenv("ARGUS_NVCC", str(tmp_path / "gone" / "nvcc"))
    assert find_tool("nvcc") == fakes["cuda_home"]


def test_legacy_ncu_variable_comes_after_argus_ncu(places, monkeypatch):
    fakes = places("ncu")
    monkeypatch.setenv("NCU", str(fakes["path"]))
    assert find_tool("ncu") == fakes["path"]
    monkeypatch.setenv("ARGUS_NCU", str(fakes["env"]))
    assert find_tool("ncu") == fakes["env"]


def test_error_names_the_tool_and_every_place(places, monkeypatch, tmp_path):
    monkeypatch.setenv("ARGUS_NVDISASM", str(tmp_path / "gone"))
    with pytest.raises(ToolNotFoundError) as info:
        find_tool("nvdisasm")
    msg = str(info.value)
    assert isinstance(info.value, ArgusInputError) and "\n" not in msg
    assert msg.startswith("nvdisasm not found; looked at: ")
    for where in (f"$ARGUS_NVDISASM ({tmp_path / 'gone'})", "$CUDA_HOME/bin", "PATH", str(tools.CUDA_BIN),
                  "Triton's bundled tools"):
        assert where in msg
    assert tools.tool_or_none("nvdisasm") is None


def test_unknown_tool_lists_the_valid_ones():
    with pytest.raises(ArgusInputError, match="unknown tool 'objdump'; valid: nvcc, cuobjdump, nvdisasm, ncu"):
        find_tool("objdump")


def test_both_disassemble_functions_agree(tmp_path, monkeypatch):
    from argus_rt import sass
    from argus_rt.kinds.cuda import build as cuda
    from argus_rt.resources import examples_dir

    if tools.tool_or_none("nvcc") is None or tools.tool_or_none("cuobjdump") is None:
        pytest.skip("needs nvcc and cuobjdump")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    src = examples_dir() / "cuda" / "nested_regions.cu"
    cubin = cuda.build(cuda.CudaBuildSpec("tools_agree", [src], include_dirs=[src.parent], argus_mode=1)).cubin
    whole = sass.disassemble(cubin)
    assert cuda.sass_instructions(whole), "no instructions listed"
    assert cuda.disassemble(cubin) == whole
    kernel = next(iter(sass.parse_sass(whole)))
    assert cuda.disassemble(cubin, kernel) == sass.disassemble(cubin, function=kernel)
    junk = tmp_path / "junk.cubin"
    junk.write_bytes(b"not an ELF file")
    with pytest.raises(cuda.CudaBuildError, match="cuobjdump"):  # the build module's error, as its callers expect
        cuda.disassemble(junk)
