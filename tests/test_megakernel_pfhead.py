"""Row 34 (megakernel/NOTES.md "Ready: row 34"): MK_PF_OWN_CAP, the own-tile L2 prefetch before the dependency wait cut
to the tile's leading bytes. On the CPU: the rows are build flags plus prefetch_own, the cap's bounds are refused at
compile time, cap 0 is the default cubin, and a capped build keeps the default's registers and spills. GPU:
benchmarks/decode.py rows mk_pfhead8 / 16 / 32 against the default and mk_pfown in one run."""
import hashlib
from pathlib import Path

import pytest

from benchmarks.decode import variant_rows
from toolchain import megakernel_builds, needs_nvcc  # noqa: F401 (megakernel_builds: the builds fixture)

CAPS = {"mk_pfhead8": 8192, "mk_pfhead16": 16384, "mk_pfhead32": 32768}


def test_the_rows_prefetch_their_own_tile_with_a_cap():
    rows = variant_rows()
    for name, cap in CAPS.items():
        assert rows[name] == {"prefetch_own": True, "build_flags": (f"-DMK_PF_OWN_CAP={cap}",)}
    assert rows["mk_pfown"] == {"prefetch_own": True}  # the uncapped control


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_cap_zero_is_the_default_cubin(builds, mode):
    def sha(flags):
        return hashlib.sha256(Path(builds(mode, flags).cubin).read_bytes()).hexdigest()

    assert sha(("-DMK_PF_OWN_CAP=0",)) == sha(())
    assert sha(("-DMK_PF_OWN_CAP=16384",)) != sha(())


@needs_nvcc
def test_a_capped_build_keeps_the_defaults_registers_and_no_more_spills(builds):
    base, capped = builds(0), builds(0, ("-DMK_PF_OWN_CAP=16384",))
    assert capped.registers() == base.registers() <= 128
    assert capped.spill_bytes() <= base.spill_bytes(), capped.ptxas_log  # 2f53b56: 64 vs 68 B


@needs_nvcc
@pytest.mark.parametrize("cap", ["-8", "24"])
def test_a_cap_that_is_not_a_multiple_of_16_is_refused(builds, cap):
    with pytest.raises(Exception, match="MK_PF_OWN_CAP"):
        builds(0, (f"-DMK_PF_OWN_CAP={cap}",))
