"""Markdown tables of a report's PC-attributed signals, one row per region: what the megakernel case
studies (docs/case_studies/megakernel.md) quote from `argus query examples/megakernel ... --json FILE`.

    python scripts/attributed_tables.py REPORT.json [--top 4]

Tables: executed warp instructions per region with its largest opcode families, next to the
-lineinfo per-file view; barriers and barrier-stall samples per region; stall samples per region
with the largest reasons; the branch/predicate profile per region. Every number is the report's own
value (its own region, not the subtree's "(inclusive)" sum); nothing is computed but shares and sums.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def _by_region(values: list[dict], signal: str) -> dict[str, dict[str, float]]:
    """{region: {metric: value}}, the regions with a non-zero value only (a region compiled out of the
    profiled build, or one that owns no PC, has zeros: listed by :func:`_empty` instead)."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for v in values:
        metric = str(v.get("metric", ""))
        if v.get("signal") == signal and v.get("region") and v.get("value") is not None and "(inclusive)" not in metric:
            out[v["region"]][metric] = float(v["value"])
    return {r: {k: x for k, x in m.items() if x} for r, m in out.items() if any(m.values())}


def _empty(values: list[dict], signal: str) -> list[str]:
    named = {v["region"] for v in values if v.get("signal") == signal and v.get("region")}
    return sorted(named - set(_by_region(values, signal)))


def _files(values: list[dict], signal: str) -> dict[str, float]:
    return {str(v["metric"]): float(v["value"]) for v in values
            if v.get("signal") == signal and v.get("region") is None and "[file " in str(v.get("metric", ""))}


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _largest_table(values: list[dict], signal: str, count_label: str, parts_label: str, top: int) -> list[str]:
    """Per region (largest first): its total, its share of all regions', and its ``top`` largest metrics."""
    per = _by_region(values, signal)
    total = sum(sum(m.values()) for m in per.values())
    rows = [f"| region | {count_label} | share | {parts_label} |", "|---|---|---|---|"]
    for region, parts in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(parts.values())
        largest = ", ".join(f"{k} {_share(v, n)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:top])
        rows.append(f"| {region} | {n:.4g} | {_share(n, total)} | {largest} |")
    return rows


def instruction_table(values: list[dict], top: int) -> list[str]:
    rows = _largest_table(values, "instruction_mix", "warp instructions", "largest opcode families", top)
    files = _files(values, "instruction_mix")
    if files:
        rows += ["", "| -lineinfo file view | warp instructions | share |", "|---|---|---|"]
        whole = sum(files.values())
        rows += [f"| {name} | {v:.4g} | {_share(v, whole)} |" for name, v in sorted(files.items(), key=lambda kv: -kv[1])]
    return rows


def barrier_table(values: list[dict]) -> list[str]:
    bars = _by_region(values, "barrier_count")
    stalls = _by_region(values, "stall_reasons")
    all_samples = sum(sum(m.values()) for m in stalls.values())
    rows = ["| region | BAR executed | barrier-stall samples | share of all samples |", "|---|---|---|---|"]
    regions = sorted(set(bars) | set(stalls), key=lambda r: (-stalls.get(r, {}).get("barrier", 0.0), r))
    for r in regions:
        b = sum(bars.get(r, {}).values())
        s = stalls.get(r, {}).get("barrier", 0.0)
        rows.append(f"| {r} | {b:.4g} | {s:.4g} | {_share(s, all_samples)} |")
    return rows


def stall_table(values: list[dict], top: int) -> list[str]:
    return _largest_table(values, "stall_reasons", "stall samples", "largest reasons", top)


def branch_table(values: list[dict]) -> list[str]:
    per = _by_region(values, "branch_profile")
    rows = ["| region | branches (warp) | divergent | thread instructions | predicated off | share off |",
            "|---|---|---|---|---|---|"]
    for region, m in sorted(per.items(), key=lambda kv: -kv[1].get("branch_inst_executed", 0.0)):
        t, off = m.get("thread_inst_executed", 0.0), m.get("predicated_off", 0.0)
        rows.append(f"| {region} | {m.get('branch_inst_executed', 0.0):.4g} | {m.get('divergent_branches', 0.0):.4g} | "
                    f"{t:.4g} | {off:.4g} | {_share(off, t)} |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--top", type=int, default=4)
    args = ap.parse_args(argv)
    try:
        doc = json.loads(args.report.read_text(encoding="utf-8"))
        values = doc["values"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"attributed_tables: {args.report}: not an Argus report ({exc})", file=sys.stderr)
        return 2
    signals = {v.get("signal") for v in values}
    sections = [("instruction_mix", "Executed instructions by region", lambda: instruction_table(values, args.top)),
                ("barrier_count", "Barriers by region", lambda: barrier_table(values)),
                ("stall_reasons", "Stall samples by region", lambda: stall_table(values, args.top)),
                ("branch_profile", "Branch and predicate profile by region", lambda: branch_table(values))]
    for signal, title, table in sections:
        if signal in signals:
            print(f"### {title} (`{signal}`)\n")
            print("\n".join(table()) + "\n")
            empty = _empty(values, signal)
            if empty:
                print(f"Regions with no counts: {', '.join(empty)}\n")
        else:
            print(f"### {title}: `{signal}` not in the report\n")
    if doc.get("unanswered"):
        print("Unanswered: " + "; ".join(f"{u.get('signal')}: {u.get('reason')}" for u in doc["unanswered"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
