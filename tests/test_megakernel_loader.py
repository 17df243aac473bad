"""Row 31 on the CPU: the loader warp's page ring (csrc/megakernel/ring.cuh: Loader, -DMK_LOADER=N from
MegakernelDecoder(loader_pages=N)). Its flags, its refusals (before any GPU work), the consumers' barrier macro
(named barrier 1 with the loader, __syncthreads in the default SASS), the loader's bulk copies and mbarrier
releases in the variant's SASS, its registers and its shared memory at 2 and 1 CTAs per SM."""
import re

import pytest

from argus_rt.tools import tool_or_none
from megakernel.build import CSRC
from megakernel.dag import TileShape
from megakernel.runtime import RING_PAGE_BYTES, decoder_flags, kernel_limits, ring_smem_bytes

SMEM_PER_SM = 228 * 1024  # H100 / H200: shared memory per SM (1 KiB of it reserved per CTA)
SMEM_PER_CTA = 227 * 1024


def _build(flags=(), mode=0):
    from megakernel.build import build

    if tool_or_none("nvcc") is None:
        pytest.skip("needs nvcc to compile the megakernel")
    return build(mode, extra_flags=tuple(flags))


def _sass(cubin) -> str:
    from megakernel.sass_diff import sass_text

    if tool_or_none("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    return sass_text(cubin)


def _static_smem(r) -> int:
    return int(re.search(r"(\d+) bytes smem", r.ptxas_log).group(1))


def test_loader_pages_add_one_flag_and_none_at_zero():
    tiles = TileShape()
    assert decoder_flags((), tiles) == ()
    assert decoder_flags((), tiles, loader_pages=4) == ("-DMK_LOADER=4",)
    assert decoder_flags(("-DMK_BLOCKS_PER_SM=1",), tiles, loader_pages=11) == ("-DMK_BLOCKS_PER_SM=1", "-DMK_LOADER=11")


def test_loader_rows_are_in_the_benchmark():
    from benchmarks.decode import ONE_CTA, variant_rows

    rows = variant_rows()
    assert rows["mk_loader4"] == {"loader_pages": 4}
    assert rows["mk_loader_1cta"] == {"loader_pages": 11, "build_flags": ONE_CTA}


@pytest.mark.parametrize("kw, match", [
    ({"loader_pages": 4, "stage_bytes": 4096}, "stage_bytes must be off"),
    ({"loader_pages": 4, "ring_pages": 2}, "ring_pages must be off"),
    ({"loader_pages": 4, "prefetch_ahead": 8}, "prefetch_ahead must be off"),
    ({"loader_pages": 4, "prefetch_window": 1 << 20}, "prefetch_window must be off"),
    ({"loader_pages": 4, "prefetch_own": True}, "prefetch_own must be off"),
    ({"loader_pages": 4, "build_flags": ("-DMK_STATIC_TICKETS=0",)}, "static tickets"),
    ({"build_flags": ("-DMK_LOADER=4",)}, "set by loader_pages"),
    ({"loader_pages": 17}, "loader_pages must be an int in"),
    ({"loader_pages": -1}, "loader_pages must be an int in"),
    ({"loader_pages": True}, "loader_pages must be an int in"),
])
def test_bad_loader_settings_are_refused_before_any_gpu_work(kw, match, monkeypatch):
    from megakernel import runtime
    from tinyllama.config import get_config
    from tinyllama.weights import random_weights

    monkeypatch.setattr(runtime, "build", lambda *a, **k: pytest.fail("built despite bad settings"))
    monkeypatch.setattr(runtime, "DecodeState", None)  # any state on the device would fail first
    weights = random_weights(get_config("tiny"), seed=0, device="cpu")
    with pytest.raises(ValueError, match=match) as info:
        runtime.MegakernelDecoder(weights, **kw)
    assert "\n" not in str(info.value)


def test_only_the_whole_cta_barriers_are_plain_syncthreads_in_the_source():
    """Every consumer barrier goes through MK_SYNC / MK_SYNC_OR / MK_SYNC_COUNT; the three plain ones are the
    kernel's start, the worker's start (the loader warp joins both) and the loader warp's side of the second."""
    code = {}
    for f in sorted((CSRC / "megakernel").glob("*.cu*")):
        text = re.sub(r"//[^\n]*", "", f.read_text())
        text = re.sub(r"#define MK_SYNC[^\n]*", "", text)
        n = len(re.findall(r"__syncthreads\w*\s*\(", text))
        if n:
            code[f.name] = n
    assert code == {"megakernel.cu": 3}, code


def test_default_sass_has_only_barrier_zero():
    sass = _sass(_build().cubin)
    bars = re.findall(r"\bBAR\.(?:SYNC|RED)\.[A-Z_.]*\s+(0x[0-9a-f]+)", sass)
    assert bars and set(bars) == {"0x0"}, sorted(set(bars))
    assert "A1T0" not in sass  # no per-warp page release


def test_loader_sass_has_named_barriers_bulk_copies_and_page_releases():
    default, loader = _sass(_build().cubin), _sass(_build(("-DMK_LOADER=4",)).cubin)
    bars = re.findall(r"\bBAR\.(SYNC|RED\.OR|RED\.POPC)\.DEFER_BLOCKING\s+(0x[0-9a-f]+)(?:,\s*(0x[0-9a-f]+))?", loader)
    zero = [b for b in bars if b[1] == "0x0"]
    named = [b for b in bars if b[1] == "0x1"]
    assert len(zero) == 3, zero  # the kernel's start, the worker's start (consumers and loader warp)
    assert all(b[2] == hex(kernel_limits()["THREADS"]) for b in named), set(named)
    assert {b[0] for b in named} == {"SYNC", "RED.OR", "RED.POPC"}
    assert len(bars) == len(zero) + len(named)
    assert loader.count("UBLKCP") > default.count("UBLKCP")  # the loader's page copy (staging has the other)
    assert re.search(r"SYNCS\.ARRIVE\.TRANS64\.A1T0", loader)  # a consumer warp's release of a page
    assert loader.count("SYNCS.EXCH.64") == default.count("SYNCS.EXCH.64") + 2 * 4  # full + empty per page


def test_loader_registers_fit_two_ctas_of_288_threads():
    r = _build(("-DMK_LOADER=4",))
    threads = kernel_limits()["THREADS"] + 32
    assert r.registers() and r.registers() * threads * 2 <= 65536, r.registers()
    print(f"mk_loader4: {r.registers()} registers, {r.spill_bytes()} B spill stores")


@pytest.mark.parametrize("mode", [0, 2])  # the timed build and the trace build of the timeline
def test_loader_shared_memory_fits_4_pages_at_2_ctas_and_11_at_1(mode):
    static = _static_smem(_build(("-DMK_LOADER=4",), mode))
    assert ring_smem_bytes(4) == 4 * RING_PAGE_BYTES + kernel_limits()["MAX_TILE_ROWS"] * kernel_limits()["NWARPS"] * 4
    assert 2 * (static + ring_smem_bytes(4) + 1024) <= SMEM_PER_SM
    assert 2 * (static + ring_smem_bytes(5) + 1024) > SMEM_PER_SM  # why the row has 4 pages, not 5
    static1 = _static_smem(_build(("-DMK_LOADER=11", "-DMK_BLOCKS_PER_SM=1"), mode))
    assert static1 + ring_smem_bytes(11) <= SMEM_PER_CTA
    assert static1 + ring_smem_bytes(12) > SMEM_PER_CTA


def test_loader_trace_build_compiles():
    r = _build(("-DMK_LOADER=4",), mode=2)
    assert r.registers()


def test_loader_page_size_is_the_rings():
    text = (CSRC / "megakernel" / "ring.cuh").read_text()
    assert re.search(r"constexpr int RING_SLOTS = MK_RING \? MK_RING : MK_LOADER;", text)
    assert re.search(r"static_assert\(MK_LOADER >= 1 && MK_LOADER <= (\d+)", text).group(1) == "16"
