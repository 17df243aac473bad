"""Count-weighted PC-to-region attribution: worked example and hypothesis properties."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus_rt.attribution import UNMAPPED, AttributionError, PcRegionMap


def test_worked_example_shared_helper_split_three_to_one():
    # a helper at PCs 0x40, 0x50 called 3x from gemm and 1x from attn; PC 0x10 only in gemm
    pmap = PcRegionMap([("0x10", "gemm", 8), ("0x40", "gemm", 3), ("0x40", "attn", 1),
                        ("0x50", "gemm", 30), ("0x50", "attn", 10)])
    assert pmap.alpha("0x40") == {"gemm": 0.75, "attn": 0.25}
    m = {"0x10": 100.0, "0x40": 40.0, "0x50": 4.0, "0x99": 7.0}
    got = pmap.attribute(m)
    assert got["gemm"] == pytest.approx(100 + 30 + 3)
    assert got["attn"] == pytest.approx(10 + 1)
    assert got[UNMAPPED] == 7.0  # never silently dropped
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert pmap.entropy("0x40") == pytest.approx(h) and pmap.entropy("0x10") == 0.0
    assert sorted(pmap.shared_pcs()) == ["0x40", "0x50"]
    # region entropy: n-weighted mean of H(p); attn only runs shared PCs
    assert pmap.region_entropy()["attn"] == pytest.approx(h)
    assert pmap.region_entropy()["gemm"] == pytest.approx((8 * 0 + 3 * h + 30 * h) / 41)


def test_ratio_metrics_lift_numerator_and_denominator_separately():
    pmap = PcRegionMap([("p1", "r", 1), ("p2", "r", 1), ("p2", "s", 1)])
    num = {"p1": 10.0, "p2": 0.0}  # e.g. predicated-off thread instructions
    den = {"p1": 20.0, "p2": 80.0}  # thread instructions executed
    out = pmap.attribute_ratio(num, den)
    assert out["r"] == (10.0, 60.0, pytest.approx(10 / 60))
    assert out["s"] == (0.0, 40.0, 0.0)
    # averaging per-PC ratios would give a different (wrong) answer for r
    assert (10 / 20 + 0 / 80) / 2 != pytest.approx(10 / 60)


def test_bad_counts_are_rejected():
    with pytest.raises(AttributionError, match="finite and >= 0"):
        PcRegionMap([("p", "r", -1)])
    with pytest.raises(AttributionError, match="finite and >= 0"):
        PcRegionMap([("p", "r", float("nan"))])
    with pytest.raises(AttributionError, match="pc_region_counts/1"):
        PcRegionMap.from_doc({"format": "other"})


def test_doc_round_trip():
    pmap = PcRegionMap([("a", 1, 2), ("a", 2, 2), ("b", 1, 5)], method="sass_cfg+ncu")
    back = PcRegionMap.from_doc(pmap.to_doc())
    assert back.method == "sass_cfg+ncu"
    assert {pc: back.alpha(pc) for pc in back.pcs} == {pc: pmap.alpha(pc) for pc in pmap.pcs}


entries = st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5), st.integers(0, 1000)), min_size=1, max_size=60)
metric = st.dictionaries(st.integers(0, 20), st.floats(0, 1e6, allow_nan=False), max_size=25)


@settings(max_examples=200, deadline=None)
@given(entries, metric)
def test_attributed_totals_equal_pc_totals(ents, m):
    pmap = PcRegionMap(ents)
    out = pmap.attribute(m)
    assert sum(out.values()) == pytest.approx(sum(m.values()), rel=1e-9, abs=1e-6)
    assert all(v >= 0 for v in out.values())


@settings(max_examples=200, deadline=None)
@given(entries)
def test_entropy_is_zero_exactly_when_each_pc_has_one_owner(ents):
    pmap = PcRegionMap(ents)
    for pc in pmap.pcs:
        owners = pmap.owners(pc)
        h = pmap.entropy(pc)
        if len(owners) == 1:
            assert h == 0.0
        else:
            assert h > 0.0 and h <= math.log(len(owners)) + 1e-12
        assert sum(pmap.alpha(pc).values()) == pytest.approx(1.0)
    single = all(len(pmap.owners(pc)) == 1 for pc in pmap.pcs)
    assert single == all(v == 0.0 for v in pmap.region_entropy().values())
