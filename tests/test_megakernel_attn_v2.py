"""Row 32 (megakernel/NOTES.md "Ready: row 32", "Row 32 measured"): MK_ATTN_V2, AttnPartial tiles of 1-2 query heads
with q, K and V issued in one round trip, softmax and PV per lane in registers and one CTA barrier
(attention_partial_v2_t), the default since its H200 run; MK_ATTN_V2=0 (row mk_attn_v1) is the control.
On the CPU: the rows are build flags only; with nvcc and nvdisasm the SASS facts the row is built on (the three-pass
tile's 5 CTA barriers and its q load alone before the first barrier, v2's one barrier and all its global loads before
the first FFMA), no spill stores in v2's functions, the default cubin the same as MK_ATTN_V2=1's, and the 4- and
8-head tiles left as they are. GPU: tests/test_megakernel_fusions_gpu.py -k attn_v."""
import re
import struct
from pathlib import Path

import pytest

from benchmarks.decode import ATTN_V1, DETAIL, variant_rows
from megakernel.dag import TileShape
from megakernel.runtime import option_flags
from toolchain import cubin_sha256, megakernel_builds, needs_nvcc, skip_without_tools  # noqa: F401 (megakernel_builds: the builds fixture)


def test_the_rows_are_build_flags():
    rows = variant_rows()
    assert rows["mk_attn_v1"] == {"build_flags": ATTN_V1}
    assert rows["mk_attn_v1_detail"] == {"build_flags": ATTN_V1 + DETAIL}
    assert "mk_attn_v2" not in rows  # the default now
    option_flags(TileShape(), ATTN_V1 + DETAIL)  # no flag the tile shape owns


def _function(cubin, base: str, heads: int) -> list[str]:
    """SASS lines of the template instance base<heads> (Itanium mangling: <length><name>ILi<heads>E)."""
    from megakernel import sass_diff

    fns = sass_diff.functions(sass_diff.disassembly(cubin))
    hits = [n for n in fns if f"{len(base)}{base}ILi{heads}E" in n]
    assert len(hits) == 1, hits
    return fns[hits[0]]


def _count(fn: list[str], pattern: str) -> int:
    return sum(1 for line in fn if re.search(pattern, line))


def _first(fn: list[str], pattern: str) -> int:
    return next(i for i, line in enumerate(fn) if re.search(pattern, line))


BAR, LDG, FFMA = r"\bBAR\.SYNC\b", r"\bLDG\.", r"\bFFMA\b"


@needs_nvcc
def test_three_pass_tile_is_five_barriers_with_q_alone_before_the_first(builds):
    """The reading the row started from (the control's tile): q's load is the only global load before the first
    barrier."""
    skip_without_tools("nvdisasm")
    fn = _function(builds(0, ATTN_V1).cubin, "attention_partial_t", 2)
    assert _count(fn, BAR) == 5
    bar = _first(fn, BAR)
    before = [i for i, line in enumerate(fn) if re.search(LDG, line) and i < bar]
    assert before and all("STRONG.GPU" in fn[i] for i in before)
    assert _first(fn, FFMA) > bar  # no dot before q has gone through shared memory


@needs_nvcc
@pytest.mark.parametrize("heads", [1, 2])
def test_variant_is_one_barrier_with_every_load_before_the_first_ffma(builds, heads):
    skip_without_tools("nvdisasm")
    fn = _function(builds(0).cubin, "attention_partial_v2_t", heads)
    assert _count(fn, BAR) == 1
    loads = [i for i, line in enumerate(fn) if re.search(LDG, line)]
    assert len(loads) == 2 * heads + 8  # q (2 per head), 4 K and 4 V rows per lane: one trip at head_dim 64
    assert max(loads) < _first(fn, FFMA) < _first(fn, BAR)
    assert _count(fn, r"\bSTS\b|\bSTS\.") <= 2 * heads + 2  # the warp's PV sums and (max, sum): no score or V rows
    assert _count(fn[loads[0]:_first(fn, BAR)], r"\bLDS") == 0  # no shared-memory round trip before the barrier


@needs_nvcc
def test_variant_compiles_without_spill_stores_in_its_tiles(builds):
    r = builds(0)
    assert r.registers() <= 128, r.ptxas_log
    for heads in (1, 2):
        m = re.search(rf"attention_partial_v2_tILi{heads}E\S*\n\s+(\d+) bytes stack frame, (\d+) bytes spill stores",
                      r.ptxas_log)
        assert m and m.group(1) == "0" and m.group(2) == "0", r.ptxas_log
    # the 4- and 8-head tiles keep the three-pass body (the variant would spill there)
    assert "attention_partial_v2_tILi4E" not in r.ptxas_log and "attention_partial_tILi4E" in r.ptxas_log
    assert "attention_partial_tILi8E" in r.ptxas_log


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_attn_v2_is_the_default_cubin(builds, mode):
    def sha(flags):
        return cubin_sha256(builds(mode, flags))

    assert sha(("-DMK_ATTN_V2=1",)) == sha(())
    assert sha(ATTN_V1) != sha(())


@needs_nvcc
def test_detail_build_marks_the_variants_three_pieces(builds):
    """mk_detail's trace build records v2's scores, softmax and pv (a marker's region ID is a 32-bit immediate in
    the instruction words); its timed build is the default's SASS."""
    skip_without_tools("cuobjdump")
    from megakernel import sass_diff
    from megakernel.regions import region_tree

    def sass(flags):
        return sass_diff.normalized(sass_diff.sass_text(builds(0, flags).cubin))

    assert sass(DETAIL) == sass(())
    names = ("decode/attention/scores", "decode/attention/softmax", "decode/attention/pv")
    ids = [struct.pack("<I", r.id) for r in region_tree() if r.name in names]
    assert len(ids) == 3
    trace, detail = (Path(builds(2, flags).cubin).read_bytes() for flags in ((), DETAIL))
    assert all(i not in trace for i in ids) and all(i in detail for i in ids)
