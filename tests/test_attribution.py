"""Count-weighted PC-to-region attribution (argus_rt.pc_regions.PcRegionMap): worked example and
hypothesis properties."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus_rt.pc_regions import NO_REGION, UNMAPPED, PcMapError, PcRegionMap
from argus_rt.sass import pc_key

GEMM, ATTN = 0x11, 0x22


def values(lifted: dict) -> dict:
    return {r: v.value for r, v in lifted.items()}


def test_worked_example_shared_helper_split_three_to_one():
    # a helper at PCs 0x40, 0x50 called 3x from gemm and 1x from attn; PC 0x10 only in gemm
    pmap = PcRegionMap.from_counts("k", [(0x10, GEMM, 8), (0x40, GEMM, 3), (0x40, ATTN, 1),
                                         (0x50, GEMM, 30), (0x50, ATTN, 10)])
    assert pmap.alpha(0x40) == {GEMM: 0.75, ATTN: 0.25}
    m = {0x10: 100.0, 0x40: 40.0, 0x50: 4.0, 0x99: 7.0}
    got = values(pmap.attribute(m))
    assert got[GEMM] == pytest.approx(100 + 30 + 3)
    assert got[ATTN] == pytest.approx(10 + 1)
    assert got[UNMAPPED] == 7.0  # never silently dropped
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert pmap.entropy(0x40) == pytest.approx(h) and pmap.entropy(0x10) == 0.0
    assert pmap.shared_pcs() == [0x40, 0x50]
    # region entropy: n-weighted mean of H(p); attn only runs shared PCs
    assert pmap.region_entropy()[ATTN] == pytest.approx(h)
    assert pmap.region_entropy()[GEMM] == pytest.approx((8 * 0 + 3 * h + 30 * h) / 41)


def test_an_unknown_pc_has_no_owner_and_its_values_go_to_unmapped():
    pmap = PcRegionMap.from_counts("k", [(0x10, GEMM, 2), (0x20, GEMM, 0)])
    for pc in (0x99, 0x20):  # not in the map / in the map but never ran: the same answer
        assert pmap.alpha(pc) == {} and pmap.entropy(pc) == 0.0
        assert values(pmap.attribute({pc: 5.0})) == {UNMAPPED: 5.0}


def test_ratio_metrics_lift_numerator_and_denominator_separately():
    r, s = 1, 2
    pmap = PcRegionMap.from_counts("k", [(0x1, r, 1), (0x2, r, 1), (0x2, s, 1)])
    num = {0x1: 10.0, 0x2: 0.0}  # e.g. predicated-off thread instructions
    den = {0x1: 20.0, 0x2: 80.0}  # thread instructions executed
    out = pmap.attribute_ratio(num, den)
    assert out[r] == (10.0, 60.0, pytest.approx(10 / 60))
    assert out[s] == (0.0, 40.0, 0.0)
    # averaging per-PC ratios would give a different (wrong) answer for r
    assert (10 / 20 + 0 / 80) / 2 != pytest.approx(10 / 60)


def test_bad_counts_and_documents_are_rejected():
    with pytest.raises(PcMapError, match="finite and >= 0"):
        PcRegionMap.from_counts("k", [(0x1, 1, -1)])
    with pytest.raises(PcMapError, match="finite and >= 0"):
        PcRegionMap.from_counts("k", [(0x1, 1, float("nan"))])
    with pytest.raises(PcMapError, match="pc_region_counts/1"):
        PcRegionMap.from_evidence({"format": "other"})
    doc = {"format": "argus.pc_region_counts/1", "method": "m", "entries": [["k@0x10", 1, -2.0]]}
    with pytest.raises(PcMapError, match="finite and >= 0"):
        PcRegionMap.from_evidence(doc)
    doc["entries"] = [["k@0x10", 1, 2.0], ["other@0x10", 1, 2.0]]
    with pytest.raises(PcMapError, match="one kernel"):  # offsets of two functions cannot share a map
        PcRegionMap.from_evidence(doc)
    doc["entries"] = [["k+0x10", 1, 2.0]]
    with pytest.raises(PcMapError, match="bad PC key"):
        PcRegionMap.from_evidence(doc)


def test_pc_keys_of_another_kernel_are_refused():
    pmap = PcRegionMap.from_counts("k", [(0x10, 1, 1)])
    assert pmap.pc_of(pc_key("k", 0x30)) == 0x30
    with pytest.raises(PcMapError, match="of kernel 'other'"):
        pmap.pc_of(pc_key("other", 0x10))


def test_leaf_entries_document_round_trip():
    pmap = PcRegionMap.from_counts("k", [(0xa, 1, 2), (0xa, 2, 2), (0xb, 1, 5), (0xc, NO_REGION, 3)], method="m")
    back = PcRegionMap.from_evidence(pmap.to_evidence())
    assert back.method == "m" and back.kernel == "k"
    assert {pc: back.alpha(pc) for pc in back.pcs} == {pc: pmap.alpha(pc) for pc in pmap.pcs}
    assert back.region_entropy() == pmap.region_entropy() and back.regions() == [1, 2]
    # an NVBit-style document: leaf entries only, no kernel field, keys name the kernel
    leaf = {"format": "argus.pc_region_counts/1", "method": "nvbit",
            "entries": [[pc_key("k", 0xa), 1, 2.0], [pc_key("k", 0xa), 2, 2.0]]}
    nv = PcRegionMap.from_evidence(leaf)
    assert nv.kernel == "k" and nv.alpha(0xa) == {1: 0.5, 2: 0.5}


entries = st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5), st.integers(0, 1000)), min_size=1, max_size=60)
metric = st.dictionaries(st.integers(0, 20), st.floats(0, 1e6, allow_nan=False), max_size=25)


@settings(max_examples=200, deadline=None)
@given(entries, metric)
def test_attributed_totals_equal_pc_totals(ents, m):
    pmap = PcRegionMap.from_counts("k", ents)
    out = values(pmap.attribute(m))
    assert sum(out.values()) == pytest.approx(sum(m.values()), rel=1e-9, abs=1e-6)
    assert all(v >= 0 for v in out.values())


@settings(max_examples=200, deadline=None)
@given(entries)
def test_entropy_is_zero_exactly_when_each_pc_has_one_owner(ents):
    pmap = PcRegionMap.from_counts("k", ents)
    ran = [pc for pc in pmap.pcs if pmap.alpha(pc)]
    for pc in ran:
        owners = pmap.alpha(pc)
        h = pmap.entropy(pc)
        if len(owners) == 1:
            assert h == 0.0
        else:
            assert h > 0.0 and h <= math.log(len(owners)) + 1e-12
        assert sum(owners.values()) == pytest.approx(1.0)
    single = all(len(pmap.alpha(pc)) == 1 for pc in ran)
    assert single == all(v == 0.0 for v in pmap.region_entropy().values())
