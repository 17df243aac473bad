"""Row 44 on a GPU (megakernel/NOTES.md "Ready: row 44"; build flag MK_KV_PREFETCH=1, benchmarks/decode.py
mk_kv_prefetch): attention tiles prefetch their split's K/V rows into L2 before their wait. A prefetch moves no data
the kernel reads (the loads still read global memory after the wait), so every buffer must be bit for bit the
unflagged build's: on the tiny model in one-split, 16- and 32-position launches (1- and 2-head tiles), and on full
TinyLlama at KV ~128 (one-split launches) and ~1024 (256-position splits). Run by scripts/gpu_mk_run.sh
(TEST_EXTRA=tests/test_megakernel_kv_prefetch_gpu.py)."""
import dataclasses

import pytest

from test_megakernel_fusions_gpu import (
    SEED,
    TINY_TILES,
    _assert_flag_equals_plain_tiny,
    _assert_flag_row_is_its_tiles_bit_for_bit,
)

pytestmark = pytest.mark.gpu
PF = ("-DMK_KV_PREFETCH=1",)
TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20, single_split=12)


@pytest.mark.parametrize("head_parts", [1, 2], ids=["2heads", "1head"])
def test_kv_prefetch_equals_the_plain_build_tiny(head_parts):
    _assert_flag_equals_plain_tiny(dataclasses.replace(TINY, attn_head_parts=head_parts), PF, SEED + 97)


@pytest.mark.parametrize("row", ["mk_kv_prefetch", "mk_early_kvpf"])  # on the default before row 48, and on the default
@pytest.mark.parametrize("kv", [128, 1024])
def test_kv_prefetch_equals_the_plain_build_full_model(kv, row):
    _assert_flag_row_is_its_tiles_bit_for_bit(row, PF, kv, SEED + 99)
