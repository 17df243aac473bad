"""Predicted vs measured time over the (S, R) grid, one row of panels per case, saved as PNG.

    python -m overlap.plot RAW.json OUT.png

RAW.json is the benchmark's raw measurement file (``{"raw": [case, ...]}``); each cell shows the
best time over P for that (S, R): measured (every candidate timed) and predicted (the model).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _grid(times: dict):
    """{key 'S4_R8_P1': ms} -> (S list, R list, matrix[R][S] of the best ms over P)."""
    from .config import OverlapConfig

    best = {}
    for key, ms in times.items():
        c = OverlapConfig.from_key(key)
        best[(c.S, c.R)] = min(ms, best.get((c.S, c.R), float("inf")))
    s_vals = sorted({s for s, _ in best})
    r_vals = sorted({r for _, r in best})
    mat = [[best.get((s, r), float("nan")) for s in s_vals] for r in r_vals]
    return s_vals, r_vals, mat


def plot_surfaces(raw_cases: list[dict], path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in raw_cases if c.get("all_measured_ms") and c.get("all_predicted_ms")]
    if not cases:
        raise ValueError("no case has both all_measured_ms and all_predicted_ms; run the benchmark with exhaustive timing")
    fig, axes = plt.subplots(len(cases), 2, figsize=(10, 3.0 * len(cases)), squeeze=False, constrained_layout=True)
    for row, case in zip(axes, cases):
        panels = (("measured", case["all_measured_ms"]), ("model", case["all_predicted_ms"]))
        grids = [_grid(t) for _, t in panels]
        vmin = min(min(v for r in g[2] for v in r if v == v) for g in grids)
        vmax = max(max(v for r in g[2] for v in r if v == v) for g in grids)
        for ax, (label, _), (s_vals, r_vals, mat) in zip(row, panels, grids):
            im = ax.imshow(mat, origin="lower", aspect="auto", cmap="viridis_r", vmin=vmin, vmax=vmax)
            ax.set_xticks(range(len(s_vals)), [str(s) for s in s_vals])
            ax.set_yticks(range(len(r_vals)), [str(r) for r in r_vals])
            ax.set_xlabel("S (comm chunks)")
            ax.set_ylabel("R (comm SMs; 0: copy eng.)")
            for i, r in enumerate(mat):
                for j, v in enumerate(r):
                    if v == v:
                        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w")
            ax.set_title(f"{label}: M_shard={case['m_shard']} K={case['k']} N={case['n']} (ms, best over P)", fontsize=8)
        fig.colorbar(im, ax=list(row), label="ms")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)  # atomic: a reader never sees a half-written PNG
    return path


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m overlap.plot RAW.json OUT.png", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        data = json.load(fh)
    print(plot_surfaces(data["raw"], argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
