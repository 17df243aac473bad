"""ProgramVersion.id: content-derived, computed once, and never stale (the version cannot change)."""
from __future__ import annotations

import copy
import dataclasses
import hashlib

import pytest

from argus_rt import program as program_mod
from argus_rt.program import ProgramVersion
from argus_rt.regions import RegionError, RegionTree


def version(source: str = "x") -> ProgramVersion:
    tree = RegionTree("k")
    tree.add("main/load")
    return ProgramVersion.from_sources("k", {"k.cu": source}, regions=tree)


def test_the_id_is_hashed_once_per_version(monkeypatch):
    pv = version()
    calls = []
    real_sha256 = hashlib.sha256

    def counting_sha256(*args):
        calls.append(args)
        return real_sha256(*args)

    monkeypatch.setattr(program_mod.hashlib, "sha256", counting_sha256)
    first = pv.id
    assert [pv.id for _ in range(5)] == [first] * 5
    assert len(calls) == 1
    assert pv.variant_of("traced").id != first and len(calls) == 2  # a new version hashes its own


def test_the_cached_id_is_the_content_hash():
    pv = version()
    assert pv.id == ProgramVersion.from_dict(pv.to_dict()).id  # recomputed from the fields, equal
    assert pv.id == version().id and pv.id != version("y").id
    assert copy.deepcopy(pv).id == pv.id  # a copy carries the cached id
    assert dataclasses.replace(pv).id == pv.id  # a rebuilt version hashes afresh to the same id


def test_nothing_the_id_depends_on_can_change_under_it():
    pv = version()
    before = pv.id
    with pytest.raises(dataclasses.FrozenInstanceError):
        pv.flags = ("-O0",)  # type: ignore[misc]
    with pytest.raises(RegionError, match="a program version holds them"):
        pv.regions.add("main/mma")
    pv.regions.add("main/load")  # adding what is there already changes nothing and is allowed
    assert pv.id == before
    # a new region set is a new version, with its own id
    tree = RegionTree("k")
    for name in ("main/load", "main/mma"):
        tree.add(name)
    edited = pv.derive({"k.cu": "x"}, regions=tree)
    assert edited.id != before and edited.parent == before
