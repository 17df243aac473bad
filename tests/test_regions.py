import json

import pytest

from argus_rt.regions import RegionError, RegionIdCollisionError, RegionTree, UnknownRegionError, region_id


def make_tree():
    t = RegionTree("decode")
    t.add("decode/layer/attention")
    t.add("gemm", parent="decode/layer")
    t.add("decode/core_loop")
    return t


def test_ids_are_stable_and_nonzero():
    assert region_id("decode/layer/attention") == region_id("decode/layer/attention")
    assert region_id("a") != region_id("b")
    assert all(0 < region_id(f"r{i}") < 2**32 - 1 for i in range(1000))


def test_tree_structure_and_lookup():
    t = make_tree()
    assert t["attention"].name == "decode/layer/attention"
    assert t[t["gemm"].id].name == "decode/layer/gemm"
    assert [r.leaf for r in t.children("decode/layer")] == ["attention", "gemm"]
    assert [r.name for r in t.subtree("decode/layer")] == ["decode/layer", "decode/layer/attention", "decode/layer/gemm"]
    assert [r.name for r in t.ancestors("gemm")] == ["decode/layer", "decode"]
    assert [r.name for r in t.roots()] == ["decode"]


def test_unknown_region_lists_valid_names():
    t = make_tree()
    with pytest.raises(UnknownRegionError, match="valid regions: decode, decode/core_loop"):
        t["nope"]
    with pytest.raises(UnknownRegionError, match="0x00000001"):
        t[1]


def test_ambiguous_leaf_is_refused():
    t = RegionTree()
    t.add("a/x")
    t.add("b/x")
    with pytest.raises(UnknownRegionError, match="ambiguous"):
        t["x"]


@pytest.mark.parametrize("bad", ["", "a//b", "../etc", "a b", "/a"])
def test_bad_names(bad):
    with pytest.raises(RegionError):
        RegionTree().add(bad)


def test_collision_is_reported(monkeypatch):
    import argus_rt.regions as regions

    monkeypatch.setattr(regions, "region_id", lambda name: 42)
    t = RegionTree()
    t.add("a")
    with pytest.raises(RegionIdCollisionError, match="'b' and 'a'"):
        t.add("b")


def test_manifest_round_trip(tmp_path):
    t = make_tree()
    path = tmp_path / "m.json"
    t.save(path)
    back = RegionTree.load(path)
    assert back.to_manifest() == t.to_manifest()
    data = json.loads(path.read_text())
    data["regions"][0]["id"] ^= 1
    with pytest.raises(RegionError, match="does not match its hash"):
        RegionTree.from_manifest(data)
    with pytest.raises(RegionError, match="manifest version"):
        RegionTree.from_manifest({"argus_manifest_version": 99})


def test_cuda_defines():
    text = make_tree().cuda_defines()
    assert f"#define ARGUS_REGION_DECODE_LAYER_GEMM 0x{region_id('decode/layer/gemm'):08x}u" in text
