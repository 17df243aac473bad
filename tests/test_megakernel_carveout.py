"""Row 47 on the CPU (megakernel/NOTES.md "Row 46b measured"; MegakernelDecoder(smem_carveout=N), benchmarks/decode.py
mk_carve44 / mk_carve0): the rows, and bad carve-outs refused before any build or GPU work."""
import pytest

from benchmarks.decode import variant_rows


def test_the_rows():
    rows = variant_rows()
    assert rows["mk_carve44"] == {"smem_carveout": 44} and rows["mk_carve0"] == {"smem_carveout": 0}


@pytest.mark.parametrize("bad", [-1, 101, 50.0, "44"])
def test_bad_carveouts_are_refused_before_any_gpu_work(bad, monkeypatch):
    from megakernel import runtime
    from tinyllama.config import get_config
    from tinyllama.weights import random_weights

    monkeypatch.setattr(runtime, "build", lambda *a, **k: pytest.fail("built despite a bad carve-out"))
    weights = random_weights(get_config("tiny"), seed=0, device="cpu")
    with pytest.raises(ValueError, match=r"smem_carveout must be None or an int percent in \[0, 100\], got"):
        runtime.MegakernelDecoder(weights, smem_carveout=bad)


def test_the_module_refuses_a_bad_percent_without_a_driver_call():
    from argus_rt.launch import CubinModule

    module = object.__new__(CubinModule)  # no GPU: the check comes before the driver
    with pytest.raises(ValueError, match="carve-out must be an int percent"):
        module.set_preferred_carveout("k", 150)
