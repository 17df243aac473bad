"""The CUDA compiler as the tests see it: found the way Argus finds it (argus_rt.tools: $ARGUS_NVCC,
$CUDA_HOME, /usr/local/cuda, PATH), so a test never skips for an nvcc that Argus itself would use."""
from __future__ import annotations

import pytest

from argus_rt import tools

NVCC = tools.tool_or_none("nvcc")  # Path or None
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc where argus_rt.tools looks")
