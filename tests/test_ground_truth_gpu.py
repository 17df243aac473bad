"""Ground truth on the GPU: a fresh build, fresh trip counts, Nsight Compute counts, the PC map.

Attributed executed instructions per region must be within 2% of construction, barrier counts
likewise, entropy > 0 exactly on the shared helper's PCs; the kernel's output is checked against
its plain PyTorch reference first.
"""
import dataclasses
import importlib.util
import json
import math
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GT = ROOT / "examples" / "ground_truth"


def _truth_module():
    spec = importlib.util.spec_from_file_location("gt_truth", GT / "truth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _program_with_trips(trips):
    from argus_rt.program import load_program

    program = load_program(GT)
    launch = program.launch
    for i, key in enumerate(("trips_a", "trips_b", "trips_inner", "trips_helper")):
        launch["args"][3 + i] = {"int32": trips[key]}
    # The id hashes the canonical JSON (sorted keys, no spaces): keep that form.
    return dataclasses.replace(program, launch_json=json.dumps(launch, sort_keys=True, separators=(",", ":")))


@pytest.mark.gpu
def test_ground_truth_attribution_on_gpu(tmp_path):
    from argus_rt import sass
    from argus_rt.backends import ncu, pcmap
    from argus_rt.kinds.cuda import run as cuda_run
    from argus_rt.regions import RegionTree

    rng = random.Random()
    trips = {"trips_a": rng.randrange(800, 3000), "trips_b": rng.randrange(400, 1500),
             "trips_inner": rng.randrange(400, 1500), "trips_helper": rng.randrange(200, 700)}
    program = _program_with_trips(trips)
    # Plain reference first: the kernel computes the documented fmaf chain on fresh random inputs.
    checked = cuda_run.run_once(program, "marker_only")
    assert checked["max_rel_err"] is not None and checked["max_rel_err"] < 1e-4

    doc, _profile = pcmap.mapping_run(program, tmp_path)
    pmap = pcmap.PcRegionMap.from_evidence(doc)
    cubin = cuda_run.build_variant(program, "marker_only")
    function = sass.select_function(sass.parse_sass(sass.disassemble(cubin)), "ground_truth_kernel")
    launch = cuda_run.CudaLaunch.from_program(program)
    shape = {"ctas": launch.ctas, "threads": launch.threads_per_cta}
    truth = _truth_module().expected_counts(function, **shape, **trips)
    tree = RegionTree.load(GT / "regions.json")
    counts = pmap.counts()
    for name, want in truth.items():
        got = counts[tree[name].id]
        assert abs(got - want) / want < 0.02, f"{name}: attributed {got:.0f} vs truth {want:.0f} ({trips})"

    profile = ncu.select_profile(ncu.parse_source_csv((tmp_path / "ncu_source_sass.csv").read_text()), "ground_truth_kernel")
    barriers = pmap.attribute(profile.metric("barrier_inst_executed"))
    want_bar = _truth_module().expected_barriers(**shape, **trips)
    for name, want in want_bar.items():
        got = barriers.get(tree[name].id).value if tree[name].id in barriers else 0.0
        assert got == pytest.approx(want, rel=0.02, abs=0.5), f"{name}: barriers {got} vs {want}"

    helper_pcs = {i.pc for b in function.reachable(function.subroutine_entries[0]) for i in function.blocks[b].instructions}
    ran = {pc for pc in helper_pcs if profile.metric("inst_executed")[pc] > 0}
    assert set(pmap.shared_pcs()) == ran
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert all(pmap.entropy(pc) == pytest.approx(h) for pc in ran)

    # Side by side: -lineinfo puts the whole helper in gt_helper.cuh; regions split it 3:1.
    helper_total = sum(profile.metric("inst_executed")[pc] for pc in helper_pcs)
    files = doc["source_file_attribution"]["inst_executed"]
    assert files["gt_helper.cuh"] == pytest.approx(helper_total, rel=0.01)
