"""Rows 58-59 (megakernel/NOTES.md "Row 58 measured", "Row 59 measured", the default since; MK_COMBINE_AHEAD and
MK_COMBINE_LANES, csrc/megakernel/attention.cuh): the O-proj combine with its partials' loads issued C splits per
chunk, the first chunk beside the weights pass, and the weights' loads spread over 8 lanes per head. On the CPU (with
nvcc): the rows, the build's spills (none in the combine, the worker's spill stores the control's), and bad values
refused by the build. GPU: tests/test_megakernel_early_gpu.py (test_combine_ahead_*, bit for bit against the
default)."""
import re

import pytest

from benchmarks.decode import variant_rows
from megakernel.dag import DEFAULT_TILES
from megakernel.runtime import option_flags
from test_megakernel_lastcombine import _spills
from toolchain import needs_nvcc


def test_the_rows_are_the_default_with_the_flag():
    rows = variant_rows()
    for row, chunk in (("mk_comb4", 4), ("mk_comb_loop", 0)):
        assert rows[row] == {"tiles": DEFAULT_TILES, "build_flags": (f"-DMK_COMBINE_AHEAD={chunk}",)}
    assert rows["mk_comb_heads"] == {"tiles": DEFAULT_TILES, "build_flags": ("-DMK_COMBINE_LANES=0",)}  # row 59's
    assert "mk_comb_lanes" not in rows  # row 59: the default since its H200 run
    assert "mk_comb5" not in rows  # the default since its H200 run


@needs_nvcc
@pytest.mark.parametrize("chunk", [4, None, "heads"])
def test_the_combine_does_not_spill(tmp_path, chunk):
    """ptxas, nvcc 13.0, 2026-12-04: 0 B in load_attention_combined for 4 and (the default) 5 splits per chunk, with
    the weights by 8 lanes per head (the default) or by one (6 splits spill the worker, 8 the combine itself), and the
    worker's 8 B of spill stores as the control's (the loop: its frame 56 B; 72 with row 58, 112 with row 59)."""
    from megakernel.build import build

    extra = {4: ("-DMK_COMBINE_AHEAD=4",), None: (), "heads": ("-DMK_COMBINE_LANES=0",)}[chunk]  # heads: row 58
    flags = option_flags(DEFAULT_TILES) + extra
    flag = build(0, build_dir=tmp_path / "flag", extra_flags=flags)
    base = build(0, build_dir=tmp_path / "base", extra_flags=option_flags(DEFAULT_TILES) + ("-DMK_COMBINE_AHEAD=0",))
    got, ref = _spills(flag.ptxas_log), _spills(base.ptxas_log)
    combine = [f for f in got if "load_attention_combined" in f]
    assert combine and all(got[f] == 0 for f in combine)
    assert got["argus_megakernel"] <= ref["argus_megakernel"] and flag.registers() == 128


@needs_nvcc
@pytest.mark.parametrize("bad,message", [
    (("-DMK_COMBINE_AHEAD=-1",), r"MK_COMBINE_AHEAD is 0 \(off\) or the splits per chunk, 1 to 8"),
    (("-DMK_COMBINE_AHEAD=9",), r"MK_COMBINE_AHEAD is 0 \(off\) or the splits per chunk, 1 to 8"),
    (("-DMK_COMBINE_LANES=1", "-DMK_COMBINE_AHEAD=0"), r"MK_COMBINE_LANES is 0 \(off\) or 1 .*needs MK_COMBINE_AHEAD"),
])
def test_a_bad_value_is_refused_by_the_build(tmp_path, bad, message):
    from megakernel.build import BuildError, build

    with pytest.raises(BuildError) as e:
        build(0, build_dir=tmp_path, extra_flags=option_flags(DEFAULT_TILES) + bad)
    assert re.search(message, str(e.value))
