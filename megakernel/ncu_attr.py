"""Attribute Nsight Compute per-PC source counters of the megakernel to its device functions.

The megakernel's ops live in ``__noinline__`` device functions (gemv_tile, attention_partial, ...),
each a contiguous range of the cubin's .text; ncu's ``--page source --print-source sass --csv``
lists every SASS instruction with its absolute address, warp-stall samples (with the reason
columns ``stall_*``) and executed instructions. This sums them per function, offsets taken from
the cubin's symbol table (the kernel's first instruction is the first row of the CSV).

    python -m megakernel.ncu_attr ncu_source.csv megakernel.cubin [--top FUNCTION]
"""
from __future__ import annotations

import argparse
import csv
import re
import subprocess
from collections import Counter, defaultdict


def function_ranges(cubin: str) -> list[tuple[int, int, str]]:
    """(offset, size, name) of each function in the cubin's .text, from ``cuobjdump -elf``."""
    from argus_rt.tools import find_tool

    out = subprocess.run([str(find_tool("cuobjdump")), "-elf", cubin], capture_output=True, text=True,
                         check=True).stdout
    fns = []
    for line in out.splitlines():
        m = re.match(r"\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+\S+\s+\S+\s+\S+\s+(\S+)$", line)
        if m and int(m.group(2), 16) > 0:
            fns.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3)))
    return fns


def short(name: str) -> str:
    m = re.search(r"_ZN2mk\d+(\w+?)E", name)
    return m.group(1) if m else name.strip("$")


def attribute(csv_path: str, fns: list[tuple[int, int, str]]):
    """(per-function Counter of samples, instructions and stall_* columns, total Counter, rows)."""
    with open(csv_path, encoding="utf-8", errors="replace") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    header_at = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr, data = rows[header_at], [r for r in rows[header_at + 1:] if r and r[0].startswith("0x")]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_")]
    base = int(data[0][0], 16)

    def num(r, col):
        try:
            return float(r[ix[col]].replace(",", ""))
        except (ValueError, KeyError):
            return 0.0

    per, total, flat = defaultdict(Counter), Counter(), []
    for r in data:
        off = int(r[0], 16) - base
        name = next((short(n) for lo, sz, n in fns if lo <= off < lo + sz), "kernel body (worker loop, inlined ops)")
        c = per[name]
        s, e = num(r, "Warp Stall Sampling (All Samples)"), num(r, "Instructions Executed")
        c["samples"] += s
        c["instructions"] += e
        for col in stalls:
            c[col] += num(r, col)
        total["samples"] += s
        total["instructions"] += e
        flat.append((name, off, r[ix["Source"]].strip(), s, e, max(stalls, key=lambda col: num(r, col))))
    return per, total, flat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("cubin")
    ap.add_argument("--top", help="also list the hottest instructions of this function")
    a = ap.parse_args()
    per, total, flat = attribute(a.csv, function_ranges(a.cubin))
    print(f"total warp-stall samples {total['samples']:.0f}, warp instructions executed {total['instructions']:.3g}")
    print("| function | samples | instructions | top stall reasons (share of its samples) |\n|---|---|---|---|")
    for name, c in sorted(per.items(), key=lambda kv: -kv[1]["samples"]):
        if not c["samples"]:
            continue
        top = sorted(((k, v) for k, v in c.items() if k.startswith("stall_") and "Not Issued" not in k),
                     key=lambda kv: -kv[1])[:4]
        print(f"| {name} | {100 * c['samples'] / total['samples']:.1f}% | "
              f"{100 * c['instructions'] / total['instructions']:.1f}% | "
              + ", ".join(f"{k[6:]} {100 * v / c['samples']:.0f}%" for k, v in top) + " |")
    if a.top:
        sel = [x for x in flat if a.top in x[0]]
        s_tot = sum(x[3] for x in sel) or 1
        print(f"\nhottest instructions of {a.top} (share of its samples, executed warp instructions, top stall):")
        for name, off, src, s, e, stall in sorted(sel, key=lambda x: -x[3])[:15]:
            print(f"  +0x{off:05x} {100 * s / s_tot:5.1f}% {e:9.0f} {stall:24s} {src[:70]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
