"""Synthesis rules on hand-made evidence, checked against plain NumPy references."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from argus_rt.evidence import Evidence, PcRegionCounts, SystemTimeline
from argus_rt.program import IncompatibleVersionsError, ProgramVersion
from argus_rt.regions import RegionTree
from argus_rt.runtime.handlers import TaskContext, get_handler
from argus_rt.scope import ScopeError
from argus_rt.synthesis import EvidenceError
from argus_rt.tasks import Task


def program() -> ProgramVersion:
    tree = RegionTree("k")
    for name in ("main/load", "main/mma", "epi"):
        tree.add(name)
    return ProgramVersion.from_sources("k", {"k.cu": "x"}, regions=tree)


def run_rule(tmp_path, rule, task, deps, pv=None, programs=None):
    """deps: {task: {output name: doc}} written as JSON inputs; a typed doc (an Evidence) is saved as
    its .npy columns plus metadata, each file an input, as a collection publishes it."""
    pv = pv or program()
    inputs = {}
    for dep, outs in deps.items():
        for name, doc in outs.items():
            if isinstance(doc, Evidence):
                saved = doc.save(tmp_path / f"{dep.id}-{name}")
                inputs.update({f"{dep.id}/{n}": f for n, f in saved.items()})
                continue
            p = tmp_path / f"{dep.id}-{name}.json"
            p.write_text(json.dumps(doc))
            inputs[f"{dep.id}/{name}"] = p
    out = tmp_path / f"out-{task.id}"
    out.mkdir(exist_ok=True)
    lookup = programs or {pv.id: pv}
    ctx = TaskContext(task=task, program=pv, programs=lambda pid: lookup[pid], inputs=inputs, outdir=out,
                      deps={d.id: d for d in deps})
    return json.loads(Path(get_handler("synthesize", rule)(ctx)["facts"]).read_text())


def intervals(pv, rng, n=400):
    regions = [r for r in pv.regions if r.name != "main"]
    rid = rng.choice([r.id for r in regions], n)
    start = rng.integers(0, 10_000, n)
    dur = rng.integers(1, 5_000, n)
    cols = {"region_id": rid.tolist(), "start": start.tolist(), "end": (start + dur).tolist(),
            "sm": rng.integers(0, 8, n).tolist(), "cta": rng.integers(0, 16, n).tolist(),
            "warp": rng.integers(0, 8, n).tolist(), "coord": rng.integers(0, 6, n).tolist()}
    return {"format": "argus.region_intervals/1", "clock": "ns", "columns": cols, "coord_kind": "iteration",
            "warp_roles": {"producer": [0, 1], "consumer": [4, 5, 6, 7]}, "dropped": 0, "incomplete": False}


@pytest.mark.parametrize("scope", [{}, {"iterations": [1, 4]}, {"sms": [0, 3]}, {"warp_role": "consumer"},
                                   {"ctas": [1, 2, 3], "iterations": [0, 2]}])
def test_latency_matches_numpy_reference(tmp_path, scope):
    pv = program()
    doc = intervals(pv, np.random.default_rng(len(json.dumps(scope))))
    c = {k: np.asarray(v) for k, v in doc["columns"].items()}
    collect = Task(kind="collect", op="trace", program=pv.id, device="gpu")
    synth = Task(kind="synthesize", op="latency", program=pv.id, region="main", scope=scope, deps=(collect.id,),
                 config={"signal": "latency", "unit": "ns", "qualification": "observed"})
    facts = run_rule(tmp_path, "latency", synth, {collect: {"region_intervals": doc}})
    # plain NumPy reference of the same selection
    sel = np.ones(len(c["start"]), bool)
    if "iterations" in scope:
        sel &= (c["coord"] >= scope["iterations"][0]) & (c["coord"] < scope["iterations"][1])
    if "sms" in scope:
        sel &= np.isin(c["sm"], scope["sms"])
    if "ctas" in scope:
        sel &= np.isin(c["cta"], scope["ctas"])
    if "warp_role" in scope:
        sel &= np.isin(c["warp"], [4, 5, 6, 7])
    for region in pv.regions.subtree("main"):
        d = (c["end"] - c["start"])[sel & (c["region_id"] == region.id)]
        vals = {v["metric"]: v["value"] for v in facts["values"] if v["region"] == region.name}
        if d.size == 0:
            assert vals == {"count": 0}
            continue
        assert vals["count"] == d.size
        assert vals["mean"] == pytest.approx(d.mean(), rel=1e-12)
        assert vals["p99"] == pytest.approx(np.percentile(d, 99), rel=1e-12)
        assert vals["max"] == d.max() and vals["min"] == d.min()
    assert {v["qualification"] for v in facts["values"]} == {"observed"}
    assert all(v["provenance"]["evidence"][0]["task"] == collect.id for v in facts["values"])
    assert all(v["region"] != "epi" for v in facts["values"])  # outside the subtree


def test_latency_scope_errors_name_the_problem(tmp_path):
    pv = program()
    doc = intervals(pv, np.random.default_rng(1))
    collect = Task(kind="collect", op="trace", program=pv.id, device="gpu")
    synth = Task(kind="synthesize", op="latency", program=pv.id, scope={"warp_role": "dma"}, deps=(collect.id,))
    with pytest.raises(ScopeError, match="unknown warp role 'dma'; roles the program declares: consumer, producer"):
        run_rule(tmp_path, "latency", synth, {collect: {"region_intervals": doc}})
    synth = Task(kind="synthesize", op="latency", program=pv.id, scope={"layer": 2}, deps=(collect.id,))
    with pytest.raises(ScopeError, match="coordinate is the layer; this evidence's coordinate is 'iteration'"):
        run_rule(tmp_path, "latency", synth, {collect: {"region_intervals": doc}})
    bad = dict(doc, format="argus.region_intervals/0")
    synth = Task(kind="synthesize", op="latency", program=pv.id, deps=(collect.id,))
    with pytest.raises(EvidenceError, match="expected evidence format"):
        run_rule(tmp_path, "latency", synth, {collect: {"region_intervals": bad}})
    del doc["columns"]["end"]
    with pytest.raises(EvidenceError, match=r"missing column\(s\) \['end'\]"):
        run_rule(tmp_path, "latency", synth, {collect: {"region_intervals": doc}})


def _map_and_counters(pv, rng):
    ids = {r.name: r.id for r in pv.regions}
    pcs = [f"k@0x{16 * i:x}" for i in range(12)]
    ops = ["FFMA", "LDG.E", "BAR.SYNC", "IMAD"] * 3
    owners = []
    for i, pc in enumerate(pcs):
        regs = ["main/load", "main/mma", "epi"][: 1 + (i % 3 == 0) * 2]  # every third PC is shared
        owners += [[pc, ids[r], int(rng.integers(1, 50))] for r in regs]
    counts = rng.integers(100, 10_000, len(pcs)).astype(float)
    return pcs, ops, owners, counts


def test_attributed_metric_matches_reference_and_refuses_foreign_maps(tmp_path):
    pv = program()
    marker = pv.variant_of("marker_only")
    pcs, ops, owners, counts = _map_and_counters(pv, np.random.default_rng(7))
    mapc = Task(kind="collect", op="pcmap", program=marker.id, device="gpu")
    mapsyn = Task(kind="synthesize", op="pc_region_map", program=pv.id, deps=(mapc.id,))
    map_facts = run_rule(tmp_path, "pc_region_map", mapsyn,
                         {mapc: {"pc_region_counts": {"format": "argus.pc_region_counts/1", "method": "t",
                                                      "entries": owners}}})
    # the same map published typed (.npy columns + meta.json) gives the same facts
    typed = PcRegionCounts.from_document({"format": "argus.pc_region_counts/1", "method": "t", "entries": owners})
    again = run_rule(tmp_path, "pc_region_map", mapsyn, {mapc: {"pc_region_counts": typed}})
    assert again["values"] == map_facts["values"] and again["extra"] == map_facts["extra"]
    shared = map_facts["extra"]["pc_entropy"]
    assert sorted(shared) == [pcs[i] for i in range(0, 12, 3)]  # exactly the PCs with several owners
    assert all(v["entropy_nats"] > 0 and abs(sum(v["alpha"].values()) - 1) < 1e-12 for v in shared.values())
    ncu = Task(kind="collect", op="ncu", program=marker.id, device="gpu")
    cdoc = {"format": "argus.pc_counters/1", "pcs": pcs, "opcodes": ops, "metrics": {"inst_executed": counts.tolist()}}
    task = Task(kind="synthesize", op="attributed_metric", program=pv.id, region="main", deps=(ncu.id, mapsyn.id),
                config={"metric": "inst_executed", "group_by": "opcode", "signal": "instruction_mix",
                        "qualification": "attributed", "unit": "instructions"})
    facts = run_rule(tmp_path, "attributed_metric", task, {ncu: {"pc_counters": cdoc}, mapsyn: {"facts": map_facts}})
    # reference: explicit loops over (pc, region) with alpha = n / sum n
    ids = {r.id: r.name for r in pv.regions}
    ref: dict = {}
    for i, pc in enumerate(pcs):
        rows = [(r, n) for p, r, n in owners if p == pc]
        tot = sum(n for _, n in rows)
        for r, n in rows:
            key = (ids[r], ops[i].split(".")[0])
            ref[key] = ref.get(key, 0.0) + counts[i] * n / tot
    for v in facts["values"]:
        if v["region"] in ("main/load", "main/mma", "main") and not v["metric"].endswith("(inclusive)"):
            assert v["value"] == pytest.approx(ref.get((v["region"], v["metric"]), 0.0)), v
            assert v["qualification"] == "attributed"
    incl = {v["metric"]: v["value"] for v in facts["values"] if v["metric"].endswith("(inclusive)")}
    for fam in ("FFMA", "LDG", "BAR", "IMAD"):
        assert incl[f"{fam} (inclusive)"] == pytest.approx(ref.get(("main/load", fam), 0) + ref.get(("main/mma", fam), 0))
    assert any(v["ambiguity"]["shared_pcs"] > 0 for v in facts["values"] if v["ambiguity"])
    # counters from a different binary (the traced variant) must not be joined with this map
    ncu2 = Task(kind="collect", op="ncu", program=pv.variant_of("traced").id, device="gpu")
    task2 = Task(kind="synthesize", op="attributed_metric", program=pv.id, region="main", deps=(ncu2.id, mapsyn.id),
                 config={"metric": "inst_executed"})
    with pytest.raises(IncompatibleVersionsError, match="PCs differ between binaries"):
        run_rule(tmp_path, "attributed_metric", task2, {ncu2: {"pc_counters": cdoc}, mapsyn: {"facts": map_facts}})


def test_async_join_refuses_incompatible_versions(tmp_path):
    pv = program()
    other = pv.derive({"k.cu": "edited"})
    ref = Task(kind="synthesize", op="latency", program=pv.id, region="main")
    probe_pv = other.variant_of("probe", op_id="tma0", iteration=1)
    probe = Task(kind="collect", op="trace", program=probe_pv.id, device="gpu",
                 config={"probe": {"op_id": "tma0", "iteration": 1}})
    task = Task(kind="synthesize", op="async_completion_latency", program=pv.id, region="main",
                deps=(ref.id, probe.id), config={"signal": "async_completion_latency"})
    ev = {"format": "argus.op_events/1", "columns": {"op_id": ["tma0"], "iteration": [1], "issue": [0], "complete": [5]}}
    with pytest.raises(IncompatibleVersionsError, match="refusing to join"):
        run_rule(tmp_path, "async_completion_latency", task,
                 {ref: {"facts": {"format": "argus.facts/1", "values": [], "extra": {}}}, probe: {"op_events": ev}},
                 programs={pv.id: pv, probe_pv.id: probe_pv})


def test_async_join_is_by_op_and_iteration_not_timestamps(tmp_path):
    pv = program()
    ref = Task(kind="synthesize", op="latency", program=pv.id, region="main")
    probes, deps, lookup = [], {}, {pv.id: pv}
    ref_facts = {"format": "argus.facts/1", "values": [],
                 "extra": {"mean_by_iteration": {"main/load": {"0": 11.0, "1": 22.0}}}}
    deps[ref] = {"facts": ref_facts}
    for it in (0, 1):
        ppv = pv.variant_of("probe", op_id="tma0", iteration=it)
        lookup[ppv.id] = ppv
        t = Task(kind="collect", op="trace", program=ppv.id, device="gpu", config={"probe": {"op_id": "tma0", "iteration": it}})
        # the probe run's clock is unrelated to the reference's (offset 1e9): only durations matter
        ev = {"format": "argus.op_events/1", "columns": {
            "op_id": ["tma0", "tma0", "tma1"], "iteration": [it, it, it],
            "issue": [1e9 + 10, 1e9 + 20, 0], "complete": [1e9 + 110 + it, 1e9 + 120 + it, 999]}}
        deps[t] = {"op_events": ev}
        probes.append(t)
    sites = Task(kind="control", op="async_discovery", program=pv.id, region="main")
    deps[sites] = {"async_sites": {"format": "argus.async_sites/1",
                                   "sites": [{"op_id": "tma0", "region": "main/load", "iterations": [0, 1]}]}}
    task = Task(kind="synthesize", op="async_completion_latency", program=pv.id, region="main",
                deps=tuple(t.id for t in deps), config={"signal": "async_completion_latency", "qualification": "derived"})
    facts = run_rule(tmp_path, "async_completion_latency", task, deps, programs=lookup)
    got = {(v["join"]["op_id"], v["join"]["iteration"]): (v["value"], v["join"]["reference_region_mean"])
           for v in facts["values"]}
    assert got == {("tma0", 0): (100.0, 11.0), ("tma0", 1): (101.0, 22.0)}


def test_system_timeline_totals_and_step_selection(tmp_path):
    pv = program()
    rng = np.random.default_rng(3)
    events = []
    for step in range(3):
        for k in range(5):
            start = int(rng.integers(0, 10_000))
            events.append({"name": f"k{k % 2}", "category": "kernel", "start_ns": start,
                           "end_ns": start + int(rng.integers(1, 500)), "step": step})
    collect = Task(kind="collect", op="systrace", program=pv.id, device="gpu")
    doc = {"format": "argus.system_timeline/1", "events": events}
    task = Task(kind="synthesize", op="system_timeline", program=pv.id, scope={"step": 1}, deps=(collect.id,))
    facts = run_rule(tmp_path, "system_timeline", task, {collect: {"system_timeline": doc}})
    got = {v["metric"]: (v["value"], v["samples"]) for v in facts["values"]}
    ref: dict = {}
    for e in events:
        if e["step"] == 1:
            t, c = ref.get(f"kernel:{e['name']}", (0.0, 0))
            ref[f"kernel:{e['name']}"] = (t + e["end_ns"] - e["start_ns"], c + 1)
    assert got == ref
    untagged = {"format": "argus.system_timeline/1", "events": [{k: v for k, v in e.items() if k != "step"}
                                                                for e in events]}
    with pytest.raises(ScopeError, match="needs events tagged with their step"):
        run_rule(tmp_path, "system_timeline", task, {collect: {"system_timeline": untagged}})
    # the same events published typed (.npy columns + meta.json) give the same facts as the inline document
    typed = SystemTimeline.from_document(doc)
    assert typed.events["step"].dtype == np.int64 and typed.rows == len(events)
    again = run_rule(tmp_path, "system_timeline", task, {collect: {"system_timeline": typed}})
    assert [(v["metric"], v["value"], v["samples"], v["notes"]) for v in again["values"]] == \
        [(v["metric"], v["value"], v["samples"], v["notes"]) for v in facts["values"]]
