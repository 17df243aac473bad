"""Decoded occurrences as comparable keys, for tests that check a ring against the occurrences a kernel must have
recorded (tests/test_regcursor_apart.py, tests/test_regcursor_lanes.py)."""
from __future__ import annotations


def occurrence_key(rows, i):
    """Row ``i`` of ``pair_intervals(...).rows`` as (region, coord, lanes, depth, parent's (region, coord) or None):
    what identifies an occurrence independently of the order the ring holds it in."""
    r = rows[i]
    parent = int(r["parent"])
    return (int(r["region_id"]), int(r["coord"]), int(r["lanes"]), int(r["depth"]),
            None if parent < 0 else (int(rows[parent]["region_id"]), int(rows[parent]["coord"])))
