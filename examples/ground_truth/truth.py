"""Per-region executed-instruction counts of the ground-truth kernel, known by construction.

Each region's work is a ``#pragma unroll 1`` loop of dependent FMAs with a run-time trip count, and
the shared helper is called 3 times from stage_a and once from stage_b. The loops are found in the
SASS by their FMA constant (0.5 stage_a, 0.75 stage_b, 0.125 stage_b/inner, 0.25 helper), not by
markers or counters, so this truth is independent of the PC-to-region map it checks. Straight-line
code outside the loops (a few dozen warp instructions per region) is left out: with hundreds of
trips that is well under 1%, inside the 2% tolerance the issue sets.
"""
from __future__ import annotations

LOOP_CONSTANTS = {"0.5": "stage_a", "0.75": "stage_b", "0.125": "inner", "0.25": "helper"}
HELPER_CALLS = {"ground_truth/stage_a": 3, "ground_truth/stage_b": 1}


def loop_body_lengths(function) -> dict[str, int]:
    """Instructions per trip of each construction loop, from self-looping SASS blocks."""
    out: dict[str, int] = {}
    for block in function.blocks.values():
        if block.start not in block.successors:
            continue
        ffma = [i for i in block.instructions if i.base == "FFMA"]
        if len(ffma) != 1:
            continue
        const = ffma[0].operands.split(",")[-1].strip()
        if const in LOOP_CONSTANTS:
            name = LOOP_CONSTANTS[const]
            if name in out:
                raise ValueError(f"two loops with FMA constant {const} in {function.name}: was a loop unrolled or duplicated?")
            out[name] = len(block.instructions)
    missing = set(LOOP_CONSTANTS.values()) - set(out)
    if missing:
        raise ValueError(f"construction loops not found in SASS: {sorted(missing)} (was a loop unrolled?)")
    return out


def expected_counts(function, *, ctas: int, threads: int, trips_a: int, trips_b: int, trips_inner: int,
                    trips_helper: int) -> dict[str, float]:
    """Warp-level executed instructions per leaf region (qualified names), by construction."""
    if threads % 32:
        raise ValueError(f"threads per CTA must be a multiple of 32, got {threads}")
    body = loop_body_lengths(function)
    warps = ctas * threads // 32
    helper = trips_helper * body["helper"]
    return {
        "ground_truth/stage_a": warps * (trips_a * body["stage_a"] + HELPER_CALLS["ground_truth/stage_a"] * helper),
        "ground_truth/stage_b": warps * (trips_b * body["stage_b"] + HELPER_CALLS["ground_truth/stage_b"] * helper),
        "ground_truth/stage_b/inner": warps * trips_inner * body["inner"],
    }


def expected_barriers(*, ctas: int, threads: int, trips_inner: int, **_) -> dict[str, float]:
    """Warp-level executed ``BAR`` instructions per leaf region: one per inner trip, none elsewhere."""
    warps = ctas * threads // 32
    return {"ground_truth/stage_a": 0.0, "ground_truth/stage_b": 0.0, "ground_truth/stage_b/inner": float(warps * trips_inner)}
