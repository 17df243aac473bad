#!/usr/bin/env python3
"""What a loader warp streaming weights across dependency waits buys over register-streamed workers.

The megakernel's workers (2 CTAs per SM, register loads after each tile's dependency wait) run a TinyLlama
layer in ~37 us against ~20.6 us of DRAM time: DRAM idles during attention and the hand-offs. The design of
HazyResearch's megakernel keeps it busy: one CTA per SM whose loader warp bulk-copies the CTA's upcoming weight
tiles into a ring of shared-memory pages, never waiting on a dependency (weights do not depend on activations).
This measures both on the layer's phase chain, outside the megakernel (csrc/megakernel/bench/layer_stream.cu):
QKV 2560 x 2048 (160 tiles), ATTN (32 weightless tiles that spin --attn-ns), O 2048 x 2048 (128), gate/up
11264 x 2048 (256), Down 2048 x 5632 (256), each phase waiting for the whole previous one, fresh weights per
layer (88.1 MB; 22 layers = 1.94 GB, nothing repeats in L2). Rows:

- regs: the megakernel's loop (gemv_rows / gemv_halves, 32 KiB L2 head prefetch before the wait), 2 CTAs per
  SM minus one (263 on H200: the megakernel's worker count, its 264th CTA being the scheduler);
- ring: one CTA per SM, 8 consumer warps + 1 loader warp, `pages` x `page_kib` KiB of shared memory (ring16: 16
  consumer warps); each consumer thread owns one 16-byte chunk of every row;
- rows: the same loader and ring, 16 consumer warps each owning whole rows (activations in shared memory);
- mma: rows with the K-2048 phases multiplied on the tensor cores (mma.m16n8k16, activations as bf16 high part plus
  bf16 remainder, fp32 accumulation), 8 rows per warp at a time;
- *-stream: the same kernels with no dependency waits and no attention spin: how fast each streams alone;
- regs+stamps: regs with each tile's hand-off stamped in three parts (handoff_us: the previous phase's end to the
  dependency seen, the activations' load, the GEMV), medians over workers and steady layers.

Anchor in the same run: torch copy of 1 GiB (read + write bytes / time); floor = 88.1 MB x layers / that rate.
Every configuration's GEMV outputs (layers 0, L/2, L-1) are checked against W.float() @ x (relative L2 error
< 1e-4), and ATTN's copies of QKV's outputs exactly, before it is timed. Times: %globaltimer in the kernel;
us_per_layer is the steady state (last layer's end - first layer's end) / (layers - 1), span_ms the first
worker's start to the last one's end.

Usage: python benchmarks/layer_stream.py [--layers 22] [--attn-ns 3000] [--reps 5] [--modes regs,ring,...]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.record import gpu_name, record, spread  # noqa: E402

TOLERANCE = 1e-4
TIMEOUT_NS = 2_000_000_000  # every in-kernel wait gives up after this
PF_HEAD = 32768  # regs: bytes of a tile's head L2-prefetched before its wait (the megakernel's MK_PF_OWN_CAP)
MAX_SMEM = 227 * 1024  # dynamic + static shared memory of one CTA on H100 / H200
# mode: (kernel, threads per CTA, static shared memory allowed beside the pages: cuobjdump -res-usage plus margin,
# checked by tests/test_layer_stream.py). ring: 8 consumer warps each owning a chunk of every row; ring16: 16 of
# them; rows: 16 consumer warps each owning whole rows, activations in shared memory (layer_stream.cu: layer_rows).
KERNELS = {"regs": ("layer_regs", 256, 0), "ring": ("layer_ring", 288, 4096), "ring16": ("layer_ring16", 544, 4096),
           "rows": ("layer_rows", 544, 26624), "mma": ("layer_mma", 544, 35840)}
PAGED = ("ring", "ring16", "rows", "mma")  # the modes with a page ring
MODES = ("regs", "ring", "ring16", "rows", "mma", "regs-stamps", "regs-stream", "ring-stream", "ring16-stream", "rows-stream",
         "mma-stream")
ERRORS = {1: "a dependency wait", 2: "a consumer's wait for a page", 3: "the loader's wait for a free page"}


@dataclass(frozen=True)
class Phase:
    name: str
    rows: int  # outputs per layer (ATTN: 32 x 64 copied floats)
    k: int  # row length in bf16 (0: no weights)
    tile_rows: int
    tiles: int

    @property
    def weight_bytes(self) -> int:
        return self.rows * self.k * 2

    @property
    def row_bytes(self) -> int:
        return self.k * 2


# The kernel's phase table (layer_stream.cu: ROWS, KDIM, TILE_ROWS, TILES), TinyLlama-1.1B's layer.
PHASES = (Phase("qkv", 2560, 2048, 16, 160), Phase("attn", 2048, 0, 64, 32), Phase("o", 2048, 2048, 16, 128),
          Phase("gu", 11264, 2048, 44, 256), Phase("down", 2048, 5632, 8, 256))
OUT_OFF = tuple(sum(p.rows for p in PHASES[:i]) for i in range(len(PHASES)))  # a layer's outputs, back to back
OUT_PER_LAYER = sum(p.rows for p in PHASES)


@dataclass(frozen=True)
class Config:
    mode: str  # a KERNELS key
    workers: int
    pages: int = 0  # ring only
    page_kib: int = 0
    wait: bool = True  # False: the streaming control (no dependency waits, no attention spin)
    stamps: bool = False  # regs: stamp each tile's hand-off parts (two %globaltimer stores by thread 0 per tile)

    @property
    def label(self) -> str:
        return self.mode + ("" if self.wait else "-stream") + ("+stamps" if self.stamps else "")

    @property
    def smem_bytes(self) -> int:
        return self.pages * self.page_kib * 1024


def layer_weight_bytes() -> int:
    """bf16 weight bytes of one layer: 88,080,384 at TinyLlama-1.1B's shapes."""
    return sum(p.weight_bytes for p in PHASES)


