"""Phase timeline of decode steps from an Argus region trace of the megakernel.

Each worker ticket records ``core_loop`` (ticket, instruction fetch, dependency wait) and then the
regions of its op body; the op is told apart by which body regions follow (QkvHead: norm + gemm +
kv_update; AttnPartial: attention; OProj: attention + gemm; GateUp: norm + gemm; Down: gemm;
Logits: norm + logits; Sample: sampling; Embed: nothing). Per (step, layer, op) this gives the
phase's tiles, when its first body started (its dependency resolved), when its last body ended,
and so the hand-off gap from the previous phase's last end to this phase's first start.

    python -m megakernel.timeline [--steps 131 133] [--out timeline.json]   (needs a GPU)
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np

PHASES = ("embed", "qkv", "attn", "oproj", "gateup", "down", "logits", "sample")


def classify(body: frozenset, layer: int, n_layers: int) -> str:
    if "sampling" in body:
        return "sample"
    if "logits" in body:
        return "logits"
    if "kv_update" in body:
        return "qkv"
    if "attention" in body:
        return "oproj" if "gemm" in body else "attn"
    if "norm" in body:
        return "gateup"
    if "gemm" in body:
        return "down"
    return "embed" if layer == 0 else "sample"  # a forced step's Sample records nothing


def tickets(rows, names: dict[int, str], n_layers: int) -> list[dict]:
    """One dict per ticket of warp 0 of the worker CTAs: cta, step, layer, op, taken, body_start, end,
    and the time in each body region."""
    rows = rows[(rows["warp"] == 0) & (rows["cta"] > 0) & (rows["depth"] <= 1)]
    rows = rows[np.lexsort((rows["start"], rows["cta"]))]
    out, cur = [], None
    for r in rows:
        full = names.get(int(r["region_id"]), "?")
        coord = int(r["coord"])
        if int(r["depth"]) == 1:  # a detail region (MK_DETAIL_REGIONS builds): its time, and when the wait saw its counter
            if cur is not None and int(r["cta"]) == cur["cta"]:
                detail = "/".join(full.split("/")[1:])
                cur["regions"][detail] = cur["regions"].get(detail, 0) + int(r["duration"])
                if detail == "core_loop/wait":
                    cur["seen"] = int(r["end"])
            continue
        name = full.split("/")[-1]
        if name == "core_loop":
            if cur is not None:
                out.append(cur)
            cur = {"cta": int(r["cta"]), "sm": int(r["sm"]), "step": coord >> 8, "layer": coord & 0xFF, "taken": int(r["start"]),
                   "body_start": int(r["end"]), "end": int(r["end"]), "regions": {}}
            continue
        if cur is None or int(r["cta"]) != cur["cta"]:
            continue
        cur["regions"][name] = cur["regions"].get(name, 0) + int(r["duration"])
        cur["end"] = max(cur["end"], int(r["end"]))
    if cur is not None:
        out.append(cur)
    for t in out:
        t["op"] = classify(frozenset(k for k in t["regions"] if "/" not in k), t["layer"], n_layers)
    return out


def phase_table(tix: list[dict]) -> list[dict]:
    """Per (step, layer, op) in time order: tiles, first body start, last end, span, gap before it,
    mean dependency wait (core_loop) and mean body time per tile (ns)."""
    groups = defaultdict(list)
    for t in tix:
        groups[(t["step"], t["layer"], t["op"])].append(t)
    phases = []
    for (step, layer, op), ts in groups.items():
        phases.append({"step": step, "layer": layer, "op": op, "tiles": len(ts),
                       "first_start": min(t["body_start"] for t in ts), "last_end": max(t["end"] for t in ts),
                       "wait_mean": float(np.mean([t["body_start"] - t["taken"] for t in ts])),
                       "body_mean": float(np.mean([t["end"] - t["body_start"] for t in ts])),
                       "body_max": float(max(t["end"] - t["body_start"] for t in ts)),
                       # the most tiles of the phase one SM / one CTA ran: a phase streams at the pace of its
                       # busiest SM
                       "sm_max": max(Counter(t["sm"] for t in ts).values()),
                       "cta_max": max(Counter(t["cta"] for t in ts).values()),
                       # detail builds: when the first tile's wait saw the dependency (None without one)
                       "first_seen": min((t["seen"] for t in ts if "seen" in t), default=None),
                       "regions": {k: float(np.mean([t["regions"].get(k, 0) for t in ts]))
                                   for k in sorted({k for t in ts for k in t["regions"]})}})
    phases.sort(key=lambda p: (p["step"], p["layer"], PHASES.index(p["op"])))
    for prev, p in zip([None] + phases[:-1], phases):
        p["span"] = p["last_end"] - p["first_start"]
        p["gap"] = p["first_start"] - prev["last_end"] if prev and prev["step"] == p["step"] else 0
        # The gap in two: the previous phase's last end to the first wait seeing the counter (barrier,
        # release add, its way to L2 and the poll), then from there to the first body (barrier, markers).
        if p["gap"] and p["first_seen"] is not None:
            p["seen_after"] = p["first_seen"] - prev["last_end"]
            p["wake"] = p["first_start"] - p["first_seen"]
    return phases


def summary(phases: list[dict]) -> dict[str, dict[str, float]]:
    """Per op: mean over (step, layer) of tiles, span, gap, wait and body per tile (us)."""
    by = defaultdict(list)
    for p in phases:
        by[p["op"]].append(p)
    out = {}
    for op in PHASES:
        ps = by.get(op)
        if not ps:
            continue
        out[op] = {"phases": len(ps), "tiles": float(np.mean([p["tiles"] for p in ps])),
                   "span_us": float(np.mean([p["span"] for p in ps])) / 1e3,
                   "gap_us": float(np.mean([p["gap"] for p in ps])) / 1e3,
                   "wait_us": float(np.mean([p["wait_mean"] for p in ps])) / 1e3,
                   "body_us": float(np.mean([p["body_mean"] for p in ps])) / 1e3,
                   "body_max_us": float(np.mean([p["body_max"] for p in ps])) / 1e3,
                   "sm_max": float(np.mean([p["sm_max"] for p in ps])), "cta_max": float(np.mean([p["cta_max"] for p in ps])),
                   "regions_us": {k: float(np.mean([p["regions"].get(k, 0) for p in ps])) / 1e3
                                  for k in sorted({k for p in ps for k in p["regions"]})}}
        split = [p for p in ps if "seen_after" in p]
        if split:  # detail builds only
            out[op]["seen_after_us"] = float(np.mean([p["seen_after"] for p in split])) / 1e3
            out[op]["wake_us"] = float(np.mean([p["wake"] for p in split])) / 1e3
    return out


def format_summary(s: dict[str, dict[str, float]]) -> str:
    lines = ["| op | phases | tiles | span us | gap before us | wait/tile us | body/tile us | slowest body us | "
             "regions per tile us | max tiles per SM / CTA |", "|---|---|---|---|---|---|---|---|---|---|"]
    for op, v in s.items():
        regions = ", ".join(f"{k} {x:.2f}" for k, x in v.get("regions_us", {}).items())
        gap = f"{v['gap_us']:.2f}"
        if "seen_after_us" in v:  # detail builds: (end -> counter seen + seen -> body)
            gap += f" ({v['seen_after_us']:.2f} + {v['wake_us']:.2f})"
        lines.append(f"| {op} | {v['phases']} | {v['tiles']:.0f} | {v['span_us']:.2f} | {gap} | "
                     f"{v['wait_us']:.2f} | {v['body_us']:.2f} | {v.get('body_max_us', 0):.2f} | {regions} | "
                     f"{v.get('sm_max', 0):.1f} / {v.get('cta_max', 0):.1f} |")
    return "\n".join(lines)


def profile(weights, prompt: list[int], steps: range, **decoder_kw):
    """Trace the given steps with the profile hook; returns (phases, summary, step_ns)."""
    from argus_rt.trace import pair_intervals

    from .regions import region_tree
    from .runtime import MegakernelDecoder

    dec = MegakernelDecoder(weights, argus_mode=2, **decoder_kw)
    dec.generate(prompt, n_new=steps.stop - len(prompt) + 1, chunk=64, profile_steps=steps)
    tree = region_tree()
    iv = pair_intervals(dec.traces[0][1].decode(known_ids=[r.id for r in tree]))
    names = {r.id: r.name for r in tree}
    phases = phase_table(tickets(iv.rows, names, dec.config.n_layers))
    return phases, summary(phases), iv.incomplete


def main() -> int:
    import argparse

    import torch

    from tinyllama.config import get_config
    from tinyllama.weights import random_weights

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs=2, default=(131, 133))
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    c = get_config("tinyllama-1.1b", max_seq=1024)
    w = random_weights(c, seed=a.seed, device="cuda")
    prompt = torch.randint(0, c.vocab, (a.steps[0] - 2,), generator=torch.Generator().manual_seed(a.seed)).tolist()
    phases, s, incomplete = profile(w, prompt, range(*a.steps))
    print(format_summary(s))
    print(f"incomplete trace: {incomplete}")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"summary": s, "phases": phases}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
