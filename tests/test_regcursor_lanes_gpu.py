"""The register cursor's opt-in lanes build (-DARGUS_REG_LANES=1) on the GPU: benchmarks/marker_cost.py's
register_lanes* paths (the kernel body, the __noinline__ by-value helper, half-warps in different regions), each checked
as the benchmark checks it (output against the float64 model, then every warp's decoded occurrences, per lane group
for the divergent kernel), armed and then disarmed; tests/test_regcursor_v2_gpu.py's apart_pattern kernel (lane groups
nested, repeated a data-dependent number of times, lanes 24-31 leaving first), decoded against what each lane group
did; a block whose last warp has 16 lanes; and the decoded times' high word, which the lanes build's records do not
carry (it comes from each lane's end record), against the default register cursor's full stamps of the next launch.
CPU side: tests/test_regcursor_lanes.py."""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, TraceSession, pair_intervals
from benchmarks.marker_cost import LANES, PATHS, REG, REGION_OCCURRENCE, build, check_output, check_trace

pytestmark = pytest.mark.gpu

OCC = 16
LANES_PATHS = [p for p in PATHS if p.startswith("register_lanes")]
CAPACITY = 32 * 64  # sub-rings of 64: 32 markers per writer lane at OCC=16 and the end record


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory):
    os.environ.setdefault("ARGUS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def test_the_lanes_rows_are_the_three_kernels():
    assert LANES_PATHS == ["register_lanes", "register_lanes_helper_value", "register_lanes_divergent"]


@pytest.mark.parametrize("path", LANES_PATHS)
def test_lanes_path_records_every_occurrence_of_every_warp(path):
    import torch

    kernel, defines = PATHS[path]
    assert defines == LANES
    mod = build(2, OCC, defines)
    sess = TraceSession(mod, TraceConfig(ctas=128, threads_per_cta=256, capacity=CAPACITY))
    gen = np.random.default_rng(13)
    sess.arm()
    check_output(torch, mod, OCC, gen, kernel)
    assert check_trace(sess, path, OCC) is None  # decoded, not refused
    sess.disarm()  # markers run, nothing recorded: they write the scratch slots; outputs unchanged
    check_output(torch, mod, OCC, gen, kernel)


def test_lanes_partial_last_warp_records_as_a_whole_warp():
    """240 threads per CTA: warp 7's 16 lanes are its launch lanes, so its markers decode as whole-warp ones."""
    import torch

    from argus_rt.trace.decode import LANES_WHOLE_WARP
    from benchmarks.marker_cost import inner_for
    from benchmarks.trace_overhead import fma_chain_reference

    ctas, threads = 8, 240
    mod = build(2, OCC, LANES)
    sess = TraceSession(mod, TraceConfig(ctas=ctas, threads_per_cta=threads, capacity=CAPACITY))
    sess.arm()
    n = ctas * threads
    gen = np.random.default_rng(6)
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


def test_lanes_lane_groups_decode_to_what_each_group_did(tmp_path):
    import torch

    from argus_rt.kinds.cuda.build import CudaBuildSpec
    from argus_rt.kinds.cuda.build import build as cuda_build
    from argus_rt.launch import CubinModule
    from test_regcursor_v2_gpu import APART_SOURCE, HIGH, LOW, OUTER, QUARTER, TAIL, apart_reference

    src = tmp_path / "lanes_pattern.cu"
    src.write_text(APART_SOURCE)
    mod = CubinModule.load(cuda_build(CudaBuildSpec("lanes_pattern", [src], argus_mode=2,
                                                    defines={"ARGUS_REG_LANES": "1"})).cubin)
    ctas, threads, n = 4, 128, 12
    sess = TraceSession(mod, TraceConfig(ctas=ctas, threads_per_cta=threads, capacity=32 * 128))
    sess.arm()
    out = torch.zeros(ctas * threads, device="cuda")
    mod.launch("apart_pattern", grid=ctas, block=threads, args=[out, np.int32(n)])
    torch.cuda.synchronize()
    t = sess.decode(known_ids=[OUTER, LOW, HIGH, QUARTER, TAIL])
    assert not t.incomplete, t.problems[:3]
    assert len(t.rings) == ctas * threads // 32
    iv = pair_intervals(t).rows
    for ring in t.rings:
        at = np.flatnonzero(iv["ring"] == ring["ring"])
        got = Counter()
        for k in at:
            p = int(iv[k]["parent"])
            parent = None if p < 0 else (int(iv[p]["region_id"]), int(iv[p]["coord"]))
            got[(int(iv[k]["region_id"]), int(iv[k]["coord"]), int(iv[k]["lanes"]), int(iv[k]["depth"]), parent)] += 1
            if p >= 0:
                assert iv[p]["start"] <= iv[k]["start"] <= iv[k]["end"] <= iv[p]["end"], iv[k]
        want = apart_reference(int(ring["cta"]), int(ring["warp"]), n)
        assert got == want, (int(ring["cta"]), int(ring["warp"]), sorted(set(want) - set(got))[:4],
                             sorted(set(got) - set(want))[:4])
        assert int(ring["written"]) == 2 * sum(want.values()), ring  # one slot per marker, no lane-group records


def test_lanes_times_carry_the_right_high_word():
    """The lanes build stores only the low 32 bits of each stamp; the decoder takes the high bits from the lane's end
    record. A lanes launch and then a default register-cursor launch of the same kernel: the lanes trace ends before the
    default one begins, less than 4 s apart (a wrong high word is 4.29 s off), and every lanes occurrence lasts less
    than 1 ms."""
    import torch

    kernel = "refexec_compute"
    gen = np.random.default_rng(17)
    sessions = []
    for defines, cap in ((LANES, CAPACITY), (REG, 256)):  # both built and armed first: the launches back to back
        mod = build(2, OCC, defines)
        sessions.append((mod, TraceSession(mod, TraceConfig(ctas=128, threads_per_cta=256, capacity=cap))))
    for mod, sess in sessions:
        sess.arm()
    for mod, _ in sessions:
        check_output(torch, mod, OCC, gen, kernel)
    spans = []
    for _, sess in sessions:
        iv = pair_intervals(sess.decode()).rows
        assert len(iv) == 128 * 8 * OCC
        assert int(iv["duration"].max()) < 1_000_000, int(iv["duration"].max())
        spans.append((int(iv["start"].min()), int(iv["end"].max())))
    (lanes_start, lanes_end), (reg_start, _) = spans
    assert lanes_start <= lanes_end < reg_start < lanes_end + 4_000_000_000, spans  # a wrong high word: >= 4.29 s off
