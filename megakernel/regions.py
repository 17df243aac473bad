"""Argus regions compiled into the megakernel (IDs are stable hashes of these names)."""
from __future__ import annotations

from argus_rt.regions import RegionTree

PROGRAM = "tinyllama-megakernel"
REGION_LEAVES = ("core_loop", "gemm", "attention", "norm", "kv_update", "logits", "sampling")
ROOT = "decode"


def region_tree() -> RegionTree:
    """decode/{core_loop, gemm, attention, norm, kv_update, logits, sampling}."""
    tree = RegionTree(PROGRAM)
    tree.add(ROOT)
    for leaf in REGION_LEAVES:
        tree.add(leaf, parent=ROOT)
    return tree


def coordinate(step: int, layer: int) -> int:
    """Scope coordinate the kernel records: step in the high bits, layer (0..255) in the low 8."""
    if not 0 <= layer <= 0xFF or step < 0:
        raise ValueError(f"coordinate needs step >= 0 and 0 <= layer <= 255, got step={step}, layer={layer}")
    return (step << 8) | layer


def split_coordinate(coord: int) -> tuple[int, int]:
    """(step, layer) of a recorded coordinate (layer 255 = per-step work: scheduler, logits)."""
    return coord >> 8, coord & 0xFF
