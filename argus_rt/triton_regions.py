"""Public import path of the Triton region markers: ``from argus_rt import triton_regions as argus``.

The README, docs/programs.md and every Triton example write it this way, and program directories
outside this repository do too, so the path stays. The one home of the markers is
:mod:`argus_rt.kinds.triton.regions` (the Triton kind); this module only re-exports it, object for
object (``tests/test_triton_regions.py`` checks that the names are the same objects).
"""
from __future__ import annotations

from .kinds.triton.regions import MARKER_ASM_PATTERN, begin, end, kernel_regions, marker_asm

__all__ = ["MARKER_ASM_PATTERN", "begin", "end", "kernel_regions", "marker_asm"]
