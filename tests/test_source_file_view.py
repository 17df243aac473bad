"""-lineinfo source-file view next to region attribution, on the real H200 capture (CPU).

The ncu page and cuobjdump listing are the second device run's (tests/fixtures/device_capture);
the nvdisasm -g listing is of a build checked PC for PC against that listing (see the README there).
"""
from pathlib import Path

import pytest

from argus_rt import sass
from argus_rt.backends import ncu, pcmap
from argus_rt.evidence import EvidenceError
from argus_rt.program import load_program
from argus_rt.tasks import Task
from tests.test_ground_truth import captured_trips, load_truth
from tests.test_synthesis import run_rule

ROOT = Path(__file__).resolve().parent.parent
GT = ROOT / "examples" / "ground_truth"
FIX = Path(__file__).parent / "fixtures" / "device_capture"
TRIPS = dict(ctas=128, threads=256)


def capture():
    function = sass.select_function(sass.parse_sass((FIX / "gt2_cuobjdump_sass.txt").read_text()), "ground_truth_kernel")
    lined = sass.select_function(sass.parse_sass((FIX / "gt2_nvdisasm_lineinfo.txt").read_text()), "ground_truth_kernel")
    profile = ncu.select_profile(ncu.parse_source_csv((FIX / "ncu_gt2_source_sass.csv").read_text()), "ground_truth_kernel")
    return function, lined, profile


def inner_barriers() -> float:
    """BARs executed in stage_b/inner by construction (one per inner trip per warp), at the capture's
    launch arguments (its self-check line); every BAR of the kernel is there, in ground_truth.cu."""
    trips = captured_trips((FIX / "ncu_gt2_source_sass.csv").read_text())
    return load_truth().expected_barriers(**trips)["ground_truth/stage_b/inner"]


def run(tmp_path, task, deps, program):
    return run_rule(tmp_path, task.op, task, deps, pv=program)


@pytest.fixture(scope="module")
def map_doc():
    function, lined, profile = capture()
    return pcmap.map_document(function, lined, profile), profile


def test_lineinfo_listing_is_the_captured_binary():
    function, lined, profile = capture()
    pcmap.check_same_binary(function, lined)
    pcmap.check_same_binary(lined, profile.function())
    assert {Path(i.source[0]).name for i in lined.instructions if i.source} == {"ground_truth.cu", "gt_helper.cuh"}


def test_map_document_file_view_adds_up(map_doc):
    doc, profile = map_doc
    view = doc["source_file_attribution"]
    assert set(view) == {"inst_executed", "barrier_inst_executed", "branch_inst_executed"}
    for metric, files in view.items():
        assert sum(files.values()) == pytest.approx(sum(profile.metrics[metric]))
    # the whole helper (called 3:1 from stage_a and stage_b) lands in its header, every barrier in the .cu
    helper_pcs = {i.pc for i in capture()[1].instructions if i.source and i.source[0].endswith("gt_helper.cuh")}
    counts = profile.metric("inst_executed")
    assert view["inst_executed"]["gt_helper.cuh"] == pytest.approx(sum(counts[pc] for pc in helper_pcs))
    assert view["barrier_inst_executed"] == {"ground_truth.cu": inner_barriers(), "gt_helper.cuh": 0}


def _synthesize(tmp_path, map_doc, config, signal):
    doc, profile = map_doc
    program = load_program(GT)
    marker = program.variant_of("marker_only")
    mapc = Task(kind="collect", op="pcmap", program=marker.id, device="gpu")
    mapsyn = Task(kind="synthesize", op="pc_region_map", program=program.id, deps=(mapc.id,))
    map_facts = run(tmp_path, mapsyn, {mapc: {"pc_region_counts": doc}}, program)
    assert map_facts["extra"]["source_file_attribution"] == doc.get("source_file_attribution", {})
    ncu_task = Task(kind="collect", op="ncu", program=marker.id, device="gpu")
    task = Task(kind="synthesize", op="attributed_metric", program=program.id, region="ground_truth",
                deps=(ncu_task.id, mapsyn.id),
                config=dict(config, signal=signal, qualification="attributed", unit="instructions"))
    facts = run(tmp_path, task, {ncu_task: {"pc_counters": profile.to_evidence()}, mapsyn: {"facts": map_facts}},
                program)
    return {(v["region"], v["metric"]): v for v in facts["values"]}, facts


def test_barrier_count_shows_regions_and_files_side_by_side(tmp_path, map_doc):
    values, facts = _synthesize(tmp_path, map_doc, {"metric": "inst_executed", "opcodes": ["BAR"]}, "barrier_count")
    assert values[("ground_truth/stage_b/inner", "BAR")]["value"] == inner_barriers()
    assert values[("ground_truth/stage_a", "BAR")]["value"] == 0
    f = values[(None, "BAR [file ground_truth.cu]")]
    assert f["value"] == inner_barriers() and f["provenance"]["method"] == "source file (-lineinfo)"
    assert f["join"] == {"source_file": "ground_truth.cu", "source_metric": "barrier_inst_executed"}
    assert values[(None, "BAR [file gt_helper.cuh]")]["value"] == 0
    assert facts["extra"]["source_file_view"]["metric"] == "barrier_inst_executed"


