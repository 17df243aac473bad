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

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, TraceSession, pair_intervals
from benchmarks.marker_cost import LANES, PATHS, REG, build, check_output
from test_regcursor_v2_gpu import (
    assert_partial_last_warp_records_whole_warps,
    check_apart_trace,
    check_path_armed_then_disarmed,
    decode_apart_pattern,
)

pytestmark = pytest.mark.gpu

OCC = 16
LANES_PATHS = [p for p in PATHS if p.startswith("register_lanes")]
CAPACITY = 32 * 64  # sub-rings of 64: 32 markers per writer lane at OCC=16 and the end record


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory):
    os.environ.setdefault("ARGUS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def test_the_lanes_rows_are_the_four_kernels():
    assert LANES_PATHS == ["register_lanes", "register_lanes_helper_value", "register_lanes_helper_inline",
                           "register_lanes_divergent"]


@pytest.mark.parametrize("path", LANES_PATHS)
def test_lanes_path_records_every_occurrence_of_every_warp(path):
    assert PATHS[path][1] == LANES
    assert check_path_armed_then_disarmed(path, CAPACITY, 13) is None  # decoded, not refused


def test_lanes_partial_last_warp_records_as_a_whole_warp():
    """240 threads per CTA: warp 7's 16 lanes are its launch lanes, so its markers decode as whole-warp ones."""
    assert_partial_last_warp_records_whole_warps(LANES, CAPACITY, 6)


def test_lanes_lane_groups_decode_to_what_each_group_did(tmp_path):
    # one slot per marker of each lane group's writer, no lane-group records
    check_apart_trace(decode_apart_pattern(tmp_path, "ARGUS_REG_LANES", 32 * 128), 12,
                      written=lambda want, n: 2 * sum(want.values()))


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
