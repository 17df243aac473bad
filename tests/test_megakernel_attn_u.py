"""Row 50 on the CPU (megakernel/NOTES.md "Ready: row 50"; build flag MK_ATTN_U, benchmarks/decode.py mk_attn_u8):
the row, and (with nvcc) the builds: U = 4 given explicitly is the default cubin (modes 0 and 2), U = 8 keeps 128
registers without a ptxas warning, and another value is refused at compile time."""

import pytest

from benchmarks.decode import variant_rows
from megakernel.dag import DEFAULT_TILES
from toolchain import (  # noqa: F401  (megakernel_builds: the fixture)
    cubin_sha256,
    default_tile_flags,
    megakernel_builds,
    needs_nvcc,
)

U8 = ("-DMK_ATTN_U=8",)


def test_the_row():
    assert variant_rows()["mk_attn_u8"] == {"tiles": DEFAULT_TILES, "build_flags": U8}


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_u4_is_the_default_cubin(builds, mode):
    assert cubin_sha256(builds(mode, default_tile_flags())) == cubin_sha256(builds(mode, default_tile_flags(("-DMK_ATTN_U=4",))))


@needs_nvcc
def test_u8_builds_without_warnings(builds):
    u8 = builds(0, default_tile_flags(U8))
    assert u8.registers() == 128 and "warning" not in u8.ptxas_log.lower(), u8.ptxas_log
    assert cubin_sha256(u8) != cubin_sha256(builds(0, default_tile_flags()))


@needs_nvcc
def test_a_bad_value_does_not_compile(builds):
    from megakernel.build import BuildError

    with pytest.raises(BuildError, match="MK_ATTN_U is 4 .the default. or 8"):
        builds(0, default_tile_flags(("-DMK_ATTN_U=6",)))
