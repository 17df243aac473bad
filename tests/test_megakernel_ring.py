"""The weight page ring (csrc/megakernel/ring.cuh) on the CPU: its constants agree with the runtime's, a
ring build compiles (with -DMK_DOWN_PIECES=0: the default's Down pieces have no ring path) without changing the
default cubin's flags, and bad settings are refused."""
import re

import pytest

from megakernel.build import CSRC
from megakernel.runtime import RING_PAGE_BYTES, kernel_limits, ring_smem_bytes


def test_page_size_agrees_with_the_kernel():
    text = (CSRC / "megakernel" / "ring.cuh").read_text()
    m = re.search(r"constexpr unsigned RING_PAGE = (\d+)u \* (\d+)u;", text)
    assert m and int(m.group(1)) * int(m.group(2)) == RING_PAGE_BYTES


def test_ring_shared_memory_fits_two_ctas_per_sm():
    lim = kernel_limits()
    assert ring_smem_bytes(0) == 0
    assert ring_smem_bytes(2) == 2 * RING_PAGE_BYTES + lim["MAX_TILE_ROWS"] * lim["NWARPS"] * 4
    # static Smem (~35 KiB) + 4 pages + partials, twice per SM, under the H100/H200 228 KiB
    assert 2 * (36 * 1024 + ring_smem_bytes(4)) <= 228 * 1024


def test_ring_rows_are_in_the_benchmark():
    from benchmarks.decode import variant_rows

    rows = variant_rows()
    assert {rows[f"mk_ring{n}"]["ring_pages"] for n in (2, 3, 4)} == {2, 3, 4}
    # MK_RING has no Down-pieces path (row 36's default): the ring rows build Down through gemv_tile, 16-row tiles
    for n in (2, 3, 4):
        assert rows[f"mk_ring{n}"]["build_flags"] == ("-DMK_DOWN_PIECES=0",)
        assert rows[f"mk_ring{n}"]["tiles"] == rows["mk_down16"]["tiles"]


@pytest.mark.parametrize("kw", [{"ring_pages": 9}, {"ring_pages": -1}, {"ring_pages": 2, "stage_bytes": 4096},
                                {"ring_pages": 2, "stage_bytes": 4096, "build_flags": ("-DMK_DOWN_PIECES=0",)}])
def test_bad_ring_settings_are_refused_before_any_gpu_work(kw, monkeypatch):
    from megakernel import runtime
    from tinyllama.config import get_config
    from tinyllama.weights import random_weights

    monkeypatch.setattr(runtime, "build", lambda *a, **k: pytest.fail("built despite bad settings"))
    weights = random_weights(get_config("tiny"), seed=0, device="cpu")
    with pytest.raises(ValueError, match="ring_pages must be an int in"):
        runtime.MegakernelDecoder(weights, **kw)


@pytest.mark.parametrize("flags", [(), ("-DMK_DOWN_PIECES=1",), ("-DMK_DOWN_PIECES=2",)], ids=["default", "1", "2"])
def test_ring_pages_need_the_plain_down(flags, monkeypatch):
    """Row 36's default Down pieces have no ring path: ring_pages without -DMK_DOWN_PIECES=0 is refused on the host."""
    from megakernel import runtime
    from tinyllama.config import get_config
    from tinyllama.weights import random_weights

    monkeypatch.setattr(runtime, "build", lambda *a, **k: pytest.fail("built despite bad settings"))
    weights = random_weights(get_config("tiny"), seed=0, device="cpu")
    with pytest.raises(ValueError, match="MK_DOWN_PIECES=0"):
        runtime.MegakernelDecoder(weights, ring_pages=2, build_flags=flags)


def test_ring_build_compiles(tmp_path):
    from megakernel.build import BuildError, build

    try:
        r = build(0, build_dir=tmp_path, extra_flags=("-DMK_RING=2", "-DMK_DOWN_PIECES=0"))
    except BuildError as exc:
        pytest.skip(f"no nvcc: {exc}")
    assert r.registers() and r.registers() <= 128
    with pytest.raises(BuildError, match="MK_DOWN_PIECES has no page-ring path"):  # the default's pieces: refused
        build(0, build_dir=tmp_path, extra_flags=("-DMK_RING=2",))
