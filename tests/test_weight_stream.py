"""benchmarks/weight_stream.py and csrc/megakernel/bench/weight_stream.cu: the probe paths' code (the bulk probes
copy with the copy engine, the load probes do not), and on a GPU each probe path's chase checked against its ring,
unloaded and beside streaming CTAs, with the streamed GEMV checked against torch."""
from __future__ import annotations

import re

import pytest

from benchmarks import weight_stream as ws
from megakernel.build import bench_source
from toolchain import needs_nvcc, skip_without_tools


def test_probe_kinds_match_the_kernel():
    text = bench_source("weight_stream").read_text()
    m = re.search(r"enum ProbeKind \{ ([^}]*) \};", text)
    assert m
    kinds = {name.strip(): int(value) for name, value in (e.split("=") for e in m.group(1).split(","))}
    assert kinds == {f"PROBE_{k.upper()}": v for k, v in ws.PROBES.items()}
    assert f"constexpr int VEC_FLOATS = {ws.VEC_FLOATS};" in text


@needs_nvcc
def test_bulk_probe_uses_the_copy_engine_and_keeps_the_streamers_shared_memory():
    import subprocess

    from argus_rt.tools import find_tool

    skip_without_tools("cuobjdump")
    cubin = ws.build_cubin()
    cuobjdump = str(find_tool("cuobjdump"))
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    for name, _ in ws.KERNELS.values():
        body = sass.split(f"Function : {name}")[1].split("Function :")[0]
        assert "UBLKCP" in body and "SYNCS.ARRIVE.TRANS64" in body  # the bulk probes' copy and its barrier
    res = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    smem = {m.group(1): int(m.group(2)) for m in re.finditer(r"Function (\w+):.*?SHARED:(\d+)", res, re.S)}
    # the probe borrows the streaming blocks' activation buffer: only its two mbarriers and flag are added (cuobjdump
    # counts the 1 KiB sm_90 reserves per CTA)
    reserved, probe_own = 1024, 128
    assert smem["stream_plain"] <= reserved + 8192 * 4 + probe_own
    assert smem["stream_ring_copy"] <= reserved + 2048 * 4 + 2 * 16 * 8 + probe_own


@pytest.fixture(scope="module")
def bench():
    import torch

    from argus_rt.launch import CubinModule

    return ws.Bench(torch, CubinModule.load(ws.build_cubin()))


@pytest.mark.gpu
@pytest.mark.parametrize("probe", list(ws.PROBES))
def test_probe_chases_its_ring_unloaded(bench, probe):
    res = bench.launch("plain", 0, 16, 0, min_hops=256, probe=probe)  # launch() checks the final ring indices
    assert res["l2_hop_ns"] > 0
    assert (res["dram_hop_ns"] is None) == probe.startswith("vec")


@pytest.mark.gpu
@pytest.mark.parametrize("probe", list(ws.PROBES))
@pytest.mark.parametrize("mode,pages", [("plain", 0), ("ring", 4)])
def test_probe_beside_streaming_ctas(bench, probe, mode, pages):
    res = bench.launch(mode, 32, 16, pages, rows_total=32768, probe=probe)
    assert res["rel_err"] < ws.TOLERANCE and res["tb_s"] > 0 and res["l2_hop_ns"] > 0
