"""Central GPU markers: `gpu`, `gpu2`, `hopper` tests skip with a specific reason.

Every test that runs a kernel opens with a plain PyTorch/NumPy reference; see the tests.
"""
from __future__ import annotations

import pytest

from argus_rt.gpu_env import force_multicast_off

# Multicast must never be used on the shared multi-GPU hosts, whatever a test starts (overrides CI's values).
force_multicast_off()


def _cuda_device_count() -> tuple[int, str]:
    try:
        import torch
    except ImportError:
        return 0, "torch is not installed"
    if not torch.cuda.is_available():
        return 0, f"no CUDA GPU visible to torch {torch.__version__}"
    return torch.cuda.device_count(), ""


def pytest_collection_modifyitems(config, items):
    count, why = _cuda_device_count()
    capability = None
    if count:
        import torch

        capability = torch.cuda.get_device_capability(0)
    for item in items:
        if "gpu" in item.keywords and count < 1:
            item.add_marker(pytest.mark.skip(reason=f"needs 1 CUDA GPU: {why}"))
        elif "gpu2" in item.keywords and count < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 CUDA GPUs, found {count}{': ' + why if why else ''}"))
        elif "hopper" in item.keywords and (capability is None or capability[0] != 9):
            item.add_marker(pytest.mark.skip(reason=f"needs a Hopper (sm_90) GPU, found capability {capability}"))
