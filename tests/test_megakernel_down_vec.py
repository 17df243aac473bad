"""Row 41 (megakernel/NOTES.md "Ready: row 41"): Down's activation load back to one L2 round trip in the pieces build.
MK_DOWN_VEC=1 (benchmarks/decode.py mk_down_vec: DEFAULT_TILES + the flag) puts a __syncwarp() between load_vector's
VEC_SLOTS loads and its stores (csrc/megakernel/gemv.cuh, MK_VEC_BATCH's load_vector); row 36's default timed build
(nvcc 13.0) stores the first chunk after 4 of the 6 loads, so the last 2 wait for the first to return. On the CPU:
the rows, the default cubin unchanged with the flag unset or 0 (modes 0 and 2), the SASS property (all VEC_SLOTS
loads before the first shared store, no branch between them, in the timed and the trace build), the __syncwarp's
cost (no WARPSYNC or barrier added to load_vector; nothing else in the kernel changes), and registers / spills equal to
the default's. GPU: tests/test_megakernel_fusions_gpu.py, the tests named *down_vec* (FUSION_K=down_vec)."""
import re

import pytest

from benchmarks.decode import DETAIL, DOWN_VEC, variant_rows
from megakernel.dag import DEFAULT_TILES
from megakernel.runtime import kernel_limits, option_flags
from toolchain import cubin_sha256, megakernel_builds, needs_nvcc, skip_without_tools  # noqa: F401 (the builds fixture)


def test_the_rows_are_the_default_plus_the_flag():
    assert DOWN_VEC == ("-DMK_DOWN_VEC=1",)
    assert variant_rows()["mk_down_vec"] == {"tiles": DEFAULT_TILES, "build_flags": DOWN_VEC}
    assert variant_rows()["mk_down_vec_detail"] == {"tiles": DEFAULT_TILES, "build_flags": DOWN_VEC + DETAIL}
    option_flags(DEFAULT_TILES, DOWN_VEC + DETAIL)  # no flag the tile shape owns


def _load_vector(cubin) -> list[str]:
    from megakernel import sass_diff

    return sass_diff.find_function(sass_diff.functions(sass_diff.disassembly(cubin)), "load_vector")[1]


def _batch(fn: list[str]) -> tuple[int, int, int]:
    """(loads, loads before the first shared store, branches among those loads) of load_vector's SASS."""
    loads = [i for i, line in enumerate(fn) if re.search(r"\bLDG\.", line)]
    first_store = next(i for i, line in enumerate(fn) if re.search(r"\bSTS\.", line))
    before = [i for i in loads if i < first_store]
    branches = sum(1 for i, line in enumerate(fn) if "BRA" in line and before and before[0] < i < before[-1])
    return len(loads), len(before), branches


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_default_cubin_is_unchanged_without_the_flag(builds, mode):
    assert cubin_sha256(builds(mode, ("-DMK_DOWN_VEC=0",))) == cubin_sha256(builds(mode))
    assert cubin_sha256(builds(mode, DOWN_VEC)) != cubin_sha256(builds(mode))


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_all_of_downs_loads_before_the_first_store(builds, mode):
    """The timed build (mode 0) is the one the flag changes: the default's stores after 4 of its VEC_SLOTS loads (as
    tests/test_megakernel_vecbatch.py pins); the trace build (mode 2) already keeps all VEC_SLOTS in the default, so
    a timeline cannot show the row (NOTES.md "Ready: row 41"). With the flag both builds keep all VEC_SLOTS."""
    skip_without_tools("nvdisasm")
    slots = kernel_limits()["VEC_SLOTS"]
    d_loads, d_before, _ = _batch(_load_vector(builds(mode).cubin))
    loads, before, branches = _batch(_load_vector(builds(mode, DOWN_VEC).cubin))
    assert (loads, before, branches) == (d_loads, slots, 0)
    assert d_before == (4 if mode == 0 else slots)


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_syncwarp_adds_no_barrier_and_changes_nothing_else(builds, mode):
    """In the timed build (mode 0) ptxas drops the __syncwarp of a converged warp (a NOP is left where it stood) but
    keeps its order: load_vector has one instruction more than the default's and the same barriers. The trace build
    (mode 2) keeps a divergence test instead (UMOV + BRA.DIV + NOP on the path taken, a WARPSYNC.COLLECTIVE block
    after the RET that a converged warp never reaches). Every other function keeps its instruction count; in mode 0
    the kernel function itself is the default's instruction for instruction, registers, immediates and labels aside
    (its call into load_vector passes other registers). (Mode 2's scheduling moves more: equivalent MOV / IMAD.MOV
    picks and orders, the same count.)"""
    skip_without_tools("nvdisasm")
    from megakernel import sass_diff

    d = sass_diff.functions(sass_diff.disassembly(builds(mode).cubin))
    v = sass_diff.functions(sass_diff.disassembly(builds(mode, DOWN_VEC).cubin))
    assert set(d) == set(v)
    name, fn = sass_diff.find_function(v, "load_vector")

    def taken(lines):  # the path a converged warp runs: up to the RET
        return lines[: next(i for i, line in enumerate(lines) if line.startswith("RET")) + 1]

    sync = re.compile(r"\b(WARPSYNC|BAR|BSSY|BSYNC)\b")
    assert [line for line in taken(fn) if sync.search(line)] == [line for line in d[name] if sync.search(line)]
    assert taken(d[name]) == d[name]
    added = len(taken(fn)) - len(d[name])
    assert added == (1 if mode == 0 else 3), added
    if mode == 0:
        assert len(fn) == len(d[name]) + 1 and sum("NOP" in x for x in fn) == sum("NOP" in x for x in d[name]) + 1
    else:
        assert sum("BRA.DIV" in x for x in fn) == 1 + sum("BRA.DIV" in x for x in d[name])
    assert {n: len(d[n]) for n in d if n != name} == {n: len(v[n]) for n in v if n != name}
    if mode == 0:
        def ops(lines):
            return [re.sub(r"\.L_x_\d+|\bU?R\d+\b|0x[0-9a-f]+", "#", line) for line in lines]

        assert ops(d["argus_megakernel"]) == ops(v["argus_megakernel"])


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_registers_and_spills_are_the_defaults(builds, mode):
    d, v = builds(mode), builds(mode, DOWN_VEC)
    assert v.registers() == d.registers() == 128, v.ptxas_log
    assert v.spill_bytes() == d.spill_bytes(), v.ptxas_log
    assert re.search(r"load_vector\S*\n\s+0 bytes stack frame, 0 bytes spill stores", v.ptxas_log), v.ptxas_log


@needs_nvcc
def test_the_flag_needs_the_batched_load_vector(builds):
    from megakernel.build import BuildError

    with pytest.raises(BuildError, match="MK_DOWN_VEC changes MK_VEC_BATCH"):
        builds(0, DOWN_VEC + ("-DMK_VEC_BATCH=0",))
