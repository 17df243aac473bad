"""Environment every GPU process the project starts runs under: NVLink multicast off.

Multicast (NCCL's NVLS, PyTorch symmetric memory, NVSHMEM) can take a shared host's GPUs out of
service, so it is forced off in every child process and entry point, overriding inherited values.
"""
from __future__ import annotations

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
