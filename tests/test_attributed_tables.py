"""scripts/attributed_tables.py: the case-study tables quote the report's own values."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "tests" / "fixtures" / "device_capture" / "e2e_report_ground_truth.json"


def _run(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "attributed_tables.py"), *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_tables_carry_the_report_values_per_region():
    values = json.loads(REPORT.read_text())["values"]
    bars = sum(v["value"] for v in values if v["signal"] == "barrier_count" and v["region"] == "ground_truth/stage_b/inner"
               and "(inclusive)" not in v["metric"])
    mix = sum(v["value"] for v in values if v["signal"] == "instruction_mix" and v["region"] == "ground_truth/stage_a"
              and "(inclusive)" not in v["metric"])
    out = _run(str(REPORT))
    assert out.returncode == 0, out.stderr
    assert f"| ground_truth/stage_b/inner | {bars:.4g} |" in out.stdout
    assert f"| ground_truth/stage_a | {mix:.4g} |" in out.stdout
    assert "`branch_profile` not in the report" in out.stdout


def test_a_file_that_is_not_a_report_is_one_line():
    out = _run(str(ROOT / "README.md"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not an Argus report" in out.stderr
