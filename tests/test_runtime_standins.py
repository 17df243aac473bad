"""CPU stand-in backends for the runtime tests (tests only: they read a synthetic program's launch
spec instead of running a GPU tool), plus tests of the stand-ins themselves.

Worker processes import this module by name (the registry remembers it), so it must stay
importable from ``tests/`` and register on import.

Synthetic program launch spec (``ProgramVersion.launch["standin"]``)::

    {"occurrences": [[region, start, end, sm, cta, warp, iteration], ...],
     "pcs": [[pc, opcode, inst_executed, {"stall:x": n}], ...],
     "owners": [[pc, region, n], ...],
     "events": [[category, name, start_ns, end_ns], ...],
     "kill_once": path (SIGKILL the worker mid-write the first time), "sleep_s": s, "fail": message,
     "only": backend name (the three hooks act only in that backend)}
"""
from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import pytest

from argus_rt.backends.base import BackendAdapter, get_backend, register_backend, unregister_backend
from argus_rt.program import ProgramVersion
from argus_rt.regions import RegionTree

_PROFILER = frozenset({"replays_kernel", "exclusive_profiler", "perturbs_timing", "serialises_kernels"})


def _spec(ctx) -> dict:
    return ctx.program.launch.get("standin", {})


def _hooks(ctx, partial_name: str) -> None:
    spec = _spec(ctx)
    if spec.get("only", ctx.task.op) != ctx.task.op:
        return  # the hooks below target one backend
    if spec.get("fail"):
        raise RuntimeError(spec["fail"])
    if spec.get("sleep_s"):
        time.sleep(spec["sleep_s"])
    marker = spec.get("kill_once")
    if marker and not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write("killed once")
        # half-written output, then die the hard way: nothing of it may become visible
        with open(ctx.outdir / partial_name, "w") as fh:
            fh.write('{"format": "argus.region_intervals/1", "columns": {"region_id": [1, 2')
            fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _rid(ctx, name: str) -> int:
    return ctx.program.regions[name].id


class StandinTrace(BackendAdapter):
    name = "trace"
    effects = frozenset({"perturbs_timing"})  # as the real region tracer declares
    outputs = ("region_intervals", "op_events")
    needs_gpu = False

    def collect(self, ctx):
        _hooks(ctx, "region_intervals.json")
        spec = _spec(ctx)
        rows = spec.get("occurrences", [])
        probe = ctx.config.get("probe")
        cols = {"region_id": [], "start": [], "end": [], "sm": [], "cta": [], "warp": [], "coord": []}
        for region, start, end, sm, cta, warp, it in rows:
            if probe and it == probe["iteration"]:
                end += spec.get("probe_penalty", 0)
            for k, v in zip(cols, (_rid(ctx, region), start, end, sm, cta, warp, it)):
                cols[k].append(v)
        out = {"region_intervals": ctx.write_json("region_intervals", {
            "format": "argus.region_intervals/1", "clock": "ns", "columns": cols, "coord_kind": "iteration",
            "warp_roles": spec.get("warp_roles", {}), "launches": 1, "dropped": 0, "incomplete": False})}
        if probe:
            ev = {"op_id": [], "iteration": [], "issue": [], "complete": [], "sm": [], "cta": []}
            for op_id, it, issue, complete, sm, cta in spec.get("op_events", []):
                if op_id == probe["op_id"] and it == probe["iteration"]:
                    for k, v in zip(ev, (op_id, it, issue, complete, sm, cta)):
                        ev[k].append(v)
            out["op_events"] = ctx.write_json("op_events", {"format": "argus.op_events/1", "clock": "ns", "columns": ev})
        return out


def _standin_pc_counters(ctx) -> dict:
    pcs = _spec(ctx).get("pcs", [])
    metrics: dict = {"inst_executed": [p[2] for p in pcs]}
    for i, p in enumerate(pcs):
        for k, v in (p[3] if len(p) > 3 else {}).items():
            metrics.setdefault(k, [0] * len(pcs))[i] = v
    return {"format": "argus.pc_counters/1", "method": "standin", "pcs": [p[0] for p in pcs],
            "opcodes": [p[1] for p in pcs], "metrics": metrics, "sections": ctx.config.get("sections")}


class StandinNcu(BackendAdapter):
    name = "ncu"
    effects = _PROFILER
    outputs = ("pc_counters",)
    needs_gpu = False

    def collect(self, ctx):
        _hooks(ctx, "pc_counters.json")
        return {"pc_counters": ctx.write_json("pc_counters", _standin_pc_counters(ctx))}


class StandinPcmap(BackendAdapter):
    """The mapping run: n(r, p) and, as the real adapter, that run's per-PC counters."""

    name = "pcmap"
    effects = _PROFILER
    outputs = ("pc_region_counts", "pc_counters")
    needs_gpu = False

    def collect(self, ctx):
        _hooks(ctx, "pc_region_counts.json")
        entries = [[pc, _rid(ctx, region), n] for pc, region, n in _spec(ctx).get("owners", [])]
        return {"pc_region_counts": ctx.write_json("map", {"format": "argus.pc_region_counts/1", "method": "standin",
                                                           "entries": entries}),
                "pc_counters": ctx.write_json("pc_counters", _standin_pc_counters(ctx))}


