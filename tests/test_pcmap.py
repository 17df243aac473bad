"""PC-to-region map on hand-written SASS: ownership by CFG, call-site splitting, errors (CPU)."""
import json
import math

import pytest

from argus_rt import sass
from argus_rt.backends import pcmap
from argus_rt.evidence import PcRegionCounts
from argus_rt.markers import marker_immediates
from argus_rt.pc_regions import UNMAPPED

A, B = 0x00A1B2C3, 0x00D4E5F6


def _marker(pc, kind, rid):
    return [f"/*{pc + 16 * k:04x}*/ PMTRIG 0x{w:04x} ;" for k, w in enumerate(marker_immediates(kind, rid))]


def _fn(lines):
    return sass.parse_sass("Function : _Z1kPf\n" + "\n".join(lines) + "\n")["_Z1kPf"]


def shared_helper_kernel():
    """begin A; call h; end A; begin B; loop { call h } ; end B; exit; h: FFMA; RET."""
    lines = _marker(0x00, "begin", A) + [
        "/*0030*/ CALL.REL.NOINC 0x120 ;",
    ] + _marker(0x40, "end", A) + _marker(0x70, "begin", B) + [
        "/*00a0*/ CALL.REL.NOINC 0x120 ;",
        "/*00b0*/ @P0 BRA 0xa0 ;",
    ] + _marker(0xC0, "end", B) + [
        "/*00f0*/ EXIT ;",
        "/*0100*/ BRA 0x100 ;",
        "/*0110*/ NOP ;",
        "/*0120*/ FFMA R0, R1, R0, 0.5 ;",
        "/*0130*/ RET.REL.NODEC R2 0x0 ;",
    ]
    return _fn(lines)


def counts_for(f, calls_a=10, calls_b=30):
    c = {i.pc: 0.0 for i in f.instructions}
    for pc in range(0x00, 0x40, 16):
        c[pc] = 10
    for pc in range(0x40, 0xA0, 16):
        c[pc] = 10
    c[0xA0] = c[0xB0] = calls_b
    for pc in range(0xC0, 0x100, 16):
        c[pc] = 10
    c[0x120] = c[0x130] = calls_a + calls_b
    c[0x30] = calls_a
    return c


def test_static_ownership_follows_markers_and_cfg():
    f = shared_helper_kernel()
    own = pcmap.static_ownership(f)
    assert own.local_stack[0x30] == (A,) and own.local_stack[0xA0] == (B,)
    assert own.local_stack[0x00] == (A,) and own.local_stack[0x60] == (A,)  # marker words are the region's
    assert own.local_stack[0xF0] == () and own.entry_of[0x120] == 0x120 and own.local_stack[0x120] == ()
    assert set(own.unreachable) == {0x100, 0x110}
    assert [(k, r) for _, k, r in own.markers] == [("begin", A), ("end", A), ("begin", B), ("end", B)]


def test_shared_helper_is_split_by_call_site_counts():
    f = shared_helper_kernel()
    m = pcmap.build_pc_region_map(f, counts_for(f, calls_a=10, calls_b=30))
    assert m.pcs[0x120].leaf_counts() == {A: 10.0, B: 30.0}
    assert m.pcs[0x120].method == "call_site_split" and m.pcs[0x30].method == "static_cfg"
    assert m.pcs[0x100].method == "unreachable" and m.pcs[0x110].method == "unreachable"
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert m.entropy(0x120) == pytest.approx(h) and m.entropy(0x30) == 0.0
    assert m.shared_pcs() == [0x120, 0x130]
    # Count weighting: a PC-keyed metric (e.g. barrier count) lifts proportionally.
    got = m.attribute({0x120: 8.0, 0x30: 1.0})
    assert got[A].value == pytest.approx(1.0 + 2.0) and got[B].value == pytest.approx(6.0)
    assert got[B].shared_fraction == 1.0 and got[A].shared_fraction == pytest.approx(2 / 3)


def test_nested_regions_inclusive_and_exclusive():
    lines = _marker(0x00, "begin", A) + ["/*0030*/ FFMA R0, R0, R0, R0 ;"] + _marker(0x40, "begin", B) + [
        "/*0070*/ FFMA R0, R0, R0, R0 ;"] + _marker(0x80, "end", B) + _marker(0xB0, "end", A) + ["/*00e0*/ EXIT ;"]
    f = _fn(lines)
    m = pcmap.build_pc_region_map(f, {i.pc: 2.0 for i in f.instructions})
    assert m.pcs[0x70].stacks == {(A, B): 2.0}
    assert m.counts()[B] == 2.0 * 7 and m.counts()[A] == 2.0 * 7
    assert m.counts(inclusive=True)[A] == 2.0 * 14
    assert m.counts()[pcmap.NO_REGION] == 2.0  # the EXIT outside every region


def test_markers_inside_a_helper_nest_under_each_caller():
    lines = _marker(0x00, "begin", A) + ["/*0030*/ CALL.REL.NOINC 0x80 ;"] + _marker(0x40, "end", A) + [
        "/*0070*/ EXIT ;"] + _marker(0x80, "begin", B) + ["/*00b0*/ FFMA R0, R0, R0, R0 ;"] + _marker(0xC0, "end", B) + [
        "/*00f0*/ RET.REL.NODEC R2 0x0 ;"]
    f = _fn(lines)
    m = pcmap.build_pc_region_map(f, {i.pc: 1.0 for i in f.instructions})
    assert m.pcs[0xB0].stacks == {(A, B): 1.0} and m.pcs[0xF0].stacks == {(A,): 1.0}


