"""NVBit adapter (CPU): what can be tested without NVBit. The tool itself is UNVERIFIED on our GPUs."""
import subprocess
from pathlib import Path

import pytest

from argus_rt.backends import nvbit
from argus_rt.backends.base import BackendUnavailableError
from argus_rt.backends.pcmap import PcRegionMap
from argus_rt.markers import MARKER_BEGIN, MARKER_END, MARKER_TAG
from toolchain import needs_nvcc


def test_nvbit_path_errors(tmp_path):
    with pytest.raises(BackendUnavailableError, match="set NVBIT_PATH"):
        nvbit.nvbit_path({})
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "nvbit.h").write_text("")
    with pytest.raises(BackendUnavailableError, match="missing core/nvbit_tool.h, core/libnvbit.a"):
        nvbit.nvbit_path({"NVBIT_PATH": str(tmp_path)})
    (tmp_path / "core" / "nvbit_tool.h").write_text("")
    (tmp_path / "core" / "libnvbit.a").write_bytes(b"!<arch>\n")
    assert nvbit.nvbit_path({"NVBIT_PATH": str(tmp_path)}) == tmp_path


def test_adapter_unavailable_without_nvbit(monkeypatch):
    monkeypatch.delenv("NVBIT_PATH", raising=False)
    ok, why = nvbit.NvbitAdapter().available()
    assert not ok and "NVBIT_PATH" in why
    assert "needs_binary_instrumentation" in nvbit.NvbitAdapter().effects
    with pytest.raises(ValueError, match="valid: kernel"):
        nvbit.NvbitAdapter().validate_config({"kernels": "k"})


def test_generated_sources_carry_the_marker_constants():
    src = nvbit.tool_sources()
    tool = src["argus_map.cu"]
    assert f"kTag = 0x{MARKER_TAG:04x}" in tool and f"kBegin = {MARKER_BEGIN}, kEnd = {MARKER_END}" in tool
    assert "%(" not in tool and "%(" not in src["inject_funcs.cu"]  # every template field was filled
    assert f"kind == {MARKER_BEGIN}" in src["inject_funcs.cu"]


def test_build_commands_link_nvbit(tmp_path):
    cmds = nvbit.build_commands(tmp_path, Path("/opt/nvbit"), nvcc="nvcc")
    assert "-astoolspatch" in cmds[0] and "--keep-device-functions" in cmds[0]
    assert "-cloning=no" in cmds[1] and cmds[2][-4:-2] == ["-L/opt/nvbit/core", "-lnvbit"]


@needs_nvcc
def test_injected_device_functions_compile_for_sm90a(tmp_path):
    (tmp_path / "inject_funcs.cu").write_text(nvbit.tool_sources()["inject_funcs.cu"])
    cmd = nvbit.build_commands(tmp_path, Path("/nonexistent-nvbit"), nvcc="nvcc")[0]
    cmd = [c for c in cmd if c not in ("-ccbin", "g++")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "inject_funcs.o").stat().st_size > 0


def test_tool_output_parses_into_a_map(tmp_path):
    text = ("# argus-nvbit v1 overflow 0\n"
            "ground_truth_kernel(const float *, float *) 4c0 5394f9af 3072\n"
            "ground_truth_kernel(const float *, float *) 4c0 3c0bE0f2 1024\n"
            "other_kernel(int) 0 0 1\n")
    doc = nvbit.parse_tool_output(text, kernel="_Z19ground_truth_kernelPKfPf")
    assert doc["method"] == "nvbit" and len(doc["entries"]) == 2
    assert doc["entries"][0] == ["ground_truth_kernel@0x4c0", 0x5394F9AF, 3072.0]
    m = PcRegionMap.from_evidence(doc)
    assert m.shared_pcs() == [0x4C0] and m.pcs[0x4C0].leaf_counts() == {0x5394F9AF: 3072.0, 0x3C0BE0F2: 1024.0}
    # what the adapter publishes: the same counts as typed evidence (.npy columns + meta.json)
    from argus_rt.evidence import PcRegionCounts

    published = PcRegionCounts.from_document(doc, "nvbit counts").save(tmp_path / "pc_region_counts")
    assert PcRegionCounts.from_outputs(published.get).document()["entries"] == doc["entries"]
    with pytest.raises(nvbit.NvbitError, match="first line"):
        nvbit.parse_tool_output("garbage\n")
    with pytest.raises(nvbit.NvbitError, match="line 2"):
        nvbit.parse_tool_output("# argus-nvbit v1 overflow 0\nk 4c0\n")
    with pytest.raises(nvbit.NvbitError, match="2 marker overflow"):
        nvbit.parse_tool_output("# argus-nvbit v1 overflow 2\n")
