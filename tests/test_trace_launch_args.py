"""Kernel-argument packing of argus_rt.launch (no GPU needed)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from argus_rt.launch import LaunchError, _dim3, pack_argument


def test_scalars_keep_or_get_their_types():
    assert isinstance(pack_argument(np.uint64(5)), ctypes.c_uint64)
    assert isinstance(pack_argument(np.float32(1.5)), ctypes.c_float)
    assert pack_argument(7).value == 7 and isinstance(pack_argument(7), ctypes.c_int32)
    assert isinstance(pack_argument(2.5), ctypes.c_float)


@pytest.mark.parametrize(
    "arg,match",
    [
        (2**31, "does not fit an int32"),
        (True, "is a bool"),
        ("x", "unsupported type str"),
        (np.complex64(1), "numpy type complex64 unsupported"),
    ],
)
def test_rejected_arguments(arg, match):
    with pytest.raises(LaunchError, match=match):
        pack_argument(arg, 3)


def test_cpu_tensor_is_rejected():
    import torch

    with pytest.raises(LaunchError, match="argument 0 is a CPU tensor"):
        pack_argument(torch.zeros(2))


def test_dims():
    assert _dim3(128, "grid") == (128, 1, 1)
    assert _dim3((4, 2), "grid") == (4, 2, 1)
    with pytest.raises(LaunchError, match="block must be 1 to 3 positive ints"):
        _dim3((0,), "block")
