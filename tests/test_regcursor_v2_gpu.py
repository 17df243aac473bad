"""The register cursor in helpers and under divergence on the GPU: the register_* paths of benchmarks/marker_cost.py
(__forceinline__ and __noinline__ helpers, by reference and by value), each checked as the benchmark checks it (output
against the float64 model, then every warp's decoded occurrences), armed and then disarmed; half-warps in different
regions (register_divergent), whose trace the decoder must refuse, naming the warp; and a block whose last warp has
16 lanes (its markers run on all of its launch lanes: recorded as a whole warp, not refused). The opt-in apart build
(-DARGUS_REG_APART=1: the register_apart* rows, and at the end a kernel whose lane groups nest, repeat a data-dependent
number of times and leave apart) records divergent markers per lane group: its traces must decode to what each lane
group did (`-k apart`)."""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, TraceSession, pair_intervals
from benchmarks.marker_cost import APART, PATHS, REFUSED, REG, REGION_OCCURRENCE, build, check_output, check_trace

pytestmark = pytest.mark.gpu

OCC = 16
# the lanes build's rows (register_lanes*: other ring capacity) are tests/test_regcursor_lanes_gpu.py's
REG_PATHS = [p for p in PATHS if p.startswith("register_") and not p.startswith("register_lanes")]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory):
    os.environ.setdefault("ARGUS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def check_path_armed_then_disarmed(path: str, capacity: int, seed: int) -> str | None:
    """marker_cost's row ``path`` as the benchmark checks it: armed, the output against the float64 model and every
    warp's decoded occurrences (the refusal, or None); then disarmed (markers write the scratch slots), the output
    unchanged."""
    import torch

    kernel, defines = PATHS[path]
    mod = build(2, OCC, defines)
    sess = TraceSession(mod, TraceConfig(ctas=128, threads_per_cta=256, capacity=capacity))
    gen = np.random.default_rng(seed)
    sess.arm()
    check_output(torch, mod, OCC, gen, kernel)
    refusal = check_trace(sess, path, OCC)
    sess.disarm()
    check_output(torch, mod, OCC, gen, kernel)
    return refusal


@pytest.mark.parametrize("path", REG_PATHS)
def test_register_path_records_every_occurrence_of_every_warp(path):
    assert PATHS[path][1] == (APART if path.startswith("register_apart") else REG)
    refusal = check_path_armed_then_disarmed(path, 256, 11)
    if path in REFUSED:  # one line naming SM, CTA and warp
        assert refusal and "SM " in refusal and "CTA " in refusal and "warp " in refusal, refusal


def assert_partial_last_warp_records_whole_warps(defines: dict, capacity: int, seed: int) -> None:
    """240 threads per CTA: warp 7 has 16 lanes, all of them at every marker: the output is the float64 model's and
    every warp, the partial one too, decodes to OCC whole-warp occurrences."""
    import torch

    from argus_rt.trace.decode import LANES_WHOLE_WARP
    from benchmarks.marker_cost import inner_for
    from benchmarks.trace_overhead import fma_chain_reference

    ctas, threads = 8, 240
    mod = build(2, OCC, defines)
    sess = TraceSession(mod, TraceConfig(ctas=ctas, threads_per_cta=threads, capacity=capacity))
    sess.arm()
    n = ctas * threads
    gen = np.random.default_rng(seed)
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


@pytest.mark.parametrize("defines", [REG, APART], ids=["default", "apart"])
def test_partial_last_warp_records_as_a_whole_warp(defines):
    """Not divergent: whole-warp occurrences, like the seven full warps (in the apart build too: its launch lanes are
    the 16)."""
    assert_partial_last_warp_records_whole_warps(defines, 256, 5)


APART_SOURCE = r"""
#include "argus/argus.cuh"
#define APART_OUTER 0x0A0A0001u
#define APART_LOW 0x0A0A0002u
#define APART_HIGH 0x0A0A0003u
#define APART_QUARTER 0x0A0A0004u
#define APART_TAIL 0x0A0A0005u
// Per occurrence i: the whole warp in OUTER; lanes 0-15 in LOW, of which lanes 0-7 also in QUARTER; lanes 16-31 run
// HIGH (i + warp + CTA) % 3 + 1 times (coordinates 0, 1, ...). After the loop lanes 24-31 leave and lanes 0-23 run TAIL.
extern "C" __global__ void apart_pattern(float* out, int n) {
  ARGUS_WARP_STATE();
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, t = blockIdx.x * blockDim.x + threadIdx.x;
  float a = out[t];
  for (int i = 0; i < n; ++i) {
    ARGUS_BEGIN_AT(APART_OUTER, i);
    if (lane < 16u) {
      ARGUS_BEGIN_AT(APART_LOW, i);
      a = fmaf(a, 1.0001f, 0.5f);
      if (lane < 8u) {
        ARGUS_BEGIN_AT(APART_QUARTER, i);
        a = fmaf(a, 0.999f, 0.25f);
        ARGUS_END_AT(APART_QUARTER, i);
      }
      ARGUS_END_AT(APART_LOW, i);
    } else {
      const int reps = (i + (int)warp + (int)blockIdx.x) % 3 + 1;
      for (int j = 0; j < reps; ++j) {
        ARGUS_BEGIN_AT(APART_HIGH, j);
        a = fmaf(a, 1.001f, 0.125f);
        ARGUS_END_AT(APART_HIGH, j);
      }
    }
    ARGUS_END_AT(APART_OUTER, i);
  }
  out[t] = a;
  if (lane >= 24u) return;
  ARGUS_BEGIN(APART_TAIL);
  out[t] = a + 1.0f;
  ARGUS_END(APART_TAIL);
}
"""
OUTER, LOW, HIGH, QUARTER, TAIL = 0x0A0A0001, 0x0A0A0002, 0x0A0A0003, 0x0A0A0004, 0x0A0A0005


def apart_reference(cta: int, warp: int, n: int) -> Counter:
    """(region, coordinate, lanes, depth, parent's (region, coordinate)) of every occurrence one warp of apart_pattern
    runs, from the kernel's control flow."""
    from argus_rt.trace import layout
    from argus_rt.trace.decode import LANES_WHOLE_WARP

    want = Counter()
    for i in range(n):
        want[(OUTER, i, LANES_WHOLE_WARP, 0, None)] += 1
        want[(LOW, i, 0x0000FFFF, 1, (OUTER, i))] += 1
        want[(QUARTER, i, 0x000000FF, 2, (LOW, i))] += 1
        for j in range((i + warp + cta) % 3 + 1):
            want[(HIGH, j, 0xFFFF0000, 1, (OUTER, i))] += 1
    want[(TAIL, layout.COORD_NONE, 0x00FFFFFF, 0, None)] += 1
    return want


def decode_apart_pattern(tmp_path, define: str, capacity: int, n: int = 12):
    """apart_pattern built with ``define`` = 1 (ARGUS_REG_APART or ARGUS_REG_LANES), launched on 4 CTAs of 128
    threads with ``n`` repeats, decoded complete with one ring per warp."""
    import torch

    from argus_rt.kinds.cuda.build import CudaBuildSpec
    from argus_rt.kinds.cuda.build import build as cuda_build
    from argus_rt.launch import CubinModule

    src = tmp_path / "apart_pattern.cu"
    src.write_text(APART_SOURCE)
    mod = CubinModule.load(cuda_build(CudaBuildSpec(f"apart_pattern.{define.lower()}", [src], argus_mode=2,
                                                    defines={define: "1"})).cubin)
    ctas, threads = 4, 128
    sess = TraceSession(mod, TraceConfig(ctas=ctas, threads_per_cta=threads, capacity=capacity))
    sess.arm()
    out = torch.zeros(ctas * threads, device="cuda")
    mod.launch("apart_pattern", grid=ctas, block=threads, args=[out, np.int32(n)])
    torch.cuda.synchronize()
    t = sess.decode(known_ids=[OUTER, LOW, HIGH, QUARTER, TAIL])
    assert not t.incomplete, t.problems[:3]
    assert len(t.rings) == ctas * threads // 32
    return t


def test_apart_lane_groups_decode_to_what_each_group_did(tmp_path):
    check_apart_trace(decode_apart_pattern(tmp_path, "ARGUS_REG_APART", 512), 12)


def apart_written(want: Counter, n: int) -> int:
    """The apart build's slots of one ring: one per whole-warp marker, two per lane-group marker."""
    groups = sum(c for k, c in want.items() if k[2] != 0xFFFFFFFF)
    return 2 * n + 4 * groups


def check_apart_trace(t, n: int, written=apart_written) -> None:
    """Every ring's intervals are apart_reference's (region, coordinate, lanes, depth, parent), each inside its parent
    in time, and the ring's written count is ``written(want, n)`` (by default the apart build's)."""
    iv = pair_intervals(t).rows
    for ring in t.rings:
        at = np.flatnonzero(iv["ring"] == ring["ring"])
        got = Counter()
        for k in at:
            p = int(iv[k]["parent"])
            parent = None if p < 0 else (int(iv[p]["region_id"]), int(iv[p]["coord"]))
            got[(int(iv[k]["region_id"]), int(iv[k]["coord"]), int(iv[k]["lanes"]), int(iv[k]["depth"]), parent)] += 1
            if p >= 0:  # inside its parent, in time
                assert iv[p]["start"] <= iv[k]["start"] <= iv[k]["end"] <= iv[p]["end"], iv[k]
        want = apart_reference(int(ring["cta"]), int(ring["warp"]), n)
        assert got == want, (int(ring["cta"]), int(ring["warp"]), sorted(set(want) - set(got))[:4],
                             sorted(set(got) - set(want))[:4])
        assert int(ring["written"]) == written(want, n), ring