def worker_tiles(phase: Phase, worker: int, workers: int) -> list[int]:
    """The tiles of ``phase`` that ``worker`` runs (static: tile t to worker t % workers)."""
    return list(range(worker, phase.tiles, workers))


def worker_plan(worker: int, workers: int, layers: int) -> list[tuple[int, str, int]]:
    """(layer, phase, tile) in the order the worker runs them; the ring's loader copies the weight tiles in it."""
    return [(layer, p.name, t) for layer in range(layers) for p in PHASES for t in worker_tiles(p, worker, workers)]


def rows_per_page(phase: Phase, page_bytes: int) -> int:
    """Whole rows per ring page (layer_stream.cu: rows_per_page)."""
    return min(phase.tile_rows, page_bytes // phase.row_bytes)


def tile_pages(phase: Phase, page_bytes: int) -> list[int]:
    """Bytes of each ring page of one tile of ``phase`` (empty for ATTN)."""
    if not phase.k:
        return []
    rpp = rows_per_page(phase, page_bytes)
    return [min(rpp, phase.tile_rows - r0) * phase.row_bytes for r0 in range(0, phase.tile_rows, rpp)]


def worker_bytes(worker: int, workers: int, page_bytes: int) -> int:
    """Weight bytes one layer's pages bring to ``worker`` (summed over workers: layer_weight_bytes())."""
    by_name = {p.name: p for p in PHASES}
    return sum(sum(tile_pages(by_name[name], page_bytes)) for _, name, _ in worker_plan(worker, workers, 1))


def check_config(cfg: Config) -> None:
    """Refuse a configuration the kernel cannot run, with the reason."""
    if cfg.mode not in KERNELS:
        raise ValueError(f"mode {cfg.mode!r}: valid {sorted(KERNELS)}")
    if cfg.workers < 1:
        raise ValueError(f"workers must be >= 1, got {cfg.workers}")
    if cfg.stamps and cfg.mode != "regs":
        raise ValueError(f"hand-off stamps are layer_regs' only, not {cfg.mode!r}'s")
    if cfg.mode == "mma" and cfg.page_kib != 16:
        raise ValueError(f"mma pages must be 16 KiB (4 rows of K 2048, taken in pairs), got {cfg.page_kib}")
    if cfg.mode in PAGED:
        if not 1 <= cfg.pages <= 32:
            raise ValueError(f"ring pages must be in [1, 32] (one mbarrier pair each), got {cfg.pages}")
        longest = max(p.row_bytes for p in PHASES)
        if cfg.page_kib * 1024 < longest:
            raise ValueError(f"page of {cfg.page_kib} KiB holds no {longest}-byte Down row")
        if cfg.smem_bytes + KERNELS[cfg.mode][2] > MAX_SMEM:
            raise ValueError(f"{cfg.pages} x {cfg.page_kib} KiB pages exceed the {MAX_SMEM // 1024} KiB of shared "
                             "memory per CTA")


def configs(modes: list[str], sms: int) -> list[Config]:
    """The measured rows for a GPU of ``sms`` SMs; modes from MODES."""
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown mode(s) {bad}: valid {list(MODES)}")
    out = []
    if "regs" in modes:
        out.append(Config("regs", 2 * sms - 1))
    if "ring" in modes:
        out += [Config("ring", sms, pages, 16) for pages in (4, 8, 13)] + [Config("ring", sms, 6, 32)]
    if "ring16" in modes:
        out += [Config("ring16", sms, pages, 16) for pages in (8, 13)]
    if "rows" in modes:
        # 16 x 12 KiB: one 11 KiB Down row per page, so all 16 warps' Down rows fit the ring at once
        out += [Config("rows", sms, pages, 16) for pages in (8, 12)] + [Config("rows", sms, 6, 32),
                                                                        Config("rows", sms, 16, 12)]
    if "mma" in modes:
        out += [Config("mma", sms, pages, 16) for pages in (8, 12)]
    if "regs-stamps" in modes:  # regs with its tiles' hand-off parts stamped
        out.append(Config("regs", 2 * sms - 1, stamps=True))
    if "regs-stream" in modes:
        out.append(Config("regs", 2 * sms - 1, wait=False))
    if "ring-stream" in modes:
        out.append(Config("ring", sms, 13, 16, wait=False))
    if "ring16-stream" in modes:
        out.append(Config("ring16", sms, 13, 16, wait=False))
    if "rows-stream" in modes:
        out += [Config("rows", sms, 12, 16, wait=False), Config("rows", sms, 16, 12, wait=False)]
    if "mma-stream" in modes:
        out.append(Config("mma", sms, 12, 16, wait=False))
    for cfg in out:
        check_config(cfg)
    return out


def build_cubin() -> Path:
    """nvcc the benchmark with the megakernel's headers and arch (megakernel.build.build_bench: Argus's build cache,
    rebuilt only when a source, header, flag or nvcc changes)."""
    from megakernel.build import BuildError, build_bench

    try:
        return build_bench("layer_stream")
    except BuildError as exc:
        raise SystemExit(f"layer_stream: {exc}") from None


class LayerStream:
    """Weights, inputs and buffers for ``layers`` layers on the GPU, and launches of either kernel."""

    def __init__(self, torch, module, layers: int, attn_ns: int):
        self.torch, self.module, self.layers, self.attn_ns = torch, module, layers, attn_ns
        dev = "cuda"
        gen = torch.Generator(device=dev)
        gen.seed()
        self.w = {p.name: torch.randn(layers, p.rows, p.k, device=dev, dtype=torch.bfloat16, generator=gen)
                  for p in PHASES if p.k}
        self.x = {k: torch.randn(k, device=dev, dtype=torch.float32, generator=gen) for k in (2048, 5632)}
        self.out = torch.zeros(layers, OUT_PER_LAYER, device=dev, dtype=torch.float32)
        self.counters = torch.zeros(layers * len(PHASES), device=dev, dtype=torch.int32)
        self.err = torch.zeros(4, device=dev, dtype=torch.int32)
        checked = sorted({0, layers // 2, layers - 1})
        self.reference = {(layer, p.name): self.w[p.name][layer].float() @ self.x[p.k]
                          for layer in checked for p in PHASES if p.k}
        for mode in PAGED:
            name, _, static = KERNELS[mode]
            module.set_max_dynamic_shared(name, MAX_SMEM - static)

    def launch(self, cfg: Config) -> dict:
        """One launch; raises (one line) when a wait missed its deadline. Returns span and per-layer times (ns)."""
        torch = self.torch
        check_config(cfg)
        name, threads, _ = KERNELS[cfg.mode]
        name += "_stamps" if cfg.stamps else ""  # layer_regs_stamps: the same loop, stamps compiled in
        worker_ns = torch.zeros(2 * cfg.workers, device="cuda", dtype=torch.int64)
        phase_ns = torch.zeros(cfg.workers * self.layers * len(PHASES), device="cuda", dtype=torch.int64)
        n_stamps = cfg.workers * self.layers * len(PHASES) * 2  # then one SM id per worker
        stamps = torch.zeros(n_stamps + cfg.workers, device="cuda", dtype=torch.int64) if cfg.stamps else None
        self.out.zero_()
        self.counters.zero_()
        self.err.zero_()
        args = [self.w["qkv"], self.w["o"], self.w["gu"], self.w["down"], self.x[2048], self.x[5632], self.out,
                self.counters, self.err, worker_ns, phase_ns, stamps if stamps is not None else np.uint64(0),
                np.int32(self.layers), np.int32(cfg.wait),
                np.int32(PF_HEAD if cfg.mode == "regs" else 0), np.int32(cfg.pages), np.int32(cfg.page_kib * 1024),
                np.uint64(self.attn_ns if cfg.wait else 0), np.uint64(TIMEOUT_NS)]
        # cooperative: the launch fails unless every worker is co-resident (the spin waits need them all)
        self.module.launch(name, grid=cfg.workers, block=threads, shared_mem=cfg.smem_bytes, args=args,
                           cooperative=True)
        torch.cuda.synchronize()
        err = self.err.cpu().tolist()
        if err[0]:
            raise SystemExit(f"layer_stream: {cfg.label} workers={cfg.workers} pages={cfg.pages}: "
                             f"{ERRORS.get(err[0], f'error {err[0]}')} missed its deadline (layer {err[1]}, phase "
                             f"{PHASES[err[2]].name if 0 <= err[2] < len(PHASES) else err[2]}, block {err[3]})")
        ns = worker_ns.view(-1, 2).cpu().numpy()
        start = int(ns[:, 0].min())
        per_worker = phase_ns.view(cfg.workers, self.layers, len(PHASES)).cpu().numpy()
        ends = per_worker.max(axis=0)  # each (layer, phase)'s last tile
        out = {"span_ns": int(ns[:, 1].max()) - start, **phase_times(start, ends)}
        if stamps is not None:
            host = stamps.cpu().numpy()
            out["handoff_us"] = handoff_parts(per_worker, host[:n_stamps].reshape(cfg.workers, self.layers,
                                                                                  len(PHASES), 2), host[n_stamps:])
        return out

    def rel_err(self, check_attn: bool = True) -> float:
        """Max relative L2 error of the checked layers' GEMV outputs against W.float() @ x; raises when ATTN's
        copies of QKV's outputs differ (only meaningful when the launch waited on its dependencies)."""
        torch, worst = self.torch, 0.0
        layers = sorted({layer for layer, _ in self.reference})
        for (layer, name), ref in self.reference.items():
            i = [p.name for p in PHASES].index(name)
            got = self.out[layer, OUT_OFF[i]:OUT_OFF[i] + PHASES[i].rows]
            worst = max(worst, float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref)))
        if check_attn:
            for layer in layers:
                qkv = self.out[layer, OUT_OFF[0]:OUT_OFF[0] + PHASES[1].rows]
                attn = self.out[layer, OUT_OFF[1]:OUT_OFF[1] + PHASES[1].rows]
                if not torch.equal(qkv, attn):
                    raise SystemExit(f"layer_stream: layer {layer}: ATTN's outputs are not QKV's (a dependency "
                                     "was not honoured)")
        return worst

    def copy_tb_s(self, reps: int) -> list[float]:
        """torch copy of 1 GiB, (read + write) bytes / time in TB/s, per repeat (CUDA events)."""
        torch = self.torch
        src = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
        dst = torch.empty_like(src)
        dst.copy_(src)
        samples = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            dst.copy_(src)
            e1.record()
            torch.cuda.synchronize()
            samples.append(2 * src.numel() / (e0.elapsed_time(e1) * 1e-3) / 1e12)
        del src, dst
        return samples


def phase_times(start_ns: int, ends_ns) -> dict:
    """Per-layer and per-phase durations (us) from the launch's start and each (layer, phase)'s end [layers,
    phases] (ns): a phase lasts from the end of the one before it (QKV: the previous layer's DOWN) to its own."""
    flat = np.concatenate([[start_ns], np.asarray(ends_ns, dtype=np.int64).reshape(-1)])
    phase_us = (np.diff(flat) / 1e3).reshape(-1, len(PHASES))
    return {"layer_us": [float(v) for v in phase_us.sum(axis=1)], "phase_us": phase_us.tolist()}


def handoff_parts(ends, stamps, sm=None) -> dict:
    """Per phase, the median over workers and steady layers (all but the first) of a tile's hand-off in three parts
    (us): `propagate`, from the previous phase's last end (its counter's completion, QKV: the previous layer's Down)
    to the worker seeing it; `activations`, loading the input vector; `stream`, the tile's GEMV to its end. With
    each worker's SM (`sm`), also `stream_sm1` / `stream_sm2`: the stream part of tiles whose SM runs one tile of the
    phase / two (is the slowest tile the one sharing its SM?). ends [workers, layers, phases] (ns, 0 where the worker
    has no tile), stamps [..., 2] (seen, loaded)."""
    ends, stamps = np.asarray(ends, dtype=np.int64), np.asarray(stamps, dtype=np.int64)
    layers, nphase = ends.shape[1], ends.shape[2]
    last = ends.max(axis=0).reshape(-1)  # (layer, phase) in chain order
    out = {}
    for i, p in enumerate(PHASES[:nphase]):
        parts = {"propagate": [], "activations": [], "stream": []}
        if sm is not None:
            parts.update(stream_sm1=[], stream_sm2=[])
        for layer in range(1, layers):
            prev = last[layer * nphase + i - 1]
            has = ends[:, layer, i] > 0
            seen, loaded, end = stamps[has, layer, i, 0], stamps[has, layer, i, 1], ends[has, layer, i]
            parts["propagate"] += list((seen - prev) / 1e3)
            parts["activations"] += list((loaded - seen) / 1e3)
            parts["stream"] += list((end - loaded) / 1e3)
            if sm is not None:
                on = np.asarray(sm)[has]
                busy = {s: int(n) for s, n in zip(*np.unique(on, return_counts=True))}
                for s_id, t in zip(on, (end - loaded) / 1e3):
                    parts["stream_sm2" if busy[s_id] > 1 else "stream_sm1"].append(t)
        out[p.name] = {k: round(float(np.median(v)), 3) if v else None for k, v in parts.items()}
    return out


def steady_us_per_layer(layer_us: list[float]) -> float:
    """Mean layer time without the first layer (its ramp: every CTA starting, the ring filling)."""
    return float(np.mean(layer_us[1:])) if len(layer_us) > 1 else float(layer_us[0])


def measure(bench: LayerStream, cfg: Config, reps: int, floor_ms: float) -> dict:
    bench.launch(cfg)
    err = bench.rel_err(check_attn=cfg.wait)
    if not err < TOLERANCE:
        raise SystemExit(f"layer_stream: {cfg.label} pages={cfg.pages}: relative error {err:.3g} >= {TOLERANCE} "
                         "against W.float() @ x")
    runs = [bench.launch(cfg) for _ in range(reps)]
    per_layer = [steady_us_per_layer(r["layer_us"]) for r in runs]
    span = [r["span_ns"] / 1e6 for r in runs]
    median_run = runs[int(np.argsort(span)[len(span) // 2])]
    steady = np.asarray(median_run["phase_us"])[1:] if len(median_run["phase_us"]) > 1 else np.asarray(
        median_run["phase_us"])
    return {"mode": cfg.label, "workers": cfg.workers, "pages": cfg.pages or "-", "page_kib": cfg.page_kib or "-",
            "us_per_layer": float(np.median(per_layer)), "span_ms": float(np.median(span)),
            "pct_of_floor": 100.0 * floor_ms / float(np.median(span)), "rel_err": err,
            "layer_us": [round(v, 3) for v in median_run["layer_us"]],
            "phase_us": {p.name: round(float(v), 3) for p, v in zip(PHASES, steady.mean(axis=0))},
            **({"handoff_us": median_run["handoff_us"]} if "handoff_us" in median_run else {}),
            "spread": {"us_per_layer": spread(per_layer), "span_ms": spread(span)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=22, help="layers per launch (default 22: 1.94 GB of weights)")
    ap.add_argument("--attn-ns", type=int, default=3000, help="the ATTN tiles' spin in ns (default 3000)")
    ap.add_argument("--reps", type=int, default=5, help="timed launches per configuration (default 5)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)} (default: all)")
    ap.add_argument("--no-record", action="store_true",
                    help="print only: leave benchmarks/results and docs/benchmarks.md as they are (profiler runs)")
    args = ap.parse_args()
    if args.layers < 1 or args.reps < 1 or args.attn_ns < 0:
        raise SystemExit("layer_stream: --layers and --reps must be >= 1, --attn-ns >= 0")
    try:
        import torch
    except ImportError:
        raise SystemExit("layer_stream: needs torch with CUDA") from None
    if not torch.cuda.is_available():
        raise SystemExit("layer_stream: needs a CUDA GPU (none visible to torch)")
    from argus_rt.launch import CubinModule

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    try:
        plan = configs([m.strip() for m in args.modes.split(",") if m.strip()], sms)
    except ValueError as exc:
        raise SystemExit(f"layer_stream: {exc}") from None
    bench = LayerStream(torch, CubinModule.load(build_cubin()), args.layers, args.attn_ns)
    copy = bench.copy_tb_s(args.reps)
    rate = float(np.median(copy))
    floor_ms = layer_weight_bytes() * args.layers / (rate * 1e12) * 1e3
    rows = [{"mode": "copy (torch, 1 GiB read + write)", "workers": "-", "pages": "-", "page_kib": "-",
             "us_per_layer": floor_ms * 1e3 / args.layers, "span_ms": floor_ms, "pct_of_floor": 100.0,
             "rel_err": None, "tb_s": rate, "spread": {"tb_s": spread(copy)}}]
    print(f"copy {rate:.2f} TB/s: floor {floor_ms * 1e3 / args.layers:.2f} us/layer, {floor_ms:.3f} ms for "
          f"{args.layers} layers", flush=True)
    for cfg in plan:
        row = measure(bench, cfg, args.reps, floor_ms)
        rows.append(row)
        print(f"{row['mode']:12s} workers {cfg.workers:3d} pages {cfg.pages:2d} x {cfg.page_kib:2d} KiB: "
              f"{row['us_per_layer']:.2f} us/layer, span {row['span_ms']:.3f} ms ({row['pct_of_floor']:.0f}% of "
              f"floor), rel err {row['rel_err']:.2g}; per phase (us) "
              + " ".join(f"{k} {v:.2f}" for k, v in row["phase_us"].items()), flush=True)
        if "handoff_us" in row:  # median propagate / activations / stream per phase, stream by tiles on the SM
            def us(v):
                return "-" if v is None else f"{v:.2f}"
            print("    hand-off (us, propagate + activations + stream [stream on 1-tile / 2-tile SMs]): " + "; ".join(
                f"{k} {us(p['propagate'])} + {us(p['activations'])} + {us(p['stream'])} "
                f"[{us(p.get('stream_sm1'))} / {us(p.get('stream_sm2'))}]" for k, p in row["handoff_us"].items()),
                flush=True)
    notes = (f"{args.layers} layers of TinyLlama-1.1B's phase chain, fresh bf16 weights per layer "
             f"({layer_weight_bytes() / 1e6:.1f} MB), ATTN tiles spinning {args.attn_ns} ns "
             "(csrc/megakernel/bench/layer_stream.cu). regs: the megakernel's worker loop, 2 CTAs per SM minus one "
             f"(its scheduler's slot), {PF_HEAD // 1024} KiB L2 head prefetch before each wait; ring: 1 CTA per SM, "
             "a loader warp bulk-copying whole-row pages across the waits, 8 consumer warps (ring16: 16) owning a chunk of "
             "every row (activations in registers); rows: the same ring, 16 consumer warps owning whole rows "
             "(activations in shared memory); mma: rows with QKV / O / gate-up on the tensor cores (activations as "
             "bf16 high part + bf16 remainder); *-stream: no dependency waits, no attention spin. us_per_layer: steady state, (last "
             "layer's end - first layer's end) / (layers - 1), %globaltimer; span_ms: first worker start to last "
             "worker end; pct_of_floor: floor (weight bytes / the copy rate) over span. JSON rows also hold "
             "layer_us (each layer of the median run) and phase_us (its steady-state mean per phase, from the "
             "previous phase's last tile to this one's: the hand-off included; without waits the phases overlap and "
             "only layer_us means anything). Outputs of layers 0, L/2, "
             f"L-1 checked against W.float() @ x (relative L2 error < {TOLERANCE}) before timing.")
    if args.no_record:
        return 0
    record("layer_stream", rows, title="Layer chain: register-streamed workers vs a bulk-copy page ring", notes=notes,
           gpu=gpu_name(), columns=["mode", "workers", "pages", "page_kib", "us_per_layer", "span_ms",
                                    "pct_of_floor", "rel_err"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
