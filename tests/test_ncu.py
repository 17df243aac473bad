"""Nsight Compute source-page parsing on real H200 output, and clear errors for bad output (CPU)."""
from pathlib import Path

import pytest

from argus_rt import tools
from argus_rt.backends import ncu
from argus_rt.backends.base import BackendUnavailableError

FIX = Path(__file__).parent / "fixtures" / "device_capture"


def _text(name):
    return (FIX / name).read_text()


def test_source_page_of_the_ground_truth_kernel():
    (p,) = ncu.parse_source_csv(_text("ncu_gt_source_sass.csv"))
    assert p.kernel == "ground_truth_kernel" and p.kernel_name.startswith("ground_truth_kernel(const float *")
    assert p.pcs[:3] == [0x0, 0x10, 0x20] and len(p.pcs) == 96
    # 128 CTAs x 8 warps: straight-line code at the top runs once per warp, 32 threads each.
    assert p.metric("inst_executed")[0x0] == 1024 and p.metric("thread_inst_executed")[0x0] == 1024 * 32
    assert all(v >= 0 for v in p.metrics["predicated_off"])
    assert "stall:long_sb" in p.metrics and "warp_stall_samples" in p.metrics
    assert not any(k.endswith("(Not Issued)") for k in p.metrics)


def test_per_pc_branches_sum_to_ncus_kernel_total():
    (p,) = ncu.parse_source_csv(_text("ncu_gt_source_sass.csv"))
    totals = ncu.parse_details_csv(_text("ncu_gt_details.csv"))["ground_truth_kernel"]
    assert sum(p.metrics["branch_inst_executed"]) == totals["Source Counters/Branch Instructions"]
    assert sum(p.metrics["barrier_inst_executed"]) == 0  # the ground truth has no __syncthreads


def test_full_set_has_other_columns_but_same_counts():
    (a,) = ncu.parse_source_csv(_text("ncu_gt_source_sass.csv"))
    (b,) = ncu.parse_source_csv(_text("ncu_gt_full_source_sass.csv"))
    assert a.metrics["inst_executed"] == b.metrics["inst_executed"] and a.base_address != b.base_address


def test_evidence_document():
    (p,) = ncu.parse_source_csv(_text("ncu_gt_source_sass.csv"))
    doc = p.to_evidence()
    assert doc["format"] == "argus.pc_counters/1" and doc["pcs"][1] == "ground_truth_kernel@0x10"
    assert doc["opcodes"][0] == "LDC" and len(doc["metrics"]["inst_executed"]) == 96


def test_missing_columns_are_named():
    text = _text("ncu_gt_source_sass.csv").replace('"Instructions Executed"', '"Inst Exec"', 1)
    with pytest.raises(ncu.NcuOutputError, match=r"lacks column\(s\) \['Instructions Executed'\]"):
        ncu.parse_source_csv(text)
    with pytest.raises(ncu.NcuOutputError, match="no per-PC table"):
        ncu.parse_source_csv("==PROF== Connected to process 1\nhello\n")
    bad = _text("ncu_gt_source_sass.csv").replace('"1024","32768"', '"many","32768"', 1)
    with pytest.raises(ncu.NcuOutputError, match="holds 'many', not a number"):
        ncu.parse_source_csv(bad)
    with pytest.raises(ncu.NcuOutputError, match="lacks"):
        ncu.parse_details_csv('"ID","Kernel Name"\n"0","k"\n')


def test_no_kernel_profiled_lists_what_ran():
    with pytest.raises(ncu.NcuNoKernelError, match="kernels the program launched: ground_truth_kernel"):
        ncu.parse_source_csv(_text("ncu_nomatch.csv"))
    profiles = ncu.parse_source_csv(_text("ncu_gt_source_sass.csv"))
    with pytest.raises(ncu.NcuNoKernelError, match="profiled: \\['ground_truth_kernel'\\]"):
        ncu.select_profile(profiles, "other_kernel")
    with pytest.raises(ncu.NcuOutputError, match="launch 1 .* 1 launch"):
        ncu.select_profile(profiles, "_Z19ground_truth_kernelPKfS0_Pfiiii", launch=1)
    with pytest.raises(ncu.NcuError, match="ncu reported errors"):
        ncu.parse_source_csv("==ERROR== Failed to profile kernel\n")


def test_ncu_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr(tools.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(ncu.Path, "is_file", lambda self: False)
    with pytest.raises(BackendUnavailableError, match="ncu\\) not found"):
        ncu.find_ncu()
    ok, why = ncu.NcuAdapter().available()
    assert not ok and "not found" in why


def test_wrong_arch():
    ncu.check_arch("sm_90a", (9, 0))
    with pytest.raises(ncu.WrongArchError, match="sm_90a .* GPU is 8.0.*compute_80a"):
        ncu.check_arch("sm_90a", (8, 0))
    with pytest.raises(ncu.WrongArchError, match="no SASS"):
        ncu.check_arch(None, (9, 0))
    with pytest.raises(ncu.WrongArchError, match="unrecognised"):
        ncu.check_arch("compute_90", (9, 0))


def test_command_and_config():
    cmd = ncu.ncu_command(["./gt", "128"], "_Z19ground_truth_kernelPKfS0_Pfiiii", launches=2, ncu="/x/ncu")
    assert cmd[0] == "/x/ncu" and cmd[-2:] == ["./gt", "128"]
    for flag in ("--page", "source", "--print-source", "sass", "--csv", "--clock-control", "none"):
        assert flag in cmd
    assert cmd[cmd.index("-k") + 1] == "regex:ground_truth_kernel" and cmd[cmd.index("-c") + 1] == "2"
    with pytest.raises(ValueError, match="non-empty argument list"):
        ncu.ncu_command([], ncu="/x/ncu")
    adapter = ncu.NcuAdapter()
    assert {"replays_kernel", "exclusive_profiler"} <= adapter.effects
    with pytest.raises(ValueError, match="unknown ncu config key\\(s\\) \\['kernal'\\]; valid: kernel"):
        adapter.validate_config({"kernal": "k"})
    with pytest.raises(ValueError, match="launches"):
        adapter.validate_config({"launches": 0})
