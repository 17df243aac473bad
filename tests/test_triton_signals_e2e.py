"""`argus query examples/triton --signals latency,async_completion_latency` through the runtime on the
CPU: only the GPU collections are stand-ins, and they dispatch on their config exactly as the real
Triton trace adapter does (one mode per run: a region trace, the traced TMA reference, or a probe),
writing the documented formats with the real document helpers. Both signals come back answered.

Before the fix the planner merged the region trace ({}) into the reference run ({"reference": ...}),
whose mode published iteration_waits only: "collect:trace did not produce declared output(s)
['region_intervals']", and both signals were lost."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("triton")

from argus_rt.backends.base import register_backend  # noqa: E402
from argus_rt.backends.trace import TraceAdapter  # noqa: E402
from argus_rt.kinds.triton import probes as P  # noqa: E402
from argus_rt.kinds.triton import region_trace as RT  # noqa: E402
from argus_rt.kinds.triton.program import program_ttgir  # noqa: E402
from argus_rt.program import load_program  # noqa: E402
from argus_rt.scope import Scope  # noqa: E402
from tests.backend_swap import StandinTritonTraceBase, standin_triton_trace  # noqa: E402

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
N_CTAS = 2
ENV = "ARGUS_TRITON_SIGNALS_STANDIN"


class ModeDispatchingTrace(StandinTritonTraceBase):
    """Stand-in with the real adapter's one-mode-per-run dispatch (``outputs_for`` and its refusal)."""

    def outputs_for(self, config):
        return TraceAdapter().outputs_for(config)

    def collect(self, ctx):
        publishes = self.outputs_for(ctx.config)
        missing = set(ctx.task.outputs) - set(publishes)
        assert not missing, f"run {ctx.task.id} declares {sorted(missing)} that its mode does not publish"
        ttgir, iterations = program_ttgir(ctx.program)
        if not ctx.config:  # region trace: a synthetic buffer in the traced variant's layout, decoded for real
            variant = RT.make_region_trace(ttgir, iterations)
            buf = np.zeros((N_CTAS, variant.words_per_cta), dtype=np.int64)
            order = sorted(((s.order_key(t), s, t) for s in variant.sites for t in range(s.slots)), key=lambda x: x[0])
            for c in range(N_CTAS):
                buf[c, 0] = 1 + c
                for k, (_key, s, trip) in enumerate(order):
                    w = RT.HEADER_WORDS + RT.WORDS_PER_RECORD * (s.first_slot + trip)
                    buf[c, w], buf[c, w + 1] = s.tag, 10**9 + 100 * k
            cols = RT.decode_region_buffer(buf.ravel(), N_CTAS, variant.sites)
            doc = RT.region_intervals_document(cols, launches=1, notes=variant.notes)
            return {"region_intervals": ctx.write_json("region_intervals", doc)}
        if "reference" in ctx.config:
            buf = np.zeros((N_CTAS, iterations, 2), dtype=np.int64)
            for c in range(N_CTAS):
                for it in range(iterations):
                    buf[c, it] = (10**12, 10**12 + 1000 + 100 * it)
            doc = P.iteration_waits_document(buf.ravel(), N_CTAS, iterations, wait="stand-in")
            return {"iteration_waits": ctx.write_json("iteration_waits", doc)}
        op_id, it = ctx.config["probe"]["op_id"], ctx.config["probe"]["iteration"]
        buf = np.zeros((N_CTAS, P.WORDS_PER_CTA), dtype=np.int64)
        for c in range(N_CTAS):
            buf[c] = (5 * 10**12, 5 * 10**12 + 400 + it, 5, 805 + it, c)
        doc = P.op_events_document(buf.ravel(), N_CTAS, int(op_id, 16), it)
        return {"op_events": ctx.write_json("op_events", doc)}


if os.environ.get(ENV) == "1":  # spawned workers import this module
    register_backend(ModeDispatchingTrace(), kind="triton", replace=True)


def test_latency_and_async_completion_latency_answer_together(tmp_path):
    from argus_rt.planner import plan_query
    from argus_rt.report import Report
    from argus_rt.runtime.scheduler import Runtime
    from argus_rt.workspace import Workspace

    program = load_program(ROOT / "examples" / "triton")
    plan = plan_query(program, None, ["latency", "async_completion_latency"], Scope(iterations=(2, 3)))
    with standin_triton_trace(ModeDispatchingTrace(), ENV):
        with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_workers=2) as rt:
            res = rt.run(plan)
            assert res.ok, [(r.op, r.error) for r in res.failed()]
            report = Report.from_run(plan, res)
    latency = report.select("latency")
    assert {v["region"] for v in latency} >= {"tma_matmul", "tma_matmul/kloop"}
    completion = report.select("async_completion_latency")
    # 2 TMA loads and the WGMMA dot at iteration 2
    assert len(completion) == 3 and all(v["value"] == 402 for v in completion)
    assert sorted(v["join"]["kind"] for v in completion) == ["tma_load", "tma_load", "wgmma"]
    assert {v["join"]["reference_wait_ns"] for v in completion} == {1200}