def test_evidence_round_trip(tmp_path):
    f = shared_helper_kernel()
    m = pcmap.build_pc_region_map(f, counts_for(f))
    files = PcRegionCounts.from_document(m.to_evidence()).save(tmp_path / "map")
    assert json.loads(files["pc_region_counts"].read_text())["format"] == "argus.pc_region_counts/2"
    doc = PcRegionCounts.load(tmp_path / "map").document()
    assert doc["format"] == "argus.pc_region_counts/1" and doc["method"] == "sass_cfg+ncu"
    assert ["k@0x120", A, 10.0] in doc["entries"] and doc["pc_methods"]["k@0x120"] == "call_site_split"
    back = pcmap.PcRegionMap.from_evidence(doc)
    assert back.counts() == m.counts() and back.shared_pcs() == m.shared_pcs()
    with pytest.raises(pcmap.PcMapError, match="not an argus.pc_region_counts/1"):
        pcmap.PcRegionMap.from_evidence({"format": "argus.pc_counters/1"})


def test_unbalanced_markers_are_reported_with_the_pc():
    # begin A on one path only: the join block sees [A] and [].
    lines = ["/*0000*/ @P0 BRA 0x40 ;"] + _marker(0x10, "begin", A) + ["/*0040*/ EXIT ;"]
    with pytest.raises(pcmap.PcMapError, match="block 0x0040 is reached with open regions"):
        pcmap.static_ownership(_fn(lines))
    lines = _marker(0x00, "begin", A) + _marker(0x30, "end", B) + ["/*0060*/ EXIT ;"]
    with pytest.raises(pcmap.PcMapError, match="end of region 0x00d4e5f6 at 0x0030"):
        pcmap.static_ownership(_fn(lines))
    lines = ["/*0000*/ PMTRIG 0xa501 ;", "/*0010*/ FFMA R0, R0, R0, R0 ;", "/*0020*/ EXIT ;"]
    with pytest.raises(pcmap.PcMapError, match="not followed by 2 PMTRIG words"):
        pcmap.static_ownership(_fn(lines))


def test_indirect_branch_and_recursion_are_refused():
    with pytest.raises(pcmap.PcMapError, match="indirect branch at 0x0000"):
        pcmap.static_ownership(_fn(["/*0000*/ BRX R2 -0x10 ;", "/*0010*/ EXIT ;"]))
    lines = ["/*0000*/ CALL.REL.NOINC 0x20 ;", "/*0010*/ EXIT ;", "/*0020*/ CALL.REL.NOINC 0x40 ;",
             "/*0030*/ RET.REL.NODEC R2 0x0 ;", "/*0040*/ CALL.REL.NOINC 0x20 ;", "/*0050*/ RET.REL.NODEC R2 0x0 ;"]
    f = _fn(lines)
    with pytest.raises(pcmap.PcMapError, match="recursive calls"):
        pcmap.build_pc_region_map(f, {i.pc: 1.0 for i in f.instructions})


def test_counts_from_another_build_are_refused():
    f = shared_helper_kernel()
    c = counts_for(f)
    with pytest.raises(pcmap.PcMapError, match="different build"):
        pcmap.build_pc_region_map(f, {**c, 0x900: 1.0})
    del c[0x30]
    with pytest.raises(pcmap.PcMapError, match="no execution count for 1 PCs"):
        pcmap.build_pc_region_map(f, c)
    c = counts_for(f)
    c[0x100] = 5.0
    with pytest.raises(pcmap.PcMapError, match="unreachable in the CFG"):
        pcmap.build_pc_region_map(f, c)
    m = pcmap.build_pc_region_map(f, counts_for(f))
    # a metric at a PC the map does not know is not dropped: it is counted as unmapped
    got = m.attribute({0x900: 1.0, 0x30: 2.0})
    assert got[UNMAPPED].value == 1.0 and got[UNMAPPED].method == "PCs absent from the map"
    assert sum(v.value for v in got.values()) == 3.0
    assert set(m.attribute({0x100: 4.0})) == {UNMAPPED}  # 0x100 never ran in the mapping run: no owner


def test_source_file_attribution_needs_line_info():
    f = shared_helper_kernel()
    with pytest.raises(pcmap.PcMapError, match="no line info"):
        pcmap.attribute_by_source_file(f, {0x30: 1.0})


def test_instructions_scheduled_between_marker_words():
    """ptxas may put other instructions between the three words (seen in Triton kernels)."""
    w = marker_immediates("begin", A)
    e = marker_immediates("end", A)
    lines = [f"/*0000*/ PMTRIG 0x{w[0]:04x} ;", f"/*0010*/ PMTRIG 0x{w[1]:04x} ;", "/*0020*/ ULDC.64 UR4, c[0x0][0x208] ;",
             f"/*0030*/ PMTRIG 0x{w[2]:04x} ;", "/*0040*/ FFMA R0, R0, R0, R0 ;", f"/*0050*/ PMTRIG 0x{e[0]:04x} ;",
             "/*0060*/ IMAD R1, R1, R1, R1 ;", f"/*0070*/ PMTRIG 0x{e[1]:04x} ;", f"/*0080*/ PMTRIG 0x{e[2]:04x} ;",
             "/*0090*/ EXIT ;"]
    own = pcmap.static_ownership(_fn(lines))
    assert [own.local_stack[pc] for pc in (0x20, 0x40, 0x60, 0x90)] == [(A,), (A,), (A,), ()]
    assert [(k, r) for _, k, r in own.markers] == [("begin", A), ("end", A)]
