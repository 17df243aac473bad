"""What a run leaves behind: result rows, the speedup table, the verdict, and the best-so-far plot.

All of it is computed from the :class:`~.search.SearchResult` documents (``trials.json``), so
``--replot trials.json`` renders them again without a query (e.g. on a CPU machine after a GPU run
whose host has no matplotlib).
"""
from __future__ import annotations

import math
from pathlib import Path

ROW_COLUMNS = ["kernel", "shape", "policy", "trials_to_best", "best_speedup", "held_out", "start_ns", "best_ns",
               "best_config", "failed_trials", "trials_run"]


def _config_text(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def result_rows(results: list[dict]) -> list[dict]:
    """One row per (kernel, shape, policy): the issue's six fields, plus the times and the config."""
    rows = []
    for r in results:
        best = r["trials"][r["best_trial"] - 1]
        failed = sum(1 for t in r["trials"] if t["score"] is None)
        for s in r["shape_speedups"]:
            rows.append({"kernel": r["kernel"], "shape": s["shape"], "policy": r["policy"],
                         "trials_to_best": r["best_trial"],
                         "best_speedup": None if s["speedup"] is None else round(s["speedup"], 4),
                         "held_out": s["held_out"], "start_ns": s["start_ns"], "best_ns": s["best_ns"],
                         "best_config": _config_text(best["config"]), "failed_trials": failed,
                         "trials_run": len(r["trials"])})
    return rows


def _geomean(values) -> float | None:
    values = [v for v in values if v is not None]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _best_within(result: dict, n: int | None) -> tuple[float, int]:
    """(incumbent's score, the trial that set it) after trial ``n`` (None: the whole search)."""
    if n is None:
        return result["trials"][result["best_trial"] - 1]["score"], result["best_trial"]
    trials = result["trials"][:n]
    return trials[-1]["best_score"], max(t["index"] for t in trials if t["accepted"])


def verdict(results: list[dict], min_gain: float) -> list[str]:
    """Per kernel, whether region evidence helped, from the numbers alone: policy (b) helped if its
    tuning score beats (a)'s by more than ``min_gain``, or ties within it and got there in fewer
    trials; it hurt in the mirror cases; else no difference. Held-out speedups and the device
    seconds the diagnoses cost are stated next to it, whatever the verdict. A run the deadline cut
    off is compared at the trial count both policies reached (the held-out speedups stay those of
    each policy's final best)."""
    out = []
    for kernel in dict.fromkeys(r["kernel"] for r in results):
        by = {r["policy"]: r for r in results if r["kernel"] == kernel}
        if set(by) != {"time", "regions"}:
            out.append(f"{kernel}: only policy {', '.join(by)} ran; no comparison")
            continue
        a, b = by["time"], by["regions"]
        cut = bool(a.get("not_run") or b.get("not_run"))
        n = min(len(a["trials"]), len(b["trials"])) if cut else None
        (sa, ta), (sb, tb) = (_best_within(r, n) for r in (a, b))
        ha, hb = (_geomean(s["speedup"] for s in r["shape_speedups"] if s["held_out"]) for r in (a, b))
        if sb > sa * (1 + min_gain):
            word = "helped (higher tuning speedup)"
        elif sa > sb * (1 + min_gain):
            word = "did not help (lower tuning speedup)"
        elif tb < ta:
            word = "helped (same speedup, fewer trials)"
        elif tb > ta:
            word = "did not help (same speedup, more trials)"
        else:
            word = "made no difference"
        held = (f"held-out geomean {hb:.3f} (regions) vs {ha:.3f} (time)" if ha and hb
                else "held-out speedups incomplete (a held-out measurement failed)")
        note = (f"; cut off by the deadline: {len(b['trials'])} (regions) and {len(a['trials'])} (time) of "
                f"{a['budget']} trials ran, compared at trial {n}" if cut else "")
        out.append(f"{kernel}: region evidence {word}: tuning speedup {sb:.3f} in {tb} trials (regions) "
                   f"vs {sa:.3f} in {ta} (time); {held}; diagnoses cost {b['diagnosis_seconds']:.0f} s "
                   f"of wall time for {len(b['diagnoses'])} incumbents{note}")
    return out


def speedup_table(results: list[dict]) -> str:
    """Markdown: per kernel and shape, each policy's final speedup over the start and trials to best."""
    rows = result_rows(results)
    keys = list(dict.fromkeys((r["kernel"], r["shape"], r["held_out"]) for r in rows))
    cell = {(r["kernel"], r["shape"], r["policy"]): r for r in rows}
    lines = ["| kernel | shape | held out | speedup, time only (a) | speedup, regions (b) | trials to best (a / b) |",
             "| --- | --- | --- | --- | --- | --- |"]

    def fmt(r):
        return "—" if r is None else ("failed" if r["best_speedup"] is None else f"{r['best_speedup']:.3f}x")
    for kernel, shape, held in keys:
        a, b = cell.get((kernel, shape, "time")), cell.get((kernel, shape, "regions"))
        trials = " / ".join(str(r["trials_to_best"]) if r else "—" for r in (a, b))
        lines.append(f"| {kernel} | {shape} | {'yes' if held else 'no'} | {fmt(a)} | {fmt(b)} | {trials} |")
    return "\n".join(lines) + "\n"


def plot_best_so_far(results: list[dict], path: Path) -> Path:
    """PNG: per kernel, the incumbent's tuning speedup after each trial, one line per policy; failed
    trials marked x on the axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kernels = list(dict.fromkeys(r["kernel"] for r in results))
    fig, axes = plt.subplots(1, len(kernels), figsize=(5.5 * len(kernels), 3.8), squeeze=False, constrained_layout=True)
    for ax, kernel in zip(axes[0], kernels):
        for r in (r for r in results if r["kernel"] == kernel):
            x = [t["index"] for t in r["trials"]]
            label = {"time": "(a) time only", "regions": "(b) region evidence"}[r["policy"]]
            line, = ax.step(x, [t["best_score"] for t in r["trials"]], where="post", label=label)
            failed = [t["index"] for t in r["trials"] if t["score"] is None]
            ax.plot(failed, [1.0] * len(failed), "x", color=line.get_color(), alpha=0.7)
        ax.set_title(f"{kernel} (tuning shapes; x = failed trial)")
        ax.set_xlabel("trial")
        ax.set_ylabel("best-so-far speedup over start (geomean)")
        ax.grid(alpha=0.3)
        ax.legend()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
