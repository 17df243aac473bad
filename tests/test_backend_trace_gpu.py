"""Region tracing adapter on the GPU: one checked launch of the traced ground-truth build gives one
occurrence per warp per region, properly nested."""
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.gpu
def test_traced_ground_truth_occurrences():
    from argus_rt.kinds.cuda import run as cuda_run
    from argus_rt.program import load_program

    program = load_program(ROOT / "examples" / "ground_truth")
    res = cuda_run.run_once(program, "traced", trace_config={"capacity": 64})
    assert res["max_rel_err"] is not None and res["max_rel_err"] < 1e-4  # reference check first
    launch = cuda_run.CudaLaunch.from_program(program)
    warps = launch.ctas * launch.threads_per_cta // 32
    rows = res["intervals"].rows
    assert not res["intervals"].incomplete
    for region in program.regions:
        sel = rows[rows["region_id"] == region.id]
        assert len(sel) == warps, f"{region.name}: {len(sel)} occurrences, expected {warps}"
        assert (sel["duration"] > 0).all()
    doc = cuda_run.intervals_document(res["intervals"], res["trace"])
    assert doc["format"] == "argus.region_intervals/1" and len(doc["columns"]["start"]) == 4 * warps
    inner = rows[rows["region_id"] == program.regions["ground_truth/stage_b/inner"].id]
    parents = rows[inner["parent"]]
    assert np.all(parents["region_id"] == program.regions["ground_truth/stage_b"].id)
