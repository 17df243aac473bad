"""Every marker path on the GPU (the kernels of benchmarks/marker_cost.py): output checked against the
float64 model, then each warp's decoded occurrences. The shared-cursor paths (shared, shared_helper, shared_divergent:
half-warps in different regions, paired per lane group; before issue 20's default change these were the opt-in
lean_* paths) run under globaltimer and clock64 stamps (shared_clock64: clock64 only); the register_* paths under
globaltimer (register_divergent's check expects the decoder to refuse its trace)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, TraceSession
from benchmarks.marker_cost import CLOCK, PATHS, build, check_output, check_trace

pytestmark = pytest.mark.gpu

OCC = 16


def _run(path, clock, tmp_path_factory):
    import torch

    os.environ.setdefault("ARGUS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    kernel, defines = PATHS[path]
    mod = build(2, OCC, defines)
    # the lanes build (register_lanes*) splits a ring into 32 per-lane sub-rings: 64 records each hold a writer's 32
    capacity = 32 * 64 if defines.get("ARGUS_REG_LANES") == "1" else 256
    sess = TraceSession(mod, TraceConfig(ctas=128, threads_per_cta=256, capacity=capacity, clock=clock))
    sess.arm()
    check_output(torch, mod, OCC, np.random.default_rng(7), kernel)
    check_trace(sess, path, OCC)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("clock", ["globaltimer", "clock64"])
def test_marker_path_records_every_occurrence(path, clock, tmp_path_factory):
    if path.startswith("register") and clock == "clock64":
        pytest.skip("the register cursor refuses clock64 (tests/test_trace_regcursor_gpu.py)")
    if CLOCK.get(path, clock) != clock:
        pytest.skip(f"{path} is armed with {CLOCK[path]} only (under {clock} it is another row's run)")
    _run(path, clock, tmp_path_factory)
