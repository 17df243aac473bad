"""Row 33 (megakernel/NOTES.md "Ready: row 33"): MK_COMBINE_V2, O-proj's attention combine (load_attention_combined)
with each thread's outputs and their heads' (max, sum) pairs loaded in one round trip per 4 splits and folded by an
online rescale, instead of the weights by one thread per head, a CTA barrier and then the sum.
On the CPU: the rows are build flags only; with nvcc and nvdisasm the SASS facts the row is built on (the default's
barrier between its weights and its sum, the variant's one barrier after everything and each path's loads issued
together before any arithmetic), no spills in the function and none added to the kernel, MK_COMBINE_V2=0 the default
cubin, and the last-arrival builds unchanged by the flag. GPU: tests/test_megakernel_fusions_gpu.py -k combine_v2."""
import hashlib
import re
from pathlib import Path

import pytest

from benchmarks.decode import COMBINE_V2, DETAIL, variant_rows
from megakernel.dag import TileShape
from megakernel.runtime import option_flags
from toolchain import megakernel_builds, needs_nvcc, skip_without_tools  # noqa: F401 (megakernel_builds: the builds fixture)

FUNCTION = "_ZN2mk23load_attention_combinedERK6ParamsiiPf"
BAR, LDG, FFMA = r"\bBAR\.SYNC\b", r"\bLDG\.", r"\bFFMA\b"
ARITH = r"\b(FFMA|FMUL|FADD|FMNMX|MUFU|SHFL)"  # a use of a loaded value (address arithmetic is integer)


def test_the_rows_are_build_flags():
    rows = variant_rows()
    assert COMBINE_V2 == ("-DMK_COMBINE_V2=1",)
    assert rows["mk_combine_v2"] == {"build_flags": COMBINE_V2}
    assert rows["mk_combine_v2_detail"] == {"build_flags": COMBINE_V2 + DETAIL}
    option_flags(TileShape(), COMBINE_V2 + DETAIL)  # no flag the tile shape owns


def _function(cubin) -> list[str]:
    from megakernel import sass_diff

    return sass_diff.functions(sass_diff.disassembly(cubin))[FUNCTION]


def _lines(fn: list[str], pattern: str) -> list[int]:
    return [i for i, line in enumerate(fn) if re.search(pattern, line)]


def _load_groups(fn: list[str]) -> list[list[int]]:
    """The function's global loads in runs with no arithmetic on loaded values between them (in static order)."""
    arith = set(_lines(fn, ARITH))
    groups: list[list[int]] = []
    for i in _lines(fn, LDG):
        if groups and not any(a in arith for a in range(groups[-1][-1], i)):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


@needs_nvcc
def test_default_combine_is_two_trips_of_weights_a_barrier_then_the_sum(builds):
    """The reading the row started from: warp 0's (max, sum) loads, one of them only after the max (a second trip),
    a barrier, then the sum's loads: three dependent round trips and two barriers."""
    skip_without_tools("nvdisasm")
    fn = _function(builds(0).cubin)
    bars = _lines(fn, BAR)
    assert len(bars) == 2 and "RET" in fn[bars[-1] + 1]  # the weights' barrier, and the one publishing xs
    groups = _load_groups(fn)
    assert len(groups) >= 3
    assert len(groups[0]) == 15 and len(groups[1]) == 1 and groups[1][0] < bars[0]  # m x 8, l x 7, then l[0]
    assert all(g[0] > bars[0] for g in groups[2:])  # the sum's loads come after the barrier


@needs_nvcc
def test_variant_is_one_barrier_after_each_paths_loads_in_one_group(builds):
    """Both paths (head_dim % 32 == 0: 32 output loads + the lane's (max, sum); else 8 + 8 pairs per split) issue
    every load of a chunk before any arithmetic, and the only barrier is the one before the return."""
    skip_without_tools("nvdisasm")
    fn = _function(builds(0, COMBINE_V2).cubin)
    bars = _lines(fn, BAR)
    assert len(bars) == 1 and "RET" in fn[bars[0] + 1], bars  # (the shuffles' divergent copies follow the RET)
    groups = _load_groups(fn)
    sizes = sorted(len(g) for g in groups)
    assert sizes == [16, 33], sizes  # the per-lane path (C = 1) and the warp path (C = 4)
    warp = max(groups, key=len)
    assert sum("LDG.E.64" in fn[i] for i in warp) == 1  # one (max, sum) pair per lane, shared by shuffles
    assert min(i for i in _lines(fn, r"\bSHFL\b")) > warp[-1]  # the pairs are read after every load is issued
    assert not _lines(fn, r"\bSTL\b")


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_variant_adds_no_spills(builds, mode):
    """No spill in the function; the kernel's frame the default's in the timed build (mode 0), within 8 B of spill stores in
    the trace build (mode 2)."""

    def props(log: str, name: str) -> str:
        m = re.search(rf"Function properties for {name}\n\s+(.*)", log)
        assert m, log
        return m.group(1)

    default, variant = builds(mode), builds(mode, COMBINE_V2)
    assert variant.registers() <= 128, variant.ptxas_log
    assert props(variant.ptxas_log, FUNCTION) == "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
    if mode == 0:  # the timed build: the default's frame exactly
        assert props(variant.ptxas_log, "argus_megakernel") == props(default.ptxas_log, "argus_megakernel")
    else:  # the trace build (since the shared-cursor default, 4f4087f): 24 vs 16 B of spill stores; its timeline
        # pieces read that much high, so it is bounded, not ignored
        def stores(log):
            return int(re.search(r"(\d+) bytes spill stores", props(log, "argus_megakernel")).group(1))

        assert stores(variant.ptxas_log) <= stores(default.ptxas_log) + 8, variant.ptxas_log


def _sha(build) -> str:
    return hashlib.sha256(Path(build.cubin).read_bytes()).hexdigest()


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_flag_off_is_the_default_cubin(builds, mode):
    assert _sha(builds(mode, ("-DMK_COMBINE_V2=0",))) == _sha(builds(mode))
    assert _sha(builds(mode, COMBINE_V2)) != _sha(builds(mode))


@needs_nvcc
@pytest.mark.parametrize("last", [1, 2])
def test_last_arrival_builds_ignore_the_flag(builds, last):
    """MK_LAST_COMBINE=1 has no O-proj combine; =2 keeps the weights-then-sum one in its O-proj form, which the group
    combine (combine_group_t) equals bit for bit."""
    flags = (f"-DMK_LAST_COMBINE={last}",)
    assert _sha(builds(0, flags + COMBINE_V2)) == _sha(builds(0, flags))
