"""On a GPU: the region trace of nested_regions and torch.profiler's kernel slices of the same launches on
one clock (argus_rt.trace.align). Three launches, each armed, launched and decoded on its own, all inside
one torch.profiler session; every output is checked against the NumPy reference first.

Checks: exactly one profiler kernel slice per traced launch, an offset consistent with all three (the
alignment refuses otherwise), an uncertainty no wider than the kernel slices' slack, the timeline valid
against the schema and nested. ``ARGUS_PERFETTO_EXAMPLE=PATH`` also writes the timeline there (the example
file docs/perfetto.md links).
"""
from __future__ import annotations

import json
import os

import pytest

from argus_rt.schema_check import validator
from argus_rt.trace import TraceConfig, TraceSession, align_with_profiler, chrome_trace, launch_span, pair_intervals
from argus_rt.trace.align import concat
from argus_rt.trace.chrome import nesting_problems
from test_trace_gpu import CTAS, THREADS, TREE, modules, run, torch_cuda  # noqa: F401

pytestmark = pytest.mark.gpu
LAUNCHES = 3


def test_region_trace_and_profiler_kernels_share_one_clock(torch_cuda, modules, tmp_path):  # noqa: F811
    from torch.profiler import ProfilerActivity, profile

    from argus_rt.backends.systrace import parse_kineto_trace

    torch = torch_cuda
    mod = modules[2]
    sess = TraceSession(mod, TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=64))
    run(torch, mod)  # loads the module outside the profiled window
    launches = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(LAUNCHES):
            sess.arm()
            run(torch, mod)
            iv = pair_intervals(sess.decode(known_ids=[r.id for r in TREE]))
            assert not iv.incomplete, iv.problems
            launches.append(iv)
    kineto = tmp_path / "kineto.json"
    prof.export_chrome_trace(str(kineto))
    events = parse_kineto_trace(json.loads(kineto.read_text()))
    doc = chrome_trace(concat(*launches), names=TREE)
    off = align_with_profiler(doc, [launch_span(iv) for iv in launches], events, "nested_regions")
    kernels = sorted((e for e in events if e.category == "kernel" and "nested_regions" in e.name),
                     key=lambda e: e.start_ns)
    slack = min((k.end_ns - k.start_ns) - (s1 - s0) for k, (s0, s1) in zip(kernels, map(launch_span, launches)))
    print(f"offset {off.offset_ns:.0f} ns +- {off.uncertainty_ns:.0f} ns over {off.launches} launches; kernel "
          f"slices {[k.end_ns - k.start_ns for k in kernels]} ns; tightest slack {slack} ns")
    assert off.launches == LAUNCHES and 0 <= off.uncertainty_ns <= (slack + 32) / 2
    assert [e.message for e in validator("chrome_trace").iter_errors(doc)] == [] and nesting_problems(doc) == []
    target = os.environ.get("ARGUS_PERFETTO_EXAMPLE")
    if target:
        doc["otherData"]["example"] = ("tests/test_perfetto_align_gpu.py: examples/cuda/nested_regions.cu, "
                                       f"{LAUNCHES} traced launches under torch.profiler")
        with open(target, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
