"""Row 34 (megakernel/NOTES.md "Ready: row 34", "Row 34 measured"): MK_PF_OWN_CAP, the own-tile L2 prefetch before the
dependency wait cut to the tile's leading bytes; the default since its H200 run (32 KiB, prefetch_own=True). On the CPU:
the rows, the cap's bounds refused at compile time, the default cubin = cap 32768's and not cap 0's (the whole tile),
and the cap keeps the whole-tile build's registers with no more spills. GPU: benchmarks/decode.py rows mk_nopfhead
(no own prefetch), mk_pfhead16 and mk_pfown (the whole tile) against the default."""

import pytest

from benchmarks.decode import variant_rows
from toolchain import cubin_sha256, megakernel_builds, needs_nvcc  # noqa: F401 (megakernel_builds: the builds fixture)


def test_the_default_prefetches_its_own_tile_and_the_rows_change_the_cap():
    import inspect

    from megakernel.runtime import MegakernelDecoder

    assert inspect.signature(MegakernelDecoder).parameters["prefetch_own"].default is True
    rows = variant_rows()
    assert rows["mk_nopfhead"] == {"prefetch_own": False}  # the control: no own-tile prefetch
    assert rows["mk_pfhead16"] == {"build_flags": ("-DMK_PF_OWN_CAP=16384",)}
    assert rows["mk_pfown"] == {"build_flags": ("-DMK_PF_OWN_CAP=0",)}  # the whole tile (rows 10-11)
    # rows measured with the whole-tile prefetch keep it
    for name in ("mk_old", "mk_pfsmall", "mk_pfffn", "mk_hint2", "mk_pf_batch"):
        assert "-DMK_PF_OWN_CAP=0" in rows[name]["build_flags"], name


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_default_cubin_is_cap_32k(builds, mode):
    def sha(flags):
        return cubin_sha256(builds(mode, flags))

    assert sha(("-DMK_PF_OWN_CAP=32768",)) == sha(())
    assert sha(("-DMK_PF_OWN_CAP=0",)) != sha(())


@needs_nvcc
def test_the_cap_keeps_the_whole_tile_builds_registers_and_no_more_spills(builds):
    base, capped = builds(0, ("-DMK_PF_OWN_CAP=0",)), builds(0)
    assert capped.registers() == base.registers() <= 128
    assert capped.spill_bytes() <= base.spill_bytes(), capped.ptxas_log  # 2f53b56: 64 vs 68 B


@needs_nvcc
@pytest.mark.parametrize("cap", ["-8", "24"])
def test_a_cap_that_is_not_a_multiple_of_16_is_refused(builds, cap):
    with pytest.raises(Exception, match="MK_PF_OWN_CAP"):
        builds(0, (f"-DMK_PF_OWN_CAP={cap}",))
