"""benchmarks/layer_stream.py and csrc/megakernel/bench/layer_stream.cu: the plan's pure functions (tile lists,
pages, bytes per layer at TinyLlama's shapes), the kernel's phase table against the script's, the build and its
SASS (the ring kernel bulk-copies, the register kernel does not), and on a GPU a 2-layer launch of each mode
checked against torch."""
from __future__ import annotations

import re

import numpy as np
import pytest

from benchmarks import layer_stream as ls
from megakernel.build import bench_source
from toolchain import needs_nvcc, skip_without_tools

BY_NAME = {p.name: p for p in ls.PHASES}


def test_phase_table_matches_the_kernel():
    text = bench_source("layer_stream").read_text()
    table = {}
    for name in ("ROWS", "KDIM", "TILE_ROWS", "TILES", "OUT_OFF"):
        m = re.search(rf"constexpr int {name}\(int p\) {{ return pick\(p, ([\d, ]+)\); }}", text)
        assert m, name
        table[name] = [int(v) for v in m.group(1).split(",")]
    assert table["ROWS"] == [p.rows for p in ls.PHASES]
    assert table["KDIM"] == [p.k for p in ls.PHASES]
    assert table["TILE_ROWS"] == [p.tile_rows for p in ls.PHASES]
    assert table["TILES"] == [p.tiles for p in ls.PHASES]
    assert table["OUT_OFF"] == list(ls.OUT_OFF)
    assert f"constexpr int OUT_PER_LAYER = {ls.OUT_PER_LAYER};" in text


def test_layer_bytes_at_tinyllama_shapes():
    assert ls.layer_weight_bytes() == 2 * 2048 * (2560 + 2048 + 11264) + 2 * 2048 * 5632 == 88_080_384
    assert [p.tiles * p.tile_rows for p in ls.PHASES] == [p.rows for p in ls.PHASES]  # whole tiles


@pytest.mark.parametrize("workers", [132, 263, 7])
def test_tile_lists_partition_each_phase(workers):
    for p in ls.PHASES:
        lists = [ls.worker_tiles(p, w, workers) for w in range(workers)]
        assert sorted(t for tiles in lists for t in tiles) == list(range(p.tiles))
        assert all(t % workers == w for w, tiles in enumerate(lists) for t in tiles)
    plan = ls.worker_plan(3, workers, 2)
    assert plan[0] == (0, "qkv", 3) and plan[-1] == (1, "down", max(ls.worker_tiles(BY_NAME["down"], 3, workers)))
    assert [layer for layer, _, _ in plan] == sorted(layer for layer, _, _ in plan)  # layer by layer


def test_pages_hold_whole_rows():
    assert ls.tile_pages(BY_NAME["qkv"], 16384) == [16384] * 4
    assert ls.tile_pages(BY_NAME["gu"], 16384) == [16384] * 11
    assert ls.tile_pages(BY_NAME["gu"], 32768) == [32768] * 5 + [16384]
    assert ls.tile_pages(BY_NAME["down"], 16384) == [11264] * 8  # one 11 KiB row per page
    assert ls.tile_pages(BY_NAME["down"], 32768) == [22528] * 4
    assert ls.tile_pages(BY_NAME["attn"], 16384) == []


@pytest.mark.parametrize("workers,page_bytes", [(132, 16384), (132, 32768), (263, 16384)])
def test_every_weight_byte_is_paged_once_per_layer(workers, page_bytes):
    assert sum(ls.worker_bytes(w, workers, page_bytes) for w in range(workers)) == ls.layer_weight_bytes()


