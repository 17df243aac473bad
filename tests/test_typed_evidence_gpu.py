"""The systrace adapter on a GPU publishes its timeline as typed evidence (.npy columns + meta.json), and
the system_timeline rule reads it to the totals the profiler's own trace gives."""
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

RESULTS: dict = {}


def step():
    """One program step for the adapter (``launch["python"]``): two matmuls and a copy."""
    a = torch.randn(512, 512, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    RESULTS["a"] = a
    RESULTS["c"] = a @ a
    RESULTS["d"] = (a @ a.T).cpu()


@pytest.mark.gpu
def test_systrace_publishes_a_typed_timeline_the_rule_reads(tmp_path):
    from argus_rt.backends import systrace
    from argus_rt.backends.base import CollectContext
    from argus_rt.evidence import SystemTimeline
    from argus_rt.tasks import Task
    from tests.test_synthesis import program
    from tests.test_systrace import assert_timeline_rule_matches_the_trace

    pv = program()
    collect = Task(kind="collect", op="systrace", program=pv.id, device="gpu", outputs=("system_timeline",))
    out = tmp_path / "out"
    out.mkdir()
    ctx = CollectContext(task=collect, program=SimpleNamespace(launch={"python": f"{__name__}:step"}), config={},
                         scope=None, sampling={}, inputs={}, outdir=out, device="")
    files = systrace.SystraceAdapter().collect(ctx)
    a = RESULTS["a"].double()
    torch.testing.assert_close(RESULTS["c"].double(), a @ a, rtol=1e-3, atol=1e-2)  # the step computed
    assert_timeline_rule_matches_the_trace(tmp_path, collect, files, pv)
    categories = set(SystemTimeline.from_outputs(files.get).events["category"].tolist())
    assert {"kernel", "memcpy"} <= categories
