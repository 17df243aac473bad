"""Row 44 on the CPU (megakernel/NOTES.md "Ready: row 44"; build flag MK_KV_PREFETCH=1, benchmarks/decode.py
mk_kv_prefetch): the row, and (with nvcc) the builds: the flag at 0 the same cubin as without it (modes 0 and 2), the
flag build's registers and spills no worse than the default's, no ptxas warning, a bad value refused at compile time,
and its SASS (kv_prefetch_l2 issues L2 bulk prefetches, UBLKPF; the default has no such function).
GPU: tests/test_megakernel_kv_prefetch_gpu.py."""

import pytest

from benchmarks.decode import variant_rows
from megakernel.dag import NOEARLY_TILES
from toolchain import (  # noqa: F401  (megakernel_builds: the fixture)
    cubin_sha256,
    main_spills,
    megakernel_builds,
    needs_nvcc,
    noearly_tile_flags,
    skip_without_tools,
)

PF = ("-DMK_KV_PREFETCH=1",)


def test_the_row():
    assert variant_rows()["mk_kv_prefetch"] == {"tiles": NOEARLY_TILES, "build_flags": PF}


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_flag_off_is_the_same_cubin(builds, mode):
    assert cubin_sha256(builds(mode, noearly_tile_flags())) == cubin_sha256(builds(mode, noearly_tile_flags(("-DMK_KV_PREFETCH=0",))))


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_flag_build_spills_no_more(builds, mode):
    """ptxas 2026-12-03: 128 registers and the default build's spills (mode 0: 20 B stores, 44 B loads; mode 2: 28 / 264),
    with kv_prefetch_l2 out of line (inlined, mode 0 spill loads grew 44 -> 92 B)."""
    pf, plain = builds(mode, noearly_tile_flags(PF)), builds(mode, noearly_tile_flags())
    assert pf.registers() == 128 and "warning" not in pf.ptxas_log.lower(), pf.ptxas_log
    (s, l), (ps, pl) = main_spills(pf.ptxas_log), main_spills(plain.ptxas_log)
    assert s <= ps + 4 and l <= pl + 8, (s, l, ps, pl)


@needs_nvcc
def test_the_worker_prefetches_k_and_v(builds):
    skip_without_tools("nvdisasm")
    from megakernel.sass_diff import disassembly, functions

    fns = functions(disassembly(builds(0, noearly_tile_flags(PF)).cubin))
    pf = next(v for k, v in fns.items() if "kv_prefetch_l2" in k)  # out of line (the spills above)
    assert sum(i.startswith("UBLKPF") for i in pf) >= 2  # K, then V
    assert not any("kv_prefetch_l2" in k for k in functions(disassembly(builds(0, noearly_tile_flags()).cubin)))


@needs_nvcc
def test_a_bad_value_does_not_compile(builds):
    from megakernel.build import BuildError

    with pytest.raises(BuildError, match="MK_KV_PREFETCH is 0 .off. or 1"):
        builds(0, noearly_tile_flags(("-DMK_KV_PREFETCH=2",)))
