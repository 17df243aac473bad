"""Every marker path on the GPU (the kernels of benchmarks/marker_cost.py): output checked against the
float64 model, then each warp's decoded occurrences, per lane group for the divergent kernel."""
from __future__ import annotations

import os

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, TraceSession
from benchmarks.marker_cost import PATHS, build, check_output, check_trace

pytestmark = pytest.mark.gpu

OCC = 16


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("clock", ["globaltimer", "clock64"])
def test_marker_path_records_every_occurrence(path, clock, tmp_path_factory):
    import torch

    if path == "register" and clock == "clock64":
        pytest.skip("the register cursor refuses clock64 (tests/test_trace_regcursor_gpu.py)")
    os.environ.setdefault("ARGUS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    kernel, defines = PATHS[path]
    mod = build(2, OCC, defines)
    sess = TraceSession(mod, TraceConfig(ctas=128, threads_per_cta=256, capacity=256, clock=clock))
    sess.arm()
    check_output(torch, mod, OCC, np.random.default_rng(7), kernel)
    check_trace(sess, path, OCC)
