"""Row 43 on the CPU (megakernel/NOTES.md "Ready: row 43"; build flag MK_KV_STAGE=1, benchmarks/decode.py
mk_kv_stage): the row, the decoder's dynamic shared memory and refusals, and (with nvcc) the builds: the flag at 0 the
same cubin as without it, the flag build's registers and spills, two CTAs per SM with the K/V buffer, and its SASS
(the staged attention tile reads K, V and q from shared memory only; the worker issues bulk copies; the tail loads go
out before any shared store). GPU: tests/test_megakernel_kv_stage_gpu.py."""
import re

import pytest

from benchmarks.decode import variant_rows
from megakernel.dag import DEFAULT_TILES, TileShape
from megakernel.runtime import CONFIG_CUH, MegakernelDecoder, kernel_limits, kv_stage_bytes, option_flags
from test_megakernel_interpreter import tiny  # noqa: F401  (the tiny model fixture)
from toolchain import cubin_sha256, megakernel_builds, needs_nvcc, skip_without_tools  # noqa: F401  (fixture)

ROW42 = DEFAULT_TILES  # rows 40 + 42: the decoder's default
KV = ("-DMK_KV_STAGE=1",)
SM_SMEM, RESERVED = 233472, 1024  # H200 shared memory per SM, and per CTA reserved by the driver


def test_the_row():
    assert variant_rows()["mk_kv_stage"] == {"tiles": ROW42, "build_flags": KV}


def test_the_buffer_size():
    default = int(re.search(r"#define MK_KV_STAGE_BYTES (\d+)", CONFIG_CUH.read_text()).group(1))
    assert default == 77824 and default % 256 == 0
    assert default // (4 * 64) == 304  # positions of K and V at TinyLlama's head_dim
    assert kv_stage_bytes(()) == kv_stage_bytes(("-DMK_KV_STAGE=0",)) == 0
    assert kv_stage_bytes(KV) == default
    assert kv_stage_bytes(KV + ("-DMK_KV_STAGE_BYTES=4096",)) == 4096
    assert "KV_STAGE_BYTES" not in kernel_limits()  # a macro's value, not a literal constexpr


@pytest.mark.parametrize("kw", [{"stage_bytes": 1024, "build_flags": KV + ("-DMK_DOWN_PIECES=0",)},
                                {"ring_pages": 2, "build_flags": KV + ("-DMK_DOWN_PIECES=0",)}])
def test_the_decoder_refuses_a_second_user_of_the_buffer(tiny, kw):  # noqa: F811
    c, w = tiny
    with pytest.raises(ValueError, match="MK_KV_STAGE=1 puts K/V rows in the stage buffer") as e:
        MegakernelDecoder(w, tiles=TileShape(o_rows=16, gate_features=16, down_rows=16, attn_split=16), **kw)
    assert "\n" not in str(e.value)


def _flags(tiles: TileShape, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    return extra + option_flags(tiles, extra)


def _main_spills(log: str) -> tuple[int, int]:
    m = re.search(r"Function properties for argus_megakernel\n\s+\d+ bytes stack frame, (\d+) bytes spill stores, "
                  r"(\d+) bytes spill loads", log)
    return int(m.group(1)), int(m.group(2))


def _static_smem(log: str) -> int:
    return int(re.search(r"Compiling entry function 'argus_megakernel'.*?Used \d+ registers.*?(\d+) bytes smem", log,
                         re.S).group(1))


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_flag_off_is_the_same_cubin(builds, mode):
    base = _flags(ROW42)
    assert cubin_sha256(builds(mode, base)) == cubin_sha256(builds(mode, _flags(ROW42, ("-DMK_KV_STAGE=0",))))


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_flag_build_fits_two_ctas_per_sm(builds, mode):
    """128 registers; the worker spills no more than row 42's build (ptxas 2026-12-03, mode 0: 12/36 B against 20/44;
    mode 2 28/272 against 28/264 loads, bounded); the staged tiles and the tail do not spill; static + reserved + the
    buffer fits twice in an SM."""
    kv, plain = builds(mode, _flags(ROW42, KV)), builds(mode, _flags(ROW42))
    assert kv.registers() == 128, kv.ptxas_log
    (ks, kl), (ps, pl) = _main_spills(kv.ptxas_log), _main_spills(plain.ptxas_log)
    assert ks <= ps and kl <= pl + 16, (ks, kl, ps, pl)
    for fn, stores in re.findall(r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores",
                                 kv.ptxas_log):
        if "kv_stage_tail" in fn or "attention_partial_v2_tILi1ELb1E" in fn or "attention_partial_v2_tILi2ELb1E" in fn:
            assert int(stores) == 0, fn
    assert 2 * (_static_smem(kv.ptxas_log) + RESERVED + kv_stage_bytes(KV)) <= SM_SMEM


@needs_nvcc
def test_the_staged_tiles_read_shared_memory_only(builds):
    """SASS of the flag build: the staged 1- and 2-head tiles have shared loads and no global load (q, K and V come
    from the stage buffer); their unstaged twins keep the global loads; the tail issues its global loads before its
    first shared store; the worker issues more bulk copies (UBLKCP) than the default's (weight staging only)."""
    skip_without_tools("nvdisasm")
    from megakernel.sass_diff import disassembly, functions

    fns = functions(disassembly(builds(0, _flags(ROW42, KV)).cubin))
    for g in (1, 2):
        staged = fns[f"_ZN2mk22attention_partial_v2_tILi{g}ELb1EEEvRK6ParamsiiiiiPf"]
        plain = fns[f"_ZN2mk22attention_partial_v2_tILi{g}ELb0EEEvRK6ParamsiiiiiPf"]
        assert any(i.startswith("LDS.128") for i in staged) and not any(i.startswith("LDG") for i in staged), g
        assert sum(i.startswith("LDG") for i in plain) >= 8, g
    tail = next(v for k, v in fns.items() if "kv_stage_tail" in k)
    first_sts = next(n for n, i in enumerate(tail) if i.startswith("STS"))
    assert sum(i.startswith("LDG") for i in tail[:first_sts]) >= 8
    default = functions(disassembly(builds(0, _flags(ROW42)).cubin))["argus_megakernel"]  # weight staging's copies
    assert sum(i.startswith("UBLKCP") for i in fns["argus_megakernel"]) > sum(i.startswith("UBLKCP") for i in default)


@needs_nvcc
@pytest.mark.parametrize("extra,message", [(("-DMK_ATTN_V2=0",), "MK_KV_STAGE uses the stage buffer"),
                                           (("-DMK_KV_STAGE_BYTES=1000",), "MK_KV_STAGE_BYTES is a positive multiple"),
                                           (("-DMK_KV_STAGE=2",), "MK_KV_STAGE is 0 .off. or 1")])
def test_bad_flag_combinations_do_not_compile(builds, extra, message):
    from megakernel.build import BuildError

    with pytest.raises(BuildError, match=message):
        builds(0, _flags(ROW42, KV + extra))
