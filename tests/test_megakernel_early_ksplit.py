"""Row 52 on the CPU (megakernel/NOTES.md "Ready: row 52"; build flag MK_EARLY_KSPLIT=1, benchmarks/decode.py
mk_early_ksplit): the row, and (with nvcc) the builds: the flag at 0 is the default cubin (modes 0 and 2), the flag
build keeps 128 registers without a ptxas warning and early_tile without spills, bit 8 of MK_EARLY_REGS is refused
with it, and early_tile's input reads from shared memory drop (2 LDS.128 per thread for the early rows instead of 16).
GPU: tests/test_megakernel_early_ksplit_gpu.py."""
import re

import pytest

from benchmarks.decode import variant_rows
from megakernel.dag import DEFAULT_TILES
from toolchain import (  # noqa: F401  (megakernel_builds: the fixture)
    cubin_sha256,
    default_tile_flags,
    megakernel_builds,
    needs_nvcc,
    skip_without_tools,
)

KSPLIT = ("-DMK_EARLY_KSPLIT=1",)


def test_the_row():
    assert variant_rows()["mk_early_ksplit"] == {"tiles": DEFAULT_TILES, "build_flags": KSPLIT}


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_flag_off_is_the_default_cubin(builds, mode):
    assert cubin_sha256(builds(mode, default_tile_flags())) == cubin_sha256(
        builds(mode, default_tile_flags(("-DMK_EARLY_KSPLIT=0",))))


@needs_nvcc
def test_the_flag_build(builds):
    b = builds(0, default_tile_flags(KSPLIT))
    assert b.registers() == 128 and "warning" not in b.ptxas_log.lower(), b.ptxas_log
    props = re.search(r"Function properties for \S*early_tile\S*\n\s*(.*)", b.ptxas_log)
    assert props and "0 bytes spill stores, 0 bytes spill loads" in props.group(1), props and props.group(1)


@needs_nvcc
def test_bit_8_is_refused(builds):
    import dataclasses

    from megakernel.build import BuildError

    with pytest.raises(BuildError, match="MK_EARLY_KSPLIT changes the early tiles' multiply"):
        builds(0, default_tile_flags(KSPLIT, tiles=dataclasses.replace(DEFAULT_TILES, early_regs=15)))


@needs_nvcc
def test_early_tile_reads_one_chunk_per_thread(builds):
    skip_without_tools("nvdisasm")
    from megakernel.sass_diff import disassembly, functions

    def lds128(flags) -> int:
        fns = functions(disassembly(builds(0, default_tile_flags(flags)).cubin))
        tile = next(v for k, v in fns.items() if "early_tile" in k)
        return sum(i.startswith("LDS.128") for i in tile)

    assert lds128(()) - lds128(KSPLIT) == 14  # the early rows' 16 vector loads per thread become 2
