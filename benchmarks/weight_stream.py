#!/usr/bin/env python3
"""How fast CTAs stream GEMV weights, and what that streaming does to a dependent round trip.

The megakernel's evidence (megakernel/NOTES.md rows 10-16) is that every way of putting more weight
bytes in flight made the decode step slower, while its GEMV phases run near HBM bandwidth and HBM
idles between them. This isolates the two quantities that decide the design, outside the megakernel
(csrc/megakernel/bench/weight_stream.cu):

- the weight stream rate (TB/s over 1 GiB of unique bf16 weights, K = 2048) of the megakernel's own
  GEMV loops (`plain`: 2 loads in flight per warp, the default; `batch`: 16 per lane) with 16- and
  64-row tiles, and of a bulk-copy ring (`ring`: one loader thread keeps `pages` 16 KiB pages in
  flight with cp.async.bulk, 8 warps dot them from shared memory), on 131 or 263 streaming CTAs
  (2 per SM, as the megakernel);
- the rate one SM reaches when few SMs stream (8, 32, 64 CTAs: one per SM), and the rate of 128 CTAs re-reading
  8 MiB of L2-resident rows (O-proj's tile count and bytes), each by register loads and by the ring: whether an SM's
  register-load stream is capped below what DRAM or L2 could give it;
- the latency of one dependent load that hits L2 (an 8-line ring) and of one that misses to DRAM
  (a random ring over 256 MiB) in a probe CTA, while all streaming CTAs run, and unloaded;
- the same latency by the probe's other paths (`probe`): `ld` (ld.global.cg, the megakernel's polls), `bulk` (each hop
  a 16-byte cp.async.bulk completed on an mbarrier: the copy engine's path), and an L2-resident ring of 8 KiB vectors
  read as the megakernel reads an activation, by every thread's loads (`vec_ld`) or by one bulk copy (`vec_bulk`).
  Whether a bulk copy's round trip escapes the slowdown a register-streaming neighbour on the SM causes decides
  whether the megakernel's hand-offs should take their inputs by bulk copy (megakernel/NOTES.md, row 60).

Anchors in the same run: copy bandwidth (torch copy of 1 GiB, read + write) and cuBLAS's GEMV on the
same weights (torch.mv, bf16). Every configuration's output is checked against W.float() @ x
(relative L2 error < 1e-4) before it is timed. Times: %globaltimer from the first streaming CTA's
start to the last one's end (the probe CTA excluded), median over repeats.

Usage: python benchmarks/weight_stream.py [--reps N]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.record import gpu_name, record, spread  # noqa: E402

K = 2048
ROWS_TOTAL = 262144  # x K x 2 bytes = 1 GiB of weights
PAGE_BYTES = 16 * 1024
TOLERANCE = 1e-4
KERNELS = {"plain": ("stream_plain", 256), "batch": ("stream_batch", 256), "ring": ("stream_ring_copy", 288)}
PROBES = {"ld": 0, "bulk": 1, "vec_ld": 2, "vec_bulk": 3}  # weight_stream.cu's ProbeKind
VEC_FLOATS, VEC_RING = 2048, 8  # the vector probe's ring: 8 vectors of 8 KiB (weight_stream.cu VEC_FLOATS)
WALK_HOPS = 1_000_000  # DRAM chases up to this long are walked on the host to check where they ended
L2_ROWS = 2048  # x K x 2 bytes = 8 MiB: O-proj's weight bytes, which stay in the 50 MB L2 between launches
# (mode, streaming CTAs, tile rows, ring pages, weight rows): 1 GiB streams from DRAM; L2_ROWS re-reads L2-resident rows
CONFIGS = [(mode, ctas, rows, 0, ROWS_TOTAL) for mode in ("plain", "batch") for ctas in (131, 263) for rows in (16, 64)] + \
          [("ring", ctas, 16, pages, ROWS_TOTAL) for ctas in (131, 263) for pages in (2, 4, 6)] + \
          [(mode, ctas, 16, 6 if mode == "ring" else 0, ROWS_TOTAL) for mode in ("plain", "ring") for ctas in (8, 32, 64)] + \
          [(mode, 128, 16, 6 if mode == "ring" else 0, L2_ROWS) for mode in ("plain", "batch", "ring")]
# the other probe paths against the megakernel's layout (263 register-streaming CTAs) and a bulk-copy ring's
PROBE_CONFIGS = [(probe, mode, 263, 16, 4 if mode == "ring" else 0) for probe in ("bulk", "vec_ld", "vec_bulk")
                 for mode in ("plain", "ring")]


def build_cubin() -> Path:
    """nvcc the benchmark with the megakernel's headers and arch (megakernel.build.build_bench: Argus's build cache,
    rebuilt only when a source, header, flag or nvcc changes)."""
    from megakernel.build import BuildError, build_bench

    try:
        return build_bench("weight_stream")
    except BuildError as exc:
        raise SystemExit(f"weight_stream: {exc}") from None


class Bench:
    def __init__(self, torch, module):
        self.torch, self.module = torch, module
        dev = "cuda"
        gen = torch.Generator(device=dev)
        gen.seed()
        self.W = torch.randn(ROWS_TOTAL, K, device=dev, dtype=torch.bfloat16, generator=gen)
        self.x = torch.randn(K, device=dev, dtype=torch.float32, generator=gen)
        self.out = torch.zeros(ROWS_TOTAL, device=dev, dtype=torch.float32)
        self.reference = torch.cat([self.W[i:i + 16384].float() @ self.x for i in range(0, ROWS_TOTAL, 16384)])
        l2 = torch.zeros(8 * 64, device=dev, dtype=torch.int32)  # 8 lines 256 B apart, a ring
        l2[torch.arange(8, device=dev) * 64] = ((torch.arange(8, device=dev) + 1) % 8 * 64).int()
        lines = (256 << 20) // 128
        perm = torch.randperm(lines, device=dev, generator=gen)
        dram = torch.zeros(lines * 32, device=dev, dtype=torch.int32)  # one hop per 128-byte line, random order
        dram[perm * 32] = (torch.roll(perm, -1) * 32).int()
        self.l2_ring, self.dram_ring = l2, dram
        self.dram_next = dram.cpu().numpy()  # the host's copy, to walk the chase a launch reports
        vec = torch.zeros(VEC_RING, VEC_FLOATS, device=dev, dtype=torch.int32)  # word 0: the next vector's index
        vec[:, 0] = (torch.arange(VEC_RING, device=dev) + 1) % VEC_RING
        self.vec_ring = vec
        self.dram_lines, self.gen = lines, gen
        self.counters = torch.zeros(2, device=dev, dtype=torch.int32)
        self.probe_out = torch.zeros(6, device=dev, dtype=torch.int64)
        for name, _ in KERNELS.values():
            module.set_max_dynamic_shared(name, 6 * PAGE_BYTES)

    def launch(self, mode: str, ctas: int, rows: int, pages: int, min_hops: int = 0,
               rows_total: int = ROWS_TOTAL, probe: str = "ld") -> dict:
        """One launch over the first `rows_total` weight rows (fewer than all: an L2-resident set, warm after the
        first launch of a configuration), block 0 probing by `probe`'s path."""
        torch = self.torch
        name, threads = KERNELS[mode]
        tiles = rows_total // rows
        block_ns = torch.zeros(2 * max(ctas, 1), device="cuda", dtype=torch.int64)
        self.out.zero_()
        self.counters.zero_()
        self.probe_out.zero_()
        dram_start = self._dram_start()
        self.module.launch(name, grid=ctas + 1, block=threads, shared_mem=pages * PAGE_BYTES, args=[
            self.W, self.x, self.out, np.int32(K), np.int32(tiles), np.int32(rows), np.int32(pages),
            self.l2_ring, self.dram_ring, self.vec_ring, self.counters, np.uint32(min_hops), np.uint32(dram_start),
            np.int32(PROBES[probe]), self.probe_out, block_ns])
        torch.cuda.synchronize()
        out = self.probe_out.cpu().numpy()
        self._check_chase(probe, out, dram_start)
        res = {"l2_hop_ns": out[0] / max(out[1], 1), "dram_hop_ns": out[2] / out[3] if out[3] else None}
        if ctas:
            ns = block_ns.view(-1, 2).cpu().numpy()
            span = int(ns[:, 1].max() - ns[:, 0].min())
            res["tb_s"] = rows_total * K * 2 / span / 1e3
            got, ref = self.out[:rows_total], self.reference[:rows_total]
            res["rel_err"] = float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref))
        return res

    def _check_chase(self, probe: str, out, dram_start: int) -> None:
        """The probe's final ring indices are where its rings lead after the hops it reports (else its loads did
        not read what the hops say): a wrong chase is an error, not a latency."""
        hops_l2, hops_dram = int(out[1]), int(out[3])
        want_l2 = hops_l2 % VEC_RING if probe.startswith("vec") else hops_l2 % 8 * 64
        bad = [] if int(out[4]) == want_l2 else [f"L2 chase ended at {int(out[4])}, its ring at {want_l2}"]
        if not probe.startswith("vec"):
            end = int(out[5])
            if hops_dram <= WALK_HOPS:  # walked on the host (a few-CTA launch's millions of hops: the node test only)
                cur = dram_start
                for _ in range(hops_dram):
                    cur = int(self.dram_next[cur])
                if end != cur:
                    bad.append(f"DRAM chase ended at {end}, its ring at {cur}")
            elif end % 32 or not 0 <= end < len(self.dram_next) or self.dram_next[end] % 32:
                bad.append(f"DRAM chase ended at {end}, not a node of its ring")
        if bad or hops_l2 == 0:
            raise SystemExit(f"weight_stream: probe {probe!r}: " + ("; ".join(bad) or "no hops"))

    def _dram_start(self) -> int:
        """A random line of the DRAM ring (its word index): each launch chases lines no earlier launch left in L2."""
        line = int(self.torch.randint(0, self.dram_lines, (1,), device="cuda", generator=self.gen).item())
        return line * 32

    def anchors(self, reps: int) -> list[dict]:
        torch = self.torch
        src = self.W.view(-1)
        dst = torch.empty_like(src)
        xb = self.x.to(torch.bfloat16)
        y = torch.mv(self.W, xb)
        err = float(torch.linalg.vector_norm(y.float() - self.reference) / torch.linalg.vector_norm(self.reference))
        rows = []
        for label, fn, nbytes, rel in (("copy (torch, read + write)", lambda: dst.copy_(src), 2 * src.numel() * 2, None),
                                       ("cuBLAS GEMV (torch.mv bf16)", lambda: torch.mv(self.W, xb, out=y),
                                        src.numel() * 2, err)):
            fn()
            samples = []
            for _ in range(reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                torch.cuda.synchronize()
                samples.append(nbytes / (e0.elapsed_time(e1) * 1e-3) / 1e12)
            rows.append({"mode": label, "stream_ctas": "-", "tile_rows": "-", "pages": "-", "weights_mib": 1024,
                         "gb_s_per_cta": None,
                         "tb_s": float(np.median(samples)), "l2_hop_ns": None, "dram_hop_ns": None,
                         "rel_err": rel, "spread": {"tb_s": spread(samples)}})
        return rows


def median_or_none(values: list) -> float | None:
    """The median, or None for a quantity the probe did not measure (the vector probes have no DRAM chase)."""
    return None if any(v is None for v in values) else float(np.median(values))


def idle_row(probe: str, idle: list[dict]) -> dict:
    """The unloaded row of one probe path: the chase with nothing else on the GPU."""
    row = {"mode": "probe only (unloaded)", "probe": probe, "stream_ctas": 0, "tile_rows": "-", "pages": "-",
           "weights_mib": "-", "gb_s_per_cta": None, "tb_s": None, "rel_err": None}
    for k in ("l2_hop_ns", "dram_hop_ns"):
        row[k] = median_or_none([r[k] for r in idle])
    row["spread"] = {k: spread([r[k] for r in idle]) for k in ("l2_hop_ns", "dram_hop_ns") if row[k] is not None}
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="timed launches per configuration (default 5)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        raise SystemExit("weight_stream: needs torch with CUDA") from None
    if not torch.cuda.is_available():
        raise SystemExit("weight_stream: needs a CUDA GPU (none visible to torch)")
    from argus_rt.launch import CubinModule

    cubin = build_cubin()
    bench = Bench(torch, CubinModule.load(cubin))
    rows = bench.anchors(args.reps)
    for probe in PROBES:
        idle = [bench.launch("plain", 0, 16, 0, min_hops=4096, probe=probe) for _ in range(args.reps)]
        rows.append(idle_row(probe, idle))
        print(f"probe {probe:8s} unloaded: L2 hop {rows[-1]['l2_hop_ns']:.0f} ns", flush=True)
    for probe, mode, ctas, tile_rows, pages, rows_total in [("ld", *c) for c in CONFIGS] + \
            [(*c, ROWS_TOTAL) for c in PROBE_CONFIGS]:
        first = bench.launch(mode, ctas, tile_rows, pages, rows_total=rows_total, probe=probe)  # also warms L2 sets
        if not first["rel_err"] < TOLERANCE:
            raise SystemExit(f"weight_stream: {mode} ctas={ctas} rows={tile_rows} pages={pages}: relative error "
                             f"{first['rel_err']:.3g} >= {TOLERANCE} against W.float() @ x")
        runs = [bench.launch(mode, ctas, tile_rows, pages, rows_total=rows_total, probe=probe) for _ in range(args.reps)]
        row = {"mode": mode, "probe": probe, "stream_ctas": ctas, "tile_rows": tile_rows, "pages": pages or "-",
               "weights_mib": rows_total * K * 2 >> 20, "gb_s_per_cta": None}
        for k in ("tb_s", "l2_hop_ns", "dram_hop_ns"):
            row[k] = median_or_none([r[k] for r in runs])
        row["gb_s_per_cta"] = row["tb_s"] * 1e3 / ctas
        row["rel_err"] = max(r["rel_err"] for r in runs)
        row["spread"] = {k: spread([r[k] for r in runs]) for k in ("tb_s", "l2_hop_ns", "dram_hop_ns")
                         if row[k] is not None}
        rows.append(row)
        dram = "-" if row["dram_hop_ns"] is None else f"{row['dram_hop_ns']:.0f} ns"
        print(f"{mode:6s} probe {probe:8s} ctas {ctas:3d} rows {tile_rows:2d} pages {pages} {row['weights_mib']:4d} MiB: "
              f"{row['tb_s']:.2f} TB/s ({row['gb_s_per_cta']:.1f} GB/s per CTA), "
              f"L2 hop {row['l2_hop_ns']:.0f} ns, DRAM hop {dram}", flush=True)
    notes = ("Weights: 1 GiB of unique bf16 rows (K = 2048), so no repeat hits L2, or (weights_mib 8) the first 8 MiB "
             "re-read by every launch, L2-resident after the configuration's first (checked) launch. Few-CTA rows: "
             "one CTA per SM as the block scheduler spreads them (not pinned). `tb_s`: weight bytes over the span "
             "from the first streaming CTA's start to the last one's end (%globaltimer); anchors by CUDA events. "
             "`l2_hop_ns` / `dram_hop_ns`: ns per dependent load of the probe CTA (block 0) while every streaming CTA "
             "runs; 'probe only' is the same chase with nothing else on the GPU. `probe`: the chase's path (ld: "
             "ld.global.cg; bulk: a 16-byte cp.async.bulk per hop; vec_ld / vec_bulk: an 8 KiB L2-resident vector per "
             "hop, by every thread's loads or one bulk copy; the vector rows have no DRAM chase). Each probe's final "
             "ring index is checked against its ring walked the hops it reports. Each configuration's output is "
             f"checked against W.float() @ x (relative L2 error < {TOLERANCE}) before timing. Kernel: "
             "csrc/megakernel/bench/weight_stream.cu (plain / batch: the megakernel's gemv_rows loops; ring: bulk copies "
             "of 16 KiB pages by one loader thread).")
    record("weight_stream", rows, title="Weight streaming rate and dependent-load latency under load", notes=notes,
           gpu=gpu_name(), columns=["mode", "probe", "stream_ctas", "tile_rows", "pages", "weights_mib", "tb_s",
                                    "gb_s_per_cta", "l2_hop_ns", "dram_hop_ns", "rel_err"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
