"""scripts/ncu_hot_blocks.py on a real H200 source page (the ground-truth kernel), and its one-line errors (CPU)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "device_capture" / "ncu_gt_source_sass.csv"
sys.path.insert(0, str(ROOT / "scripts"))

import ncu_hot_blocks  # noqa: E402

from argus_rt.backends import ncu  # noqa: E402


def test_groups_partition_the_kernels_instructions():
    (p,) = ncu.parse_source_csv(FIX.read_text())
    lines = ncu_hot_blocks.hot_blocks(p, top=1000)
    total = sum(p.metrics["inst_executed"])
    assert lines[0].startswith("ground_truth_kernel") and f"{total / 1e6:.1f} M warp instructions" in lines[0]
    rows = [l.split() for l in lines[2:] if l[:1] == " " and l.split()[0].replace(",", "").isdigit()]
    # every executed line falls in exactly one group: the groups' instructions add up to the kernel's
    assert sum(float(r[0].replace(",", "")) * int(r[1]) for r in rows) == pytest.approx(total)
    # the straight-line head runs once per warp (1024 warps), so a group of that count exists
    assert any(r[0] == "1,024" for r in rows)
    assert any(l.startswith("stall reasons") for l in lines)


def test_bad_inputs_get_one_line(tmp_path):
    script = ROOT / "scripts" / "ncu_hot_blocks.py"
    missing = subprocess.run([sys.executable, str(script), str(tmp_path / "none.csv")], capture_output=True, text=True)
    assert missing.returncode != 0 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    wrong = subprocess.run([sys.executable, str(script), str(FIX), "--kernel", "nope"], capture_output=True, text=True)
    assert wrong.returncode != 0 and "no kernel 'nope'" in wrong.stderr and "ground_truth_kernel" in wrong.stderr
    junk = tmp_path / "junk.csv"
    junk.write_text("not ncu output\n")
    bad = subprocess.run([sys.executable, str(script), str(junk)], capture_output=True, text=True)
    assert bad.returncode != 0 and "no per-PC table" in bad.stderr and "Traceback" not in bad.stderr
