"""CPU stand-ins for the optimisation client's tests (examples/agent_client): a synthetic cost model
of the two tuned kernels behind the ``trace`` and ``pcmap`` backends, so that ``argus mcp`` answers
``latency``, ``kernel_time`` and ``stall_reasons`` for any fork of them without a GPU.

The numbers are invented, not measured: they only give the client's policies something that
responds to its knobs (a K loop whose loads are exposed until the pipeline is deep enough, an MMA
whose time grows with the tile, a reduction whose barriers grow with the warps), stalls that name
the bottleneck the model has, and two kinds of failed candidates (a tile set that exceeds shared
memory, and one whose output "fails" the reference check); ``AGENT_STANDIN_FAIL_ALL=<message>``
fails every candidate. Nothing here says whether region
evidence helps on a real GPU.

Registered when ``ARGUS_STANDIN_WORKER=1`` (the repo's convention for stand-in worker processes), so
that ``argus mcp --import test_agent_client_standins`` and its spawned workers serve them, and pytest's
own import of this file changes nothing.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from argus_rt.backends.base import BackendAdapter, register_backend

SMS = 132
SMEM_BYTES = 232_448  # H200's opt-in shared memory per block
TMA_LATENCY_NS = 900.0


def _knobs(program) -> dict:
    launch = program.launch
    config = {**launch.get("constexprs", {}), "num_warps": launch.get("num_warps", 4),
              "num_stages": launch.get("num_stages", 1)}
    text = "".join(p.read_text() for p in Path(program.root).glob("*.py")) if program.root else ""
    config["warp_specialize"] = "warp_specialize=True" in text
    return config


def matmul_model(c: dict, shape: dict) -> dict:
    """Per-region times (ns) of one CTA, the kernel's time, stall samples per region, or a failure."""
    bm, bn, bk, stages, warps = c["BM"], c["BN"], c["BK"], c["num_stages"], c["num_warps"]
    smem = stages * (bm + bn) * bk * 2
    if smem > SMEM_BYTES:
        return {"fail": f"out of resources: shared memory required {smem}, hardware limit {SMEM_BYTES}"}
    if bm == 64 and warps == 8:
        return {"fail": "the kernel's output differs from the PyTorch reference (relative error 0.41 > 0.01)"}
    mma = bm * bn * bk / 4096.0 * math.sqrt(4.0 / warps)
    exposed = max(0.0, TMA_LATENCY_NS - (stages - 1) * mma) * (0.5 if c["warp_specialize"] else 1.0)
    trips = shape["K"] // bk
    epilogue = bm * bn / 64.0
    cta = trips * (mma + exposed + 40.0) + epilogue + 200.0
    ctas = (shape["M"] // bm) * (shape["N"] // bn)
    waves = math.ceil(ctas / SMS)
    return {"kernel": waves * cta, "trips": trips, "ctas": ctas,
            "regions": {"tma_matmul/kloop/load": exposed + 40.0, "tma_matmul/kloop/mma": mma,
                        "tma_matmul/epilogue": epilogue},
            "stalls": {"tma_matmul/kloop/load": {"stall:long_sb": trips * exposed + 1, "stall:barrier": 5},
                       "tma_matmul/kloop/mma": {"stall:math": trips * mma, "stall:wait": 10},
                       "tma_matmul/epilogue": {"stall:lg": epilogue}}}


def layernorm_model(c: dict, shape: dict) -> dict:
    block, warps, stages = c["BLOCK"], c["num_warps"], c["num_stages"]
    if block // (32 * warps) < 1:
        return {"fail": f"BLOCK {block} is narrower than {warps} warps of 32 lanes"}
    trips = math.ceil(shape["N_COLS"] / block)
    load = 600.0 / min(stages, 2) + block * 2 / (16.0 * min(warps, 8))  # latency, then bandwidth per CTA
    reduce = 30.0 * warps
    stats = trips * load + 2 * reduce
    normalize = trips * (load + 20.0)
    waves = math.ceil(shape["N_ROWS"] / (SMS * max(1, 16 // warps)))
    return {"kernel": waves * (stats + normalize + 100.0), "trips": trips, "ctas": shape["N_ROWS"],
            "regions": {"layernorm/stats": stats, "layernorm/normalize": normalize},
            "stalls": {"layernorm/stats": {"stall:long_sb": trips * load, "stall:barrier": 2 * reduce * 10},
                       "layernorm/normalize": {"stall:long_sb": trips * load * 0.9, "stall:lg": 50}}}


MODELS = {"tma_matmul": matmul_model, "layernorm": layernorm_model}


def model_of(program) -> dict:
    if os.environ.get("AGENT_STANDIN_FAIL_ALL"):  # every candidate fails, the start included
        return {"fail": os.environ["AGENT_STANDIN_FAIL_ALL"]}
    shapes = program.launch.get("shapes") or {}
    return MODELS[program.name](_knobs(program), shapes)


def _region_rows(program, model: dict) -> dict:
    """Region occurrences of 2 CTAs (the root, its children, loop regions once per trip)."""
    rid = {r.name: r.id for r in program.regions}
    cols = {k: [] for k in ("region_id", "start", "end", "sm", "cta", "warp", "coord", "launch")}

    def add(name, start, end, cta, coord=-1):
        for k, v in zip(cols, (rid[name], int(start), int(end), cta, cta, 0, coord, 0)):
            cols[k].append(v)

    root = next(r.name for r in program.regions if r.parent is None)
    for cta in range(2):
        t = 0.0
        for name, dur in model["regions"].items():
            parent = name.rsplit("/", 1)[0]
            looped = parent != root
            for trip in range(model["trips"] if looped else 1):
                add(name, t, t + dur, cta, trip if looped else -1)
                t += dur
        add(root, 0, t, cta)
        for parent in {n.rsplit("/", 1)[0] for n in model["regions"]} - {root}:
            add(parent, 0, t, cta)
    return cols


class CostModelTrace(BackendAdapter):
    """Backend ``trace``: the model's region occurrences and, as the Triton tracer, a timed JIT check."""

    name = "trace"
    effects = frozenset({"perturbs_timing"})
    outputs = ("region_intervals",)
    needs_gpu = False

    def collect(self, ctx):
        model = model_of(ctx.program)
        if "fail" in model:
            raise RuntimeError(model["fail"])
        ms = model["kernel"] / 1e6
        return {"region_intervals": ctx.write_json("region_intervals", {
            "format": "argus.region_intervals/1", "clock": "ns", "columns": _region_rows(ctx.program, model),
            "coord_kind": "iteration", "launches": 1, "dropped": 0, "incomplete": False, "granularity": "cta",
            "reference_check": {"max_rel_err": 1e-3},
            "jit_check": {"ttgir_sha256": "standin", "argus_ms": ms, "jit_ms": ms, "ratio": 1.0, "tolerance": 0.05}})}


class CostModelPcmap(BackendAdapter):
    """Backend ``pcmap``: one PC per leaf region, owned by it alone, with the model's stall samples."""

    name = "pcmap"
    effects = frozenset({"replays_kernel", "exclusive_profiler", "perturbs_timing", "serialises_kernels"})
    outputs = ("pc_region_counts", "pc_counters")
    needs_gpu = False

    def collect(self, ctx):
        model = model_of(ctx.program)
        if "fail" in model:
            raise RuntimeError(model["fail"])
        rid = {r.name: r.id for r in ctx.program.regions}
        regions = sorted(model["stalls"])
        pcs = [f"k@0x{16 * i:02x}" for i in range(len(regions))]
        reasons = sorted({s for r in regions for s in model["stalls"][r]})
        metrics = {"inst_executed": [1000] * len(pcs)}
        for reason in reasons:
            metrics[reason] = [float(model["stalls"][r].get(reason, 0.0)) for r in regions]
        entries = [[pc, rid[r], 1] for pc, r in zip(pcs, regions)]
        return {"pc_region_counts": ctx.write_json("map", {"format": "argus.pc_region_counts/1", "method": "standin",
                                                           "entries": entries}),
                "pc_counters": ctx.write_json("pc_counters", {
                    "format": "argus.pc_counters/1", "method": "standin", "pcs": pcs, "opcodes": ["HGMMA"] * len(pcs),
                    "metrics": metrics, "sections": ctx.config.get("sections")})}


if os.environ.get("ARGUS_STANDIN_WORKER") == "1":
    # for Triton programs: the kind registers its own trace adapter under that kind, which a generic one
    # would not displace
    register_backend(CostModelTrace(), replace=True, kind="triton")
    register_backend(CostModelPcmap(), replace=True)


# ---- tests of the model itself ------------------------------------------------------------------
def test_matmul_model_is_memory_bound_at_the_start_and_fails_where_it_says():
    start = {"BM": 128, "BN": 128, "BK": 64, "num_stages": 3, "num_warps": 4, "warp_specialize": False}
    shape = {"M": 2048, "N": 2048, "K": 512}
    base, deeper = matmul_model(start, shape), matmul_model({**start, "num_stages": 4}, shape)
    assert deeper["kernel"] < base["kernel"]
    assert base["stalls"]["tma_matmul/kloop/load"]["stall:long_sb"] > base["stalls"]["tma_matmul/kloop/mma"]["stall:math"]
    assert "shared memory" in matmul_model({**start, "BM": 256, "BN": 256, "BK": 128, "num_stages": 5}, shape)["fail"]
    assert "reference" in matmul_model({**start, "BM": 64, "num_warps": 8}, shape)["fail"]


def test_layernorm_model_rejects_blocks_narrower_than_its_warps():
    assert "narrower" in layernorm_model({"BLOCK": 256, "num_warps": 16, "num_stages": 1},
                                         {"N_ROWS": 8, "N_COLS": 256})["fail"]
    with pytest.raises(KeyError):
        layernorm_model({"BLOCK": 256}, {"N_ROWS": 8, "N_COLS": 256})
