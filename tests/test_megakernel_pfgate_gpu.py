"""Row 45 on a GPU (megakernel/NOTES.md "Ready: row 45"; MegakernelDecoder(prefetch_gate=...) -> MK_PF_GATE=1,
benchmarks/decode.py mk_pfgate_*): O-proj and gate/up tiles wait for an earlier phase of their layer, L2-prefetch their
own weights, then wait on their dependency. A prefetch moves no data the kernel reads, and the gate is implied by the
dependency, so every buffer must be bit for bit the ungated decoder's: on the tiny model across one-split, 16- and
32-position launches, and on full TinyLlama at KV ~128 (one-split launches) and ~1024 (256-position splits, whose
attention counters get another count per step). Run by scripts/gpu_mk_run.sh (TEST_EXTRA=tests/test_megakernel_pfgate_gpu.py)."""
import dataclasses

import pytest

from test_megakernel_fusions_gpu import (
    SEED,
    TINY_TILES,
    _assert_flag_equals_plain_tiny,
    _assert_flag_row_is_its_tiles_bit_for_bit,
)

pytestmark = pytest.mark.gpu
TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20, single_split=12)
GATES = {"o": (("oproj", "qkv", None),),
         "og": (("oproj", "qkv", None), ("gateup", "attn", 64)),   # a short gated range on the tiny tiles
         "ogd": (("oproj", "qkv", None), ("gateup", "attn", None), ("down", "oproj", None))}


@pytest.mark.parametrize("gates", sorted(GATES))
def test_gated_prefetch_equals_the_plain_build_tiny(gates):
    # a 16-byte head: the tiny tiles are smaller than the 32 KiB default head, which would leave no gated bytes
    _assert_flag_equals_plain_tiny(TINY, ("-DMK_PF_OWN_CAP=16",), SEED + 101, prefetch_gate=GATES[gates])


@pytest.mark.parametrize("kv", [128, 1024])
def test_gated_prefetch_equals_the_plain_build_full_model(kv):
    _assert_flag_row_is_its_tiles_bit_for_bit("mk_pfgate_oga", (), kv, SEED + 103)


@pytest.mark.parametrize("gates", ["o", "og"])
def test_staged_gates_equal_the_plain_build_tiny(gates):
    """Row 46: the gated bytes staged in shared memory and read by gemv_tile_staged (each lane's chunks in the same
    order as gemv_tile's): bit for bit the unstaged build."""
    _assert_flag_equals_plain_tiny(TINY, (), SEED + 105, prefetch_gate=GATES[gates], gate_stage_bytes=4096)


@pytest.mark.parametrize("kv", [128, 1024])
def test_staged_gates_equal_the_plain_build_full_model(kv):
    _assert_flag_row_is_its_tiles_bit_for_bit("mk_stgate_og_kv", ("-DMK_KV_PREFETCH=1",), kv, SEED + 107)
