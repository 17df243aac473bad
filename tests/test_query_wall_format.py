"""benchmarks/query_wall.py's one-line view of a mapping run's steps (``provenance.seconds``)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.query_wall import format_mapping_seconds  # noqa: E402


def test_a_sequential_mapping_run_reads_as_before():
    s = {"build": 0.2, "disassemble": 0.8, "ncu": 3.5, "ncu_to_main": 1.0, "runner_setup": 0.0, "runner_run": 2.2,
         "ncu_after_exit": 0.3, "reference": 0.0, "map": 0.0}
    assert format_mapping_seconds(s, []) == ("build 0.2, disassemble 0.8, ncu 3.5 (ncu_to_main 1.0, runner_setup 0.0, "
                                             "runner_run 2.2, ncu_after_exit 0.3), reference 0.0, map 0.0")


def test_an_overlapped_run_names_its_overlap_and_the_runner_s_phases():
    s = {"build": 5.4, "disassemble": 0.4, "ncu": 9.6, "ncu_wait": 3.8, "ncu_to_main": 0.7, "runner_setup": 0.0,
         "runner_run": 8.0, "ncu_after_exit": 0.8, "runner_run.torch": 2.0, "runner_run.compile": 1.5,
         "runner_run.launch": 4.5, "map": 0.0}
    assert format_mapping_seconds(s, ["build", "disassemble"]) == (
        "build 5.4, disassemble 0.4, ncu 9.6 (ncu_to_main 0.7, runner_setup 0.0, runner_run 8.0 [torch 2.0, "
        "compile 1.5, launch 4.5], ncu_after_exit 0.8; alongside build, disassemble), ncu_wait 3.8, map 0.0")
