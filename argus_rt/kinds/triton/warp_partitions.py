"""Warp roles of a warp-specialized Triton kernel, read from its compiled TTGIR.

``tl.range(..., warp_specialize=True)`` (Triton 3.6 and 3.7, sm_90 and later) compiles to one
``ttg.warp_specialize`` op: a default region, run by the kernel's ``ttg.num-warps`` warps, and partitions
``partition0``, ``partition1``, ... printed with their warp counts (``num_warps(4)``). Which warps of the
CTA run each partition is decided by Triton's warp-group allocation pass when it lowers the TTGIR;
:func:`partition_warp_roles` runs that very pass (:func:`mlir_ir.with_warp_groups_allocated`) and reads its
``warpGroupStartIds``, so the warp ranges are Triton's, not a re-derivation. The IR gives the partitions
no names beyond their index: the roles are ``default``, ``partition0``, ``partition1``, ... The pass may
add partitions of its own that round the CTA up to whole warp groups of 4 (an empty body, on the last
warps): their warps get the role ``padding``.
"""
from __future__ import annotations

import re

from ...warp_roles import check_warp_roles
from . import mlir_ir

DEFAULT_ROLE = "default"
PADDING_ROLE = "padding"  # warps the allocation pass adds to fill the last warp group; they run nothing
_NUM_WARPS = re.compile(r'"ttg\.num-warps"\s*=\s*(\d+)')
_TOTAL_WARPS = re.compile(r'"ttg\.total-num-warps"\s*=\s*(\d+)')
_START_IDS = re.compile(r"warpGroupStartIds\s*=\s*array<i32(?::\s*([\d,\s]*))?>")
_PARTITION = re.compile(r"^\s*partition(\d+)\(")
_PARTITION_WARPS = re.compile(r"num_warps\((\d+)\)\s*\{\s*$")


class WarpPartitionError(ValueError):
    """The TTGIR's warp-specialized partitions cannot be turned into warp roles; the message says why."""


def partition_warp_roles(ttgir: str) -> dict[str, list[int]]:
    """``{"default": [0 .. num_warps-1], "partition0": [...], ...}``: the warps of a CTA that run each region
    of the kernel's ``ttg.warp_specialize`` op; ``{}`` for a kernel without one. Several such ops (Triton
    reuses the same warps for each) must agree on the partitions' warps, else :class:`WarpPartitionError`."""
    if "ttg.warp_specialize" not in ttgir:
        return {}
    text = mlir_ir.with_warp_groups_allocated(ttgir)
    base = _NUM_WARPS.search(text)
    if base is None:
        raise WarpPartitionError('the TTGIR module has no "ttg.num-warps" attribute')
    layouts = _partition_layouts(text.splitlines())
    if not layouts:
        return {}
    if any(layout != layouts[0] for layout in layouts):
        raise WarpPartitionError(f"the kernel has {len(layouts)} ttg.warp_specialize ops whose partitions run on "
                                 f"different warps ({layouts}); declare warp_roles in argus_program.json instead")
    declared = sum(1 for ln in ttgir.splitlines() if _PARTITION.match(ln)) // len(layouts)  # before the pass
    default = int(base.group(1))
    roles = {DEFAULT_ROLE: list(range(default))}
    for i, (start, n) in enumerate(layouts[0]):
        roles.setdefault(f"partition{i}" if i < declared else PADDING_ROLE, []).extend(range(start, start + n))
    total = _TOTAL_WARPS.search(text)
    warps = int(total.group(1)) if total else default + sum(n for _, n in layouts[0])
    return check_warp_roles(roles, warps)


def _partition_layouts(lines: list[str]) -> list[list[tuple[int, int]]]:
    """Per ``ttg.warp_specialize`` op, in text order: [(first warp, warp count) per partition]."""
    layouts: list[list[tuple[int, int]]] = []
    starts: list[int] = []
    for ln in lines:
        if "ttg.warp_specialize(" in ln:
            m = _START_IDS.search(ln)
            if m is None:
                raise WarpPartitionError("a ttg.warp_specialize op has no warpGroupStartIds after Triton's "
                                         f"allocate_warp_groups pass: {ln.strip()[:120]}")
            starts = [int(x) for x in (m.group(1) or "").replace(" ", "").split(",") if x]
            layouts.append([])
        elif (p := _PARTITION.match(ln)) and layouts:
            n = _PARTITION_WARPS.search(ln)
            index = int(p.group(1))
            if n is None or index != len(layouts[-1]) or index >= len(starts):
                raise WarpPartitionError(f"cannot read partition{index}'s warps: {ln.strip()[:120]}")
            layouts[-1].append((starts[index], int(n.group(1))))
    if any(not layout for layout in layouts):
        raise WarpPartitionError("a ttg.warp_specialize op has no partitions in the TTGIR text")
    return layouts
