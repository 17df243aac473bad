"""A stand-in region trace whose latencies vary from repeat to repeat (tests of ``argus compare``).

The plain stand-ins (:mod:`test_runtime_standins`) give the same intervals on every run. This one
reads ``launch["standin"]["noise"]`` of a synthetic program::

    {"seed": s, "shift_ns": d, "jitter_ns": j}

and lengthens every occurrence of repeat ``t`` (``sampling["trial"]``) by
``d + j * u``, ``u`` uniform in [-1, 1] from a generator seeded by ``(s, t, occurrence)``: the same
program and repeat give the same intervals, another repeat other ones. A program without
``"noise"`` gets the plain stand-in's intervals.

It registers for programs of kind ``standin`` only, so the other stand-ins (ncu, pcmap) stay the
generic ones. Spawned workers import this module by name and register it again when
``ARGUS_NOISY_TRACE`` is "1" (:func:`noisy_trace` sets it for the duration).
"""
from __future__ import annotations

import os
import random
from contextlib import contextmanager

from argus_rt.backends.base import register_backend, unregister_backend
from test_runtime_standins import StandinTrace

ENV = "ARGUS_NOISY_TRACE"


class NoisyTrace(StandinTrace):
    def collect(self, ctx):
        spec = ctx.program.launch.get("standin", {})
        noise = spec.get("noise")
        if noise is None or ctx.config.get("probe"):
            return super().collect(ctx)
        trial = int(ctx.sampling.get("trial", 0))
        cols = {"region_id": [], "start": [], "end": [], "sm": [], "cta": [], "warp": [], "coord": []}
        for index, (region, start, end, sm, cta, warp, it) in enumerate(spec.get("occurrences", [])):
            u = random.Random(f"{noise.get('seed', 0)}:{trial}:{index}").uniform(-1.0, 1.0)
            end = end + round(noise.get("shift_ns", 0) + noise.get("jitter_ns", 0) * u)
            for k, v in zip(cols, (ctx.program.regions[region].id, start, end, sm, cta, warp, it)):
                cols[k].append(v)
        return {"region_intervals": ctx.write_json("region_intervals", {
            "format": "argus.region_intervals/1", "clock": "ns", "columns": cols, "coord_kind": "iteration",
            "warp_roles": spec.get("warp_roles", {}), "launches": 1, "dropped": 0, "incomplete": False})}


if os.environ.get(ENV) == "1":
    register_backend(NoisyTrace(), kind="standin", replace=True)


@contextmanager
def noisy_trace():
    register_backend(NoisyTrace(), kind="standin", replace=True)
    os.environ[ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(ENV, None)
        unregister_backend("trace", "standin")
