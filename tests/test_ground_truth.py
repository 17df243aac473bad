"""Ground truth on a real H200 capture (CPU): attributed counts within 2% of construction, entropy
> 0 exactly on the shared helper's PCs, and the kernel's region header agrees with RegionTree."""
import importlib.util
import math
import re
import subprocess
from pathlib import Path

import pytest

from argus_rt import sass
from argus_rt.backends import ncu, pcmap
from argus_rt.regions import RegionTree
from toolchain import needs_nvcc

ROOT = Path(__file__).resolve().parent.parent
GT = ROOT / "examples" / "ground_truth"
FIX = Path(__file__).parent / "fixtures" / "device_capture"


def load_truth():
    spec = importlib.util.spec_from_file_location("gt_truth", GT / "truth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def captured_trips(log_text: str) -> dict[str, int]:
    m = re.search(r"ground_truth ctas=(\d+) threads=(\d+) trips_a=(\d+) trips_b=(\d+) trips_inner=(\d+) "
                  r"trips_helper=(\d+) check=ok", log_text)
    assert m, "the capture must include the kernel's self-check line"
    keys = ("ctas", "threads", "trips_a", "trips_b", "trips_inner", "trips_helper")
    return dict(zip(keys, map(int, m.groups())))


def check_against_truth(function, profile, trips, tolerance=0.02):
    tree = RegionTree.load(GT / "regions.json")
    truth = load_truth().expected_counts(function, **trips)
    m = pcmap.build_pc_region_map(function, profile.metric("inst_executed"))
    got = m.attribute(profile.metric("inst_executed"))
    for name, want in truth.items():
        value = got[tree[name].id].value
        assert abs(value - want) / want < tolerance, f"{name}: attributed {value:.0f}, truth {want:.0f}"
    helper_pcs = {i.pc for b in function.reachable(function.subroutine_entries[0])
                  for i in function.blocks[b].instructions}
    executed_helper = {pc for pc in helper_pcs if profile.metric("inst_executed")[pc] > 0}
    assert set(m.shared_pcs()) == executed_helper  # exactly the shared PCs, nothing else
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))  # the 3:1 split
    for pc in executed_helper:
        assert m.entropy(pc) == pytest.approx(h, rel=1e-9)
        assert m.pcs[pc].method == "call_site_split"
    return m, truth, got


def test_attribution_matches_construction_on_saved_h200_capture():
    trips = captured_trips((FIX / "ncu_gt_source_sass.csv").read_text())
    function = sass.select_function(sass.parse_sass((FIX / "gt_cuobjdump_sass.txt").read_text()), "ground_truth_kernel")
    profile = ncu.select_profile(ncu.parse_source_csv((FIX / "ncu_gt_source_sass.csv").read_text()), "ground_truth_kernel")
    check_against_truth(function, profile, trips)


def test_ncu_own_sass_gives_the_same_map_as_cuobjdump():
    profile = ncu.parse_source_csv((FIX / "ncu_gt_source_sass.csv").read_text())[0]
    from_cuobjdump = sass.select_function(sass.parse_sass((FIX / "gt_cuobjdump_sass.txt").read_text()), "ground_truth")
    a = pcmap.build_pc_region_map(from_cuobjdump, profile.metric("inst_executed")).counts()
    b = pcmap.build_pc_region_map(profile.function(), profile.metric("inst_executed")).counts()
    assert a == b


def test_truth_rejects_an_unrolled_build():
    function = sass.select_function(sass.parse_sass((FIX / "gt_cuobjdump_sass.txt").read_text()), "ground_truth")
    broken = sass.SassFunction(function.name, [i for i in function.instructions if not (0x170 <= i.pc < 0x1B0)])
    with pytest.raises(ValueError, match="not found in SASS: \\['stage_a'\\]"):
        load_truth().loop_body_lengths(broken)


def test_region_header_matches_region_tree():
    tree = RegionTree.load(GT / "regions.json")
    header = (GT / "regions.h").read_text()
    assert tree.cuda_defines() in header


@needs_nvcc
def test_fresh_build_has_the_markers_and_loops(tmp_path):
    cubin = tmp_path / "gt.cubin"
    subprocess.run(["nvcc", "-O3", "-lineinfo", "-DARGUS_MODE=1", "-gencode=arch=compute_90a,code=sm_90a",
                    "-cubin", "-o", str(cubin), str(GT / "ground_truth.cu")], check=True, capture_output=True)
    f = sass.select_function(sass.parse_sass(sass.disassemble(cubin)), "ground_truth_kernel")
    own = pcmap.static_ownership(f)
    tree = RegionTree.load(GT / "regions.json")
    assert sorted({rid for _, _, rid in own.markers}) == sorted(r.id for r in tree)
    assert set(load_truth().loop_body_lengths(f)) == {"stage_a", "stage_b", "inner", "helper"}
    # Source-file attribution needs nvdisasm's line table: the helper's code is in gt_helper.cuh.
    g = sass.select_function(sass.parse_sass(sass.disassemble(cubin, tool="nvdisasm", line_info=True)), "ground_truth")
    ones = {i.pc: 1.0 for i in g.instructions}
    files = pcmap.attribute_by_source_file(g, ones)
    assert files.get("gt_helper.cuh", 0) > 0 and files.get("ground_truth.cu", 0) > 0


