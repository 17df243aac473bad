"""Every marker path on the GPU (the kernels of benchmarks/marker_cost.py): output checked against the
float64 model, then each warp's decoded occurrences. Default paths (shared, shared_helper, register: the
GPU-verified markers of a58e52b) and, as a separate parametrisation, the opt-in lean markers
(-DARGUS_LEAN_MARKERS=1): lean_shared, lean_shared_helper and lean_shared_divergent (half-warps in different regions,
paired per lane group; the default markers do not support it). The register_* paths are default paths too:
register_divergent's check expects the decoder to refuse its trace."""
from __future__ import annotations

import os

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, TraceSession
from benchmarks.marker_cost import PATHS, build, check_output, check_trace

pytestmark = pytest.mark.gpu

OCC = 16
DEFAULT_PATHS = [p for p in PATHS if not p.startswith("lean_")]
LEAN_PATHS = [p for p in PATHS if p.startswith("lean_")]


def _run(path, clock, tmp_path_factory):
    import torch

    os.environ.setdefault("ARGUS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    kernel, defines = PATHS[path]
    mod = build(2, OCC, defines)
    sess = TraceSession(mod, TraceConfig(ctas=128, threads_per_cta=256, capacity=256, clock=clock))
    sess.arm()
    check_output(torch, mod, OCC, np.random.default_rng(7), kernel)
    check_trace(sess, path, OCC)


@pytest.mark.parametrize("path", DEFAULT_PATHS)
@pytest.mark.parametrize("clock", ["globaltimer", "clock64"])
def test_marker_path_records_every_occurrence(path, clock, tmp_path_factory):
    if path.startswith("register") and clock == "clock64":
        pytest.skip("the register cursor refuses clock64 (tests/test_trace_regcursor_gpu.py)")
    _run(path, clock, tmp_path_factory)


@pytest.mark.parametrize("path", LEAN_PATHS)
@pytest.mark.parametrize("clock", ["globaltimer", "clock64"])
def test_lean_marker_path_records_every_occurrence(path, clock, tmp_path_factory):
    _run(path, clock, tmp_path_factory)
