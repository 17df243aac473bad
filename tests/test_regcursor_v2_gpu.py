"""The register cursor in helpers and under divergence on the GPU: the register_* paths of benchmarks/marker_cost.py
(__forceinline__ and __noinline__ helpers, by reference and by value), each checked as the benchmark checks it (output
against the float64 model, then every warp's decoded occurrences), armed and then disarmed; half-warps in different
regions (register_divergent), whose trace the decoder must refuse, naming the warp; and a block whose last warp has
16 lanes (its markers run on all of its launch lanes: recorded as a whole warp, not refused)."""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, TraceSession, pair_intervals
from benchmarks.marker_cost import PATHS, REFUSED, REG, REGION_OCCURRENCE, build, check_output, check_trace

pytestmark = pytest.mark.gpu

OCC = 16
REG_PATHS = [p for p in PATHS if p.startswith("register_")]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory):
    os.environ.setdefault("ARGUS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.mark.parametrize("path", REG_PATHS)
def test_register_path_records_every_occurrence_of_every_warp(path):
    import torch

    kernel, defines = PATHS[path]
    assert defines == REG
    mod = build(2, OCC, defines)
    sess = TraceSession(mod, TraceConfig(ctas=128, threads_per_cta=256, capacity=256))
    gen = np.random.default_rng(11)
    sess.arm()
    check_output(torch, mod, OCC, gen, kernel)
    refusal = check_trace(sess, path, OCC)
    if path in REFUSED:  # one line naming SM, CTA and warp
        assert refusal and "SM " in refusal and "CTA " in refusal and "warp " in refusal, refusal
    sess.disarm()  # markers run, nothing recorded: they write the scratch slots; outputs unchanged
    check_output(torch, mod, OCC, gen, kernel)


def test_partial_last_warp_records_as_a_whole_warp():
    """240 threads per CTA: warp 7 has 16 lanes, all of them at every marker, so it is not divergent: it records
    whole-warp occurrences, like the seven full warps."""
    import torch

    from argus_rt.trace.decode import LANES_WHOLE_WARP
    from benchmarks.marker_cost import inner_for
    from benchmarks.trace_overhead import fma_chain_reference

    ctas, threads = 8, 240
    mod = build(2, OCC, REG)
    sess = TraceSession(mod, TraceConfig(ctas=ctas, threads_per_cta=threads, capacity=256))
    sess.arm()
    n = ctas * threads
    gen = np.random.default_rng(5)
    a0, b, c = (gen.uniform(lo, hi, n) for lo, hi in ((0.1, 1.0), (0.9, 0.99), (0.01, 0.1)))
    dev = [torch.from_numpy(x.astype(np.float32)).cuda() for x in (a0, b, c)]
    out = torch.full((n,), float("nan"), device="cuda")
    mod.launch("refexec_compute", grid=ctas, block=threads, args=[out, *dev, np.int32(inner_for(OCC))])
    torch.cuda.synchronize()
    ref = fma_chain_reference(*(x.cpu().double().numpy() for x in dev), 4096)
    assert np.abs(out.cpu().numpy() - ref).max() / np.abs(ref).max() < 1e-4
    t = sess.decode()
    assert not t.incomplete, t.problems[:3]
    assert len(t.rings) == ctas * 8
    iv = pair_intervals(t).rows
    want = Counter({(REGION_OCCURRENCE, occ, LANES_WHOLE_WARP): 1 for occ in range(OCC)})
    for ring in np.unique(t.rings["ring"]):
        rows = iv[iv["ring"] == ring]
        assert Counter(zip(rows["region_id"].tolist(), rows["coord"].tolist(), rows["lanes"].tolist())) == want, ring
