"""Row 60 (megakernel/NOTES.md "Ready: row 60"; MK_TMA_INPUT, csrc/megakernel/early.cuh): an early tile's input vector
by bulk copies that thread 0 issues when its poll sees the counter. On the CPU (with nvcc): the rows, the build (two
more bulk copies, the global proxy fence, no new spill), and bad values refused. GPU: tests/test_megakernel_early_gpu.py
(test_tma_input_*, bit for bit against the default)."""
import re

import pytest

from benchmarks.decode import variant_rows
from megakernel.dag import DEFAULT_TILES
from megakernel.runtime import option_flags
from test_megakernel_lastcombine import _spills
from toolchain import needs_nvcc, skip_without_tools


def test_the_rows_are_the_default_with_the_flag():
    rows = variant_rows()
    assert rows["mk_tma_norm"] == {"tiles": DEFAULT_TILES, "build_flags": ("-DMK_TMA_INPUT=1",)}
    assert rows["mk_tma_in"] == {"tiles": DEFAULT_TILES, "build_flags": ("-DMK_TMA_INPUT=3",)}
    assert rows["mk_tma_all"] == {"tiles": DEFAULT_TILES, "build_flags": ("-DMK_TMA_INPUT=7",)}


@needs_nvcc
@pytest.mark.parametrize("mask", [1, 3, 4, 7])
def test_the_flag_adds_the_input_copies_and_no_spill(tmp_path, mask):
    """The flag build has the input copies after the global proxy fence, which the default has none of: beyond the
    stage buffer's one UBLKCP, bits 1-2 add two (x, the norm weights) and bit 4 one (h). Its spills are the default's
    (ptxas, nvcc 13.0; bit 4's first form, a branch in op_down to load_vector, made attention_partial_v2 spill)."""
    from megakernel import sass_diff
    from megakernel.build import build

    skip_without_tools("cuobjdump")
    flag = build(0, build_dir=tmp_path / "flag", extra_flags=option_flags(DEFAULT_TILES) + (f"-DMK_TMA_INPUT={mask}",))
    base = build(0, build_dir=tmp_path / "base", extra_flags=option_flags(DEFAULT_TILES))
    got, ref = _spills(flag.ptxas_log), _spills(base.ptxas_log)
    assert {f: n for f, n in got.items() if n} == {f: n for f, n in ref.items() if n}
    assert flag.registers() == 128
    flag_sass, base_sass = sass_diff.sass_text(flag.cubin), sass_diff.sass_text(base.cubin)
    early, down = mask & 3 != 0, mask & 4 != 0
    assert base_sass.count("UBLKCP") == 1 and flag_sass.count("UBLKCP") == 1 + 2 * early + down
    assert "FENCE.VIEW.ASYNC.G" not in base_sass and flag_sass.count("FENCE.VIEW.ASYNC.G") == early + down


@needs_nvcc
@pytest.mark.parametrize("bad", [("-DMK_TMA_INPUT=8",), ("-DMK_TMA_INPUT=-1",), ("-DMK_TMA_INPUT=1", "-DMK_EARLY_REGS=0")])
def test_a_bad_value_is_refused_by_the_build(tmp_path, bad):
    from megakernel.build import BuildError, build

    with pytest.raises(BuildError) as e:
        build(0, build_dir=tmp_path, extra_flags=option_flags(DEFAULT_TILES) + bad)
    assert re.search(r"MK_TMA_INPUT is a mask of 1 .*, 2 .* and 4 .*, with MK_EARLY_REGS; 0 is off", str(e.value))
