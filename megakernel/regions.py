"""Argus regions compiled into the megakernel (IDs are stable hashes of these names)."""
from __future__ import annotations

from argus_rt.regions import RegionTree

PROGRAM = "tinyllama-megakernel"
REGION_LEAVES = ("core_loop", "gemm", "attention", "norm", "kv_update", "logits", "sampling")
ROOT = "decode"
# Detail regions, nested in a leaf: recorded only by builds with -DMK_DETAIL_REGIONS=1 (csrc/megakernel/
# regions.cuh), so the default builds record exactly REGION_LEAVES. core_loop/wait: thread 0's dependency
# wait (its end is when the counter was seen); attention/*: the phases of an AttnPartial tile (scores,
# softmax, pv) and of OProj's combine of the splits (combine_weights, combine_sum); gemm/*: Down's gemm in
# two, its activation load (down_vector) and its weight loop (down_weights).
DETAIL_REGIONS = {"core_loop": ("wait",), "attention": ("scores", "softmax", "pv", "combine_weights", "combine_sum"),
                  "gemm": ("down_vector", "down_weights")}


def region_tree() -> RegionTree:
    """decode/{core_loop, gemm, attention, norm, kv_update, logits, sampling}, and the detail regions
    nested in core_loop, attention and gemm."""
    tree = RegionTree(PROGRAM)
    tree.add(ROOT)
    for leaf in REGION_LEAVES:
        tree.add(leaf, parent=ROOT)
    for leaf, details in DETAIL_REGIONS.items():
        for detail in details:
            tree.add(detail, parent=f"{ROOT}/{leaf}")
    return tree


def coordinate(step: int, layer: int) -> int:
    """Scope coordinate the kernel records: step in the high bits, layer (0..255) in the low 8."""
    if not 0 <= layer <= 0xFF or step < 0:
        raise ValueError(f"coordinate needs step >= 0 and 0 <= layer <= 255, got step={step}, layer={layer}")
    return (step << 8) | layer


def split_coordinate(coord: int) -> tuple[int, int]:
    """(step, layer) of a recorded coordinate (layer 255 = per-step work: scheduler, logits)."""
    return coord >> 8, coord & 0xFF