def test_default_configs_and_refusals():
    rows = ls.configs(list(ls.MODES), 132)
    assert [(c.label, c.workers, c.pages, c.page_kib) for c in rows] == [
        ("regs", 263, 0, 0), ("ring", 132, 4, 16), ("ring", 132, 8, 16), ("ring", 132, 13, 16),
        ("ring", 132, 6, 32), ("ring16", 132, 8, 16), ("ring16", 132, 13, 16), ("rows", 132, 8, 16),
        ("rows", 132, 12, 16), ("rows", 132, 6, 32), ("rows", 132, 16, 12), ("mma", 132, 8, 16),
        ("mma", 132, 12, 16), ("regs+stamps", 263, 0, 0), ("regs-stream", 263, 0, 0), ("ring-stream", 132, 13, 16),
        ("ring16-stream", 132, 13, 16), ("rows-stream", 132, 12, 16), ("rows-stream", 132, 16, 12), ("mma-stream", 132, 12, 16)]
    with pytest.raises(ValueError, match="unknown mode"):
        ls.configs(["ring2"], 132)
    with pytest.raises(ValueError, match="exceed"):
        ls.check_config(ls.Config("ring", 132, 14, 16))  # 224 KiB + the 4 KiB static allowance > 227 KiB
    with pytest.raises(ValueError, match="exceed"):
        ls.check_config(ls.Config("rows", 132, 13, 16))  # 208 KiB + its 26 KiB (activations in shared memory)
    with pytest.raises(ValueError, match="mma pages must be 16 KiB"):
        ls.check_config(ls.Config("mma", 132, 6, 32))
    with pytest.raises(ValueError, match="holds no 11264-byte Down row"):
        ls.check_config(ls.Config("ring16", 132, 8, 8))
    with pytest.raises(ValueError, match=r"\[1, 32\]"):
        ls.check_config(ls.Config("ring", 132, 0, 16))


def test_phase_times_run_from_the_previous_phase_end():
    ends = [[110, 120, 130, 140, 150], [160, 180, 200, 220, 250]]  # ns, [layers, phases]
    t = ls.phase_times(100, ends)
    assert t["phase_us"] == [[0.01] * 5, [0.01, 0.02, 0.02, 0.02, 0.03]]
    assert t["layer_us"] == pytest.approx([0.05, 0.1])


def test_handoff_parts_split_each_tile_from_the_previous_phase_end():
    layers, nphase = 2, len(ls.PHASES)
    ends = np.zeros((2, layers, nphase), dtype=np.int64)  # [workers, layers, phases], ns
    stamps = np.zeros((2, layers, nphase, 2), dtype=np.int64)
    t = 1000
    for layer in range(layers):
        for i in range(nphase):
            for w in range(2):
                if i == 1 and w == 1:
                    continue  # worker 1 has no ATTN tile
                stamps[w, layer, i] = (t + 100 + 10 * w, t + 300 + 10 * w)  # seen, loaded
                ends[w, layer, i] = t + 1000 + 100 * w
            t = ends[:, layer, i].max()
    parts = ls.handoff_parts(ends, stamps)
    assert parts["qkv"] == {"propagate": 0.105, "activations": 0.2, "stream": 0.745}  # medians of workers 0 and 1
    assert parts["attn"] == {"propagate": 0.1, "activations": 0.2, "stream": 0.7}  # worker 0 only
    shared = ls.handoff_parts(ends, stamps, sm=[5, 5])  # both workers on SM 5: every GEMV tile shares its SM
    assert shared["qkv"]["stream_sm2"] == 0.745 and shared["qkv"]["stream_sm1"] is None
    assert shared["attn"]["stream_sm1"] == 0.7  # ATTN: worker 0 alone on it
    apart = ls.handoff_parts(ends, stamps, sm=[5, 6])
    assert apart["qkv"]["stream_sm1"] == 0.745 and apart["qkv"]["stream_sm2"] is None
    with pytest.raises(ValueError, match="layer_regs' only"):
        ls.check_config(ls.Config("ring", 132, 8, 16, stamps=True))


def test_steady_state_drops_the_first_layer():
    assert ls.steady_us_per_layer([50.0, 30.0, 32.0]) == 31.0
    assert ls.steady_us_per_layer([40.0]) == 40.0


@pytest.fixture(scope="module")
def sass():
    """{kernel name: its SASS} of the benchmark's cubin."""
    from megakernel import sass_diff

    skip_without_tools("cuobjdump")
    text = sass_diff.sass_text(ls.build_cubin())
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\w+)", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name:
            out[name].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


