"""Shape and knob checks of the overlap operator: bad input raises a specific error naming the value."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from overlap.config import (
    OverlapConfig,
    OverlapShapeError,
    candidate_configs,
    check_operands,
    chunk_bounds,
    parse_shape,
    split_global_m,
)


def test_chunk_bounds_cover_the_shard_in_order():
    assert chunk_bounds(12, 3) == [(0, 4), (4, 8), (8, 12)]
    assert chunk_bounds(5, 1) == [(0, 5)]


def test_chunk_bounds_reject_s_not_dividing_m_shard():
    with pytest.raises(OverlapShapeError, match=r"M_shard=10 .* S=4"):
        chunk_bounds(10, 4)


def test_global_m_not_divisible_by_world_names_both():
    with pytest.raises(OverlapShapeError, match=r"M=7 .* world size 2"):
        split_global_m(7, 2)
    assert split_global_m(8, 2) == 4


def test_dtype_mismatch_is_a_clear_error():
    a = torch.randn(4, 8, dtype=torch.bfloat16)
    b = torch.randn(8, 3, dtype=torch.float32)
    with pytest.raises(OverlapShapeError, match=r"dtype mismatch: A_shard is torch.bfloat16, B is torch.float32"):
        check_operands(a, b)


def test_inner_dimension_and_rank_and_dtype_errors():
    with pytest.raises(OverlapShapeError, match=r"inner dimensions differ"):
        check_operands(torch.randn(4, 8), torch.randn(7, 3))
    with pytest.raises(OverlapShapeError, match=r"2-D"):
        check_operands(torch.randn(4, 8, 1), torch.randn(8, 3))
    with pytest.raises(OverlapShapeError, match=r"not supported"):
        check_operands(torch.ones(4, 8, dtype=torch.int32), torch.ones(8, 3, dtype=torch.int32))
    with pytest.raises(OverlapShapeError, match=r"contiguous"):
        check_operands(torch.randn(8, 4).t(), torch.randn(8, 3))
    with pytest.raises(OverlapShapeError, match=r"S=3"):
        check_operands(torch.randn(4, 8), torch.randn(8, 3), OverlapConfig(3, 0, 1))


def test_config_validation_lists_valid_choices():
    with pytest.raises(OverlapShapeError, match=r"must divide S=4; got 3, valid: \[1, 2, 4\]"):
        OverlapConfig(4, 0, 3)
    with pytest.raises(OverlapShapeError, match=r"S \(communication chunks\) must be >= 1, got 0"):
        OverlapConfig(0, 0, 1)
    with pytest.raises(OverlapShapeError, match=r"R .* 0\.\.64, got 65"):
        OverlapConfig(1, 65, 1)
    with pytest.raises(OverlapShapeError, match=r"must be an int"):
        OverlapConfig(2.0, 0, 1)
    assert OverlapConfig.from_key("S8_R16_P2") == OverlapConfig(8, 16, 2)
    with pytest.raises(OverlapShapeError, match="S4_R8_P1"):
        OverlapConfig.from_key("S4-R8")


def test_candidates_always_hold_s1_and_respect_divisibility():
    cands = candidate_configs([4, 8], [0, 8], [1, 2, 4, 8], m_shard=12)
    keys = {c.key() for c in cands}
    assert "S1_R0_P1" in keys and "S1_R8_P1" in keys       # S = 1 always a candidate
    assert not any(c.S == 8 for c in cands)                # 8 does not divide 12
    assert all(c.S % c.P == 0 for c in cands)
    assert "S4_R8_P4" in keys and "S4_R8_P8" not in keys


def test_parse_shape():
    assert parse_shape("4096, 8192,8192") == (4096, 8192, 8192)
    for bad in ("1,2", "a,b,c", "0,2,3"):
        with pytest.raises(OverlapShapeError, match="shape|>= 1"):
            parse_shape(bad)


def test_entry_points_force_multicast_off_before_torch_initialises():
    env = dict(os.environ, NCCL_NVLS_ENABLE="1", TORCH_SYMM_MEM_DISABLE_MULTICAST="0")
    code = ("import os, overlap.tune, overlap.bench; "
            "print(os.environ['NCCL_NVLS_ENABLE'], os.environ['TORCH_SYMM_MEM_DISABLE_MULTICAST'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1"]