def test_instruction_mix_file_view_hides_the_split_that_regions_show(tmp_path, map_doc):
    doc, profile = map_doc
    values, facts = _synthesize(tmp_path, map_doc, {"metric": "inst_executed", "group_by": "opcode"}, "instruction_mix")
    files = {k[1]: v["value"] for k, v in values.items() if k[0] is None}
    assert set(files) == {"all instructions [file ground_truth.cu]", "all instructions [file gt_helper.cuh]"}
    total = sum(profile.metrics["inst_executed"])
    assert sum(files.values()) == pytest.approx(total)
    regions = sum(v["value"] for (r, m), v in values.items() if r is not None and not m.endswith("(inclusive)"))
    # every count is in the region view too: regions, <unmapped>, or code outside the root region
    assert regions + sum(facts["extra"]["outside_subtree"].values()) == pytest.approx(total)
    # the helper file holds the helper's whole count; the region view splits exactly those PCs 3:1
    lined = capture()[1]
    helper_pcs = {i.pc for i in lined.instructions if i.source and i.source[0].endswith("gt_helper.cuh")}
    counts = profile.metric("inst_executed")
    helper = files["all instructions [file gt_helper.cuh]"]
    assert helper == pytest.approx(sum(counts[pc] for pc in helper_pcs)) and helper > 0
    program = load_program(GT)
    split = pcmap.PcRegionMap.from_evidence(doc).attribute({pc: counts[pc] for pc in helper_pcs})
    a = split[program.regions["ground_truth/stage_a"].id].value
    b = split[program.regions["ground_truth/stage_b"].id].value
    assert a + b == pytest.approx(helper, rel=1e-6) and a / helper == pytest.approx(0.75, abs=0.01)
    assert values[("ground_truth/stage_a", "FFMA")]["ambiguity"]["entropy_nats"] > 0
    assert values[("ground_truth/stage_a", "FFMA")]["value"] == 1024 * (2000 + 3 * 500)


def test_no_file_view_is_said_not_invented(tmp_path, map_doc):
    doc, profile = map_doc
    bare = {k: v for k, v in doc.items() if k != "source_file_attribution"}
    bare["notes"] = ["the cubin has no line info: no -lineinfo source-file view"]
    values, facts = _synthesize(tmp_path, (bare, profile), {"metric": "inst_executed", "opcodes": ["BAR"]},
                                "barrier_count")
    assert not any(r is None for r, _ in values)
    assert facts["extra"]["source_file_view"]["missing"] == "the cubin has no line info: no -lineinfo source-file view"


def test_report_markdown_has_the_side_by_side_table(tmp_path, map_doc):
    from argus_rt.report import Report

    values, _ = _synthesize(tmp_path, map_doc, {"metric": "inst_executed", "opcodes": ["BAR"]}, "barrier_count")
    report = Report(query={"program": "p", "region": "ground_truth", "signals": ["barrier_count"], "scope": {}},
                    values=list(values.values()))
    regions, files = report.side_by_side()["barrier_count"]
    bars = inner_barriers()
    assert files == {"ground_truth.cu": bars, "gt_helper.cuh": 0.0}
    assert regions["ground_truth/stage_b/inner"] == bars and regions["ground_truth/stage_a"] == 0.0
    md = report.to_markdown()
    table = md.split("vs plain source files (-lineinfo)**", 1)[1]
    assert f"| ground_truth | 0 | ground_truth.cu | {bars:.0f} |" in table
    assert f"| ground_truth/stage_b/inner | {bars:.0f} |  |  |" in table


def test_terminal_view_prints_the_side_by_side_table(tmp_path, map_doc):
    from rich.console import Console

    from argus_rt.report import Report

    values, _ = _synthesize(tmp_path, map_doc, {"metric": "inst_executed", "opcodes": ["BAR"]}, "barrier_count")
    report = Report(query={"program": "p", "region": "ground_truth", "signals": ["barrier_count"], "scope": {}},
                    values=list(values.values()))
    console = Console(record=True, width=160)
    report.print(console)
    text = console.export_text()
    assert "barrier_count: regions (n(r,p)) vs plain source files (-lineinfo)" in text
    assert "gt_helper.cuh" in text and f"{inner_barriers():.0f}" in text


def test_branch_profile_lifts_each_named_counter_and_loses_none(tmp_path, map_doc):
    """branch_profile: branch and divergent-branch counts (warp level), thread instructions executed and
    predicated off, each lifted to the regions; per metric, regions + code outside the root region add up
    to the capture's whole-kernel count, and no region has more predicated-off than executed thread
    instructions. No per-file view (the mapping run has none of these counters)."""
    doc, profile = map_doc
    names = ["branch_inst_executed", "divergent_branches", "thread_inst_executed", "predicated_off"]
    values, facts = _synthesize(tmp_path, map_doc, {"metrics": names}, "branch_profile")
    assert not [k for k in values if k[0] is None] and "source_file_view" not in facts["extra"]
    for name in names:
        total = sum(profile.metrics[name])
        regions = sum(v["value"] for (r, m), v in values.items() if r is not None and m == name)
        assert regions + facts["extra"]["outside_subtree"][name] == pytest.approx(total), name
    assert sum(profile.metrics["branch_inst_executed"]) > 0
    for (region, metric), v in values.items():
        if metric == "predicated_off":
            assert v["value"] <= values[(region, "thread_inst_executed")]["value"] + 1e-9, region
    (tmp_path / "bad").mkdir()
    with pytest.raises(EvidenceError, match=r"lack metric\(s\) \['no_such_counter'\]"):
        _synthesize(tmp_path / "bad", map_doc, {"metrics": ["no_such_counter"]}, "branch_profile")
