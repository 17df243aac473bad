"""Row 25 (megakernel/NOTES.md): the default's MK_VEC_BATCH (load_vector issues all of a thread's loads
before its stores; mk_vecserial is the serial loop before it) and the detail regions that split Down's gemm (down_vector, down_weights).
On the CPU: the row is build flags only, the timeline keeps a split Down ticket a Down ticket, and with nvcc and
nvdisasm the SASS property the row tests on the GPU (the default's load_vector has one load in flight before its
first store, the default's VEC_SLOTS with no branch between them), no new spills, the timed (mode 0) binaries
unchanged by the detail flag, and the split only in detail trace builds. GPU: tests/test_megakernel_fusions_gpu.py
(FUSION_K=vecbatch: mk_vecserial bit for bit equal to the default)."""
import re
import struct
from pathlib import Path

import numpy as np

from argus_rt.trace.intervals import INTERVAL_DTYPE
from benchmarks.decode import DETAIL, DOWN_PLAIN, VEC_SERIAL, variant_rows
from megakernel import timeline
from megakernel.dag import TileShape
from megakernel.regions import REGION_LEAVES, coordinate, region_tree
from megakernel.runtime import kernel_limits, option_flags
from toolchain import megakernel_builds, needs_nvcc, skip_without_tools  # noqa: F401 (megakernel_builds: the builds fixture)

SPLIT = ("decode/gemm/down_vector", "decode/gemm/down_weights")


def test_the_row_is_build_flags_and_the_split_is_a_detail_region():
    assert variant_rows()["mk_vecserial"] == {"build_flags": VEC_SERIAL + DETAIL}
    option_flags(TileShape(), VEC_SERIAL + DETAIL)  # no flag the tile shape owns
    names = {r.name for r in region_tree()}
    assert set(SPLIT) <= names
    assert "gemm" in REGION_LEAVES and not any(leaf.startswith("down_") for leaf in REGION_LEAVES)
    assert kernel_limits()["VEC_SLOTS"] * 4 * kernel_limits()["THREADS"] >= 5632  # TinyLlama's ffn in one batch


def test_a_split_down_ticket_stays_a_down_ticket():
    ids = {1: "decode/core_loop", 2: "decode/gemm", 3: SPLIT[0], 4: SPLIT[1]}
    spec = [(1, 0, 100), (2, 100, 1000), (3, 105, 305), (4, 305, 995)]  # (region, start, end), CTA 1, warp 0
    rows = np.zeros(len(spec), dtype=INTERVAL_DTYPE)
    for i, (rid, start, end) in enumerate(spec):
        rows[i]["cta"], rows[i]["region_id"], rows[i]["coord"] = 1, rid, coordinate(7, 3)
        rows[i]["depth"] = ids[rid].count("/") - 1
        rows[i]["start"], rows[i]["end"], rows[i]["duration"] = start, end, end - start
    (t,) = timeline.tickets(rows, ids, n_layers=22)
    assert t["op"] == "down" and t["end"] == 1000
    assert t["regions"] == {"gemm": 900, "gemm/down_vector": 200, "gemm/down_weights": 690}
    s = timeline.summary(timeline.phase_table([t]))
    assert "gemm/down_vector 0.20" in timeline.format_summary(s)


def _load_vector_batch(cubin) -> tuple[int, int, int]:
    """(loads, loads before the first shared store, branches among those loads) of load_vector's SASS."""
    from megakernel import sass_diff

    _, fn = sass_diff.find_function(sass_diff.functions(sass_diff.disassembly(cubin)), "load_vector")
    loads = [i for i, line in enumerate(fn) if re.search(r"\bLDG\.", line)]
    first_store = next(i for i, line in enumerate(fn) if re.search(r"\bSTS\.", line))
    before = [i for i in loads if i < first_store]
    branches = sum(1 for i, line in enumerate(fn) if "BRA" in line and before and before[0] < i < before[-1])
    return len(loads), len(before), branches


@needs_nvcc
def test_vecbatch_issues_all_its_loads_before_a_store(builds):
    """Row 25's property on the Down it was measured with (gemv_tile, -DMK_DOWN_PIECES=0); then the default's."""
    skip_without_tools("nvdisasm")
    serial = builds(0, VEC_SERIAL + DETAIL + DOWN_PLAIN)
    _, serial_before, _ = _load_vector_batch(serial.cubin)
    assert serial_before == 1  # the remainder loop: one load, then its store (5-6 trips at ffn 5632)
    r = builds(0, DOWN_PLAIN)
    loads, before, branches = _load_vector_batch(r.cubin)
    assert before == kernel_limits()["VEC_SLOTS"] and branches == 0
    assert r.spill_bytes() == serial.spill_bytes() and r.registers() <= 128, r.ptxas_log
    assert re.search(r"load_vector\S*\n\s+0 bytes stack frame, 0 bytes spill stores", r.ptxas_log), r.ptxas_log
    # Row 36's default (Down pieces, nvcc 13.0) stored the first chunk after 4 of load_vector's VEC_SLOTS loads (NOTES.md
    # "Row 36 measured": a lever, not a fault); row 55's default (session 21) has all VEC_SLOTS before the first store
    # again, and its control (-DMK_TAIL_LOADS=0, on the kernel it was measured with: row 58's loop combine) still 4
    d = builds(0)
    d_loads, d_before, d_branches = _load_vector_batch(d.cubin)
    assert (d_loads, d_branches) == (loads, 0) and d_before == kernel_limits()["VEC_SLOTS"]
    c_loads, c_before, c_branches = _load_vector_batch(builds(0, ("-DMK_TAIL_LOADS=0", "-DMK_COMBINE_AHEAD=0")).cubin)
    assert (c_loads, c_branches) == (loads, 0) and c_before == 4
    assert re.search(r"load_vector\S*\n\s+0 bytes stack frame, 0 bytes spill stores", d.ptxas_log), d.ptxas_log


@needs_nvcc
def test_detail_flag_leaves_the_timed_binary_and_splits_only_trace_builds(builds):
    skip_without_tools("cuobjdump")
    from megakernel import sass_diff

    def sass(mode, flags=()):
        return sass_diff.normalized(sass_diff.sass_text(builds(mode, flags).cubin))

    assert sass(0, DETAIL) == sass(0) and sass(0, VEC_SERIAL + DETAIL) == sass(0, VEC_SERIAL)
    # a marker's region ID is a 32-bit immediate: its little-endian bytes lie in the instruction words
    ids = [struct.pack("<I", r.id) for r in region_tree() if r.name in SPLIT]
    assert len(ids) == 2
    trace, detail = (Path(builds(2, flags).cubin).read_bytes() for flags in ((), DETAIL))
    assert all(i not in trace for i in ids) and all(i in detail for i in ids)
