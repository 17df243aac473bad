"""torch.profiler timeline on a GPU: kernels of a checked computation appear with the right count."""
import json

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.gpu
def test_profiled_matmuls_on_two_streams(tmp_path):
    from argus_rt.backends import systrace

    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    reference = (a.double() @ b.double()).float()  # plain reference first
    side = torch.cuda.Stream()
    results = {}

    def step():
        results["c"] = a @ b
        with torch.cuda.stream(side):
            results["d"] = torch.relu(a) + 1.0

    raw = systrace.profile_callable(step, tmp_path)
    torch.testing.assert_close(results["c"], reference, rtol=2e-3, atol=2e-2)
    torch.testing.assert_close(results["d"], torch.relu(a) + 1.0)
    events = systrace.parse_kineto_trace(json.loads(raw.read_text()))
    kernels = [e for e in events if e.category == "kernel"]
    assert len({e.stream for e in kernels}) == 2
    assert all(e.duration_ns > 0 for e in kernels)