@needs_nvcc
def test_ring_kernels_bulk_copy_and_regs_kernel_does_not(sass):
    assert {"layer_ring", "layer_ring16", "layer_rows", "layer_mma", "layer_regs"} <= set(sass)
    assert "UBLKCP" not in sass["layer_regs"] and "SYNCS" not in sass["layer_regs"]
    # the stamps are compiled into their own kernel only: layer_regs reads no %globaltimer but its tile-end stamp
    assert sass["layer_regs"].count("GLOBALTIMER") < sass["layer_regs_stamps"].count("GLOBALTIMER")
    assert "LDG.E.NA.128.CONSTANT" in sass["layer_regs"]  # its weights: register loads (ld_weights)
    assert "HMMA.16816.F32.BF16" in sass["layer_mma"] and "HMMA" not in sass["layer_rows"]
    for ring in ("layer_ring", "layer_ring16", "layer_rows", "layer_mma"):
        assert "UBLKCP" in sass[ring] and "SYNCS.ARRIVE.TRANS64" in sass[ring]
        assert "LDG.E.NA.128.CONSTANT" not in sass[ring]  # the ring's consumers read shared memory only


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [ls.Config("regs", 0), ls.Config("ring", 0, 13, 16), ls.Config("ring", 0, 6, 32),
                                 ls.Config("ring", 0, 2, 16), ls.Config("regs", 0, wait=False),
                                 ls.Config("ring", 0, 4, 16, wait=False), ls.Config("ring16", 0, 13, 16),
                                 ls.Config("ring16", 0, 6, 32), ls.Config("ring16", 0, 3, 16),
                                 ls.Config("ring16", 0, 4, 16, wait=False), ls.Config("rows", 0, 12, 16),
                                 ls.Config("rows", 0, 6, 32), ls.Config("rows", 0, 2, 16),
                                 ls.Config("rows", 0, 4, 16, wait=False), ls.Config("mma", 0, 12, 16),
                                 ls.Config("mma", 0, 2, 16), ls.Config("mma", 0, 4, 16, wait=False),
                                 ls.Config("regs", 0, stamps=True)],
                         ids=["regs", "ring13x16", "ring6x32", "ring2x16", "regs-stream", "ring-stream", "ring16-13x16",
                              "ring16-6x32", "ring16-3x16", "ring16-stream", "rows12x16", "rows6x32", "rows2x16",
                              "rows-stream", "mma12x16", "mma2x16", "mma-stream", "regs-stamps"])
def test_two_layer_launch_matches_torch(cfg):
    import dataclasses

    import torch

    from argus_rt.launch import CubinModule

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = dataclasses.replace(cfg, workers=2 * sms - 1 if cfg.mode == "regs" else sms)
    bench = ls.LayerStream(torch, CubinModule.load(ls.build_cubin()), layers=2, attn_ns=3000)
    res = bench.launch(cfg)
    assert bench.rel_err(check_attn=cfg.wait) < ls.TOLERANCE
    assert len(res["layer_us"]) == 2 and all(v > 0 for v in res["layer_us"]) and res["span_ns"] > 0
    if cfg.wait:  # each layer waits for 3 us of attention at least
        assert min(res["layer_us"]) > 3.0
    if cfg.stamps:  # layer 1's hand-offs: each part took time, attention's tiles spin >= 3 us after their wait
        parts = res["handoff_us"]
        assert all(p[k] is not None and p[k] >= 0 for p in parts.values() for k in ("propagate", "activations", "stream"))
        assert all(p["stream_sm1"] is not None or p["stream_sm2"] is not None for p in parts.values())
        assert parts["attn"]["stream"] > 3.0 and parts["gu"]["activations"] > 0 and parts["down"]["propagate"] > 0


@needs_nvcc
def test_ring_static_shared_memory_fits_its_allowance():
    """The pages' budget (check_config) leaves each paged kernel's static allowance for its own shared memory."""
    import subprocess

    from argus_rt.tools import find_tool

    skip_without_tools("cuobjdump")
    text = subprocess.run([str(find_tool("cuobjdump")), "-res-usage", str(ls.build_cubin())], capture_output=True,
                          text=True, check=True).stdout
    for mode in ls.PAGED:
        name, _, allowance = ls.KERNELS[mode]
        m = re.search(rf"Function {name}:\s+REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
        assert m, text
        assert int(m.group(3)) <= allowance and int(m.group(2)) == 0 and int(m.group(4)) == 0
    # the register kernel, the anchor, spills nothing (a stamps test inside it once made ptxas spill: 0.6 us a layer)
    m = re.search(r"Function layer_regs:\s+REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    assert m and int(m.group(2)) == 0 and int(m.group(4)) == 0, text