def test_second_capture_with_barriers():
    """The current source (inner loop with __syncthreads) captured in the second device run."""
    trips = captured_trips((FIX / "ncu_gt2_source_sass.csv").read_text())
    function = sass.select_function(sass.parse_sass((FIX / "gt2_cuobjdump_sass.txt").read_text()), "ground_truth_kernel")
    profile = ncu.select_profile(ncu.parse_source_csv((FIX / "ncu_gt2_source_sass.csv").read_text()), "ground_truth_kernel")
    m, truth, got = check_against_truth(function, profile, trips)
    tree = RegionTree.load(GT / "regions.json")
    bars = m.attribute(profile.metric("barrier_inst_executed"))
    want = load_truth().expected_barriers(**trips)
    for name, n in want.items():
        value = bars[tree[name].id].value if tree[name].id in bars else 0.0
        assert value == pytest.approx(n, abs=0.5), name


def test_saved_capture_through_synthesis_matches_construction(tmp_path):
    """The second device run's ncu page and SASS through the real map and synthesis rules (what
    `argus query examples/ground_truth --signals instruction_mix,barrier_count` runs on them): FFMA
    and BAR per region equal construction exactly (one FFMA per construction-loop trip, one BAR per
    inner trip), and only the regions calling the shared helper carry ownership entropy."""
    from tests.test_source_file_view import _synthesize, capture

    function, lined, profile = capture()
    trips = captured_trips((FIX / "ncu_gt2_source_sass.csv").read_text())
    map_doc = (pcmap.map_document(function, lined, profile), profile)
    warps = trips["ctas"] * trips["threads"] // 32
    helper = trips["trips_helper"]
    want_ffma = {"ground_truth/stage_a": warps * (trips["trips_a"] + 3 * helper),
                 "ground_truth/stage_b": warps * (trips["trips_b"] + helper),
                 "ground_truth/stage_b/inner": warps * trips["trips_inner"]}
    (tmp_path / "ffma").mkdir(), (tmp_path / "bar").mkdir()
    ffma, facts = _synthesize(tmp_path / "ffma", map_doc, {"metric": "inst_executed", "opcodes": ["FFMA"]},
                              "instruction_mix")
    for region, n in want_ffma.items():
        assert ffma[(region, "FFMA")]["value"] == n, region
    assert ffma[("ground_truth/stage_a", "FFMA")]["ambiguity"]["entropy_nats"] > 0
    assert ffma[("ground_truth/stage_b/inner", "FFMA")]["ambiguity"]["entropy_nats"] == 0
    assert all(v["qualification"] == "attributed" for v in facts["values"])
    bars, _ = _synthesize(tmp_path / "bar", map_doc, {"metric": "inst_executed", "opcodes": ["BAR"]}, "barrier_count")
    for region, n in load_truth().expected_barriers(**trips).items():
        assert bars[(region, "BAR")]["value"] == n, region


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_plain_references_follow_the_kernels():
    """The PyTorch references the GPU runner checks against, on a few elements, against a scalar loop
    written from the CUDA sources."""
    import torch

    xs, ys = torch.tensor([0.3, -0.7]), torch.tensor([0.6, 0.95])
    got = _load(GT / "reference.py", "gt_ref").expected(xs, ys, None, 5, 4, 3, 2)[2]
    for i in range(2):
        x, y = float(xs[i]), float(ys[i])
        for c, n in ((0.5, 5), (0.25, 3 * 2), (0.75, 4), (0.125, 3), (0.25, 2)):
            for _ in range(n):
                x = x * y + c
        assert float(got[i]) == pytest.approx(x, rel=1e-6)
    inp = torch.tensor([0.2, -0.4])
    out = _load(ROOT / "examples" / "cuda" / "reference.py", "nr_ref").expected(None, inp, 2, 2, 3)[0]
    for i in range(2):
        x, acc = float(inp[i]), 0.0
        for _ in range(3):
            x = x * 0.5 + 0.25
        for _ in range(3):
            acc = acc * 0.75 + x
        for it in range(2):
            for _ in range(3):
                acc = acc * 0.75 + (x + it)
            for _ in range(3):
                acc = acc * 0.5 + 1.0
        assert float(out[i]) == pytest.approx(acc, rel=1e-6)