class StandinSystrace(BackendAdapter):
    name = "systrace"
    effects = frozenset({"exclusive_profiler"})
    outputs = ("system_timeline",)
    needs_gpu = False

    def collect(self, ctx):
        _hooks(ctx, "timeline.json")
        events = [{"category": c, "name": n, "start_ns": s, "end_ns": e, "device": 0, "stream": 7}
                  for c, n, s, e in _spec(ctx).get("events", [])]
        return {"system_timeline": ctx.write_json("timeline", {"format": "argus.system_timeline/1", "events": events})}


class StandinSleep(BackendAdapter):
    """A collect that only sleeps and says where and when it ran (overhead, timeout, device tests)."""

    name = "standin_sleep"
    outputs = ("done",)
    needs_gpu = False

    def collect(self, ctx):
        start = time.time()
        time.sleep(float(ctx.config.get("sleep_s", 0)))
        return {"done": ctx.write_json("done", {"config": ctx.config, "device": ctx.device, "pid": os.getpid(),
                                                "start": start, "end": time.time()})}


STANDINS = [StandinTrace(), StandinNcu(), StandinPcmap(), StandinSystrace(), StandinSleep()]
# Registered at import so that spawned workers (which import this module) know them too; the
# parent-side fixture below swaps them in and restores whatever was registered before.
if os.environ.get("ARGUS_STANDIN_WORKER") == "1":
    for _a in STANDINS:
        register_backend(_a, replace=True)


@contextmanager
def standin_backends():
    """Swap the stand-ins in for trace/ncu/pcmap/systrace in this process; restore afterwards."""
    previous = {}
    for adapter in STANDINS:
        try:
            previous[adapter.name] = get_backend(adapter.name)
        except Exception:
            previous[adapter.name] = None
        register_backend(adapter, replace=True)
    os.environ["ARGUS_STANDIN_WORKER"] = "1"  # inherited by spawned workers
    try:
        yield
    finally:
        os.environ.pop("ARGUS_STANDIN_WORKER", None)
        for name, old in previous.items():
            unregister_backend(name)
            if old is not None:
                register_backend(old, replace=True)


def demo_program(**standin) -> ProgramVersion:
    """A synthetic program: regions main/{gemm/{load,mma},epilogue}; 4 iterations on 2 SMs."""
    tree = RegionTree("demo")
    for name in ("main/gemm/load", "main/gemm/mma", "main/epilogue"):
        tree.add(name)
    occ = []
    for it in range(4):
        for sm in (0, 1):
            base = 1000 * it + 10 * sm
            occ.append(["main/gemm", base, base + 500 + 10 * it, sm, sm, 0, it])
            occ.append(["main/gemm/load", base, base + 100, sm, sm, 0, it])
            occ.append(["main/gemm/mma", base + 100, base + 400, sm, sm, 4, it])
        occ.append(["main/epilogue", 5000, 5300, 0, 0, 0, it])
    spec = {
        "occurrences": occ, "warp_roles": {"producer": [0], "consumer": [4]},
        "pcs": [["k@0x00", "LDG.E", 800, {"stall:long_scoreboard": 40}],
                ["k@0x10", "FFMA", 3000, {"stall:math": 10}],
                ["k@0x20", "BAR.SYNC", 400, {"stall:barrier": 70}],
                ["k@0x30", "FFMA", 1000, {}],
                ["k@0x40", "STG.E", 100, {}]],
        "owners": [["k@0x00", "main/gemm/load", 8], ["k@0x10", "main/gemm/mma", 8],
                   ["k@0x20", "main/gemm/load", 3], ["k@0x20", "main/gemm/mma", 1],
                   ["k@0x30", "main/epilogue", 4]],
        "events": [["kernel", "demo_kernel", 0, 6000], ["memcpy", "HtoD", 0, 200]],
        "op_events": [[f"tma{j}", it, 100 + 1000 * it, 100 + 1000 * it + 300 + 20 * j, 0, 0]
                      for j in range(2) for it in range(4)],
    }
    spec.update(standin)
    return ProgramVersion.from_sources("demo", {"demo.cu": "// synthetic"}, kind="standin",
                                       launch={"standin": spec}, regions=tree, compiler="none")


@pytest.fixture
def standins():
    with standin_backends():
        yield


def test_standin_program_is_deterministic():
    assert demo_program().id == demo_program().id
    assert demo_program(sleep_s=1).id != demo_program().id


def test_standin_swap_restores_previous_registration():
    class Marker(BackendAdapter):
        name = "standin_sleep"

    register_backend(Marker(), replace=True)
    with standin_backends():
        assert isinstance(get_backend("standin_sleep"), StandinSleep)
    assert isinstance(get_backend("standin_sleep"), Marker)
    register_backend(StandinSleep(), replace=True)
