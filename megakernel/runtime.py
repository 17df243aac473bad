"""Run the megakernel on a GPU: load the cubin, lay out the state, launch steps, report errors.

    dec = MegakernelDecoder(weights_on_gpu)           # builds (cached) and loads the cubin
    dec.set_prompt([1, 15043, 29892])
    ns = dec.run(step_begin=0, n_steps=64)           # one launch; per-step device times (ns)
    dec.tokens()                                      # prompt + sampled tokens

Co-residency: the scheduler and worker CTAs spin on each other, so every CTA must be resident at
once. The grid is checked against the occupancy calculator, and the launch is cooperative (the
driver refuses a cooperative grid that cannot be co-resident), so an oversubscribed grid is an
error, never a hang.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tinyllama.config import LlamaConfig
from tinyllama.weights import LlamaWeights

from . import instructions as I
from .build import CSRC, KERNEL_NAME, build
from .dag import Program, TileShape, build_decode_program, default_tiles
from .instructions import Down, GateUp, Logits, OProj, QkvHead, deserialize
from .interpreter import SamplingParams
from .params import (
    ERROR_BAD_OPCODE,
    ERROR_BAD_TOKEN,
    ERROR_DEADLOCK,
    ERROR_NONE,
    ERROR_STAGE_TIMEOUT,
    ERROR_WORDS,
    PARAM_BYTES,
    STUCK_WORDS,
    pack_params,
)
from .regions import coordinate, region_tree
from .state import DecodeState

CONFIG_CUH = CSRC / "megakernel" / "config.cuh"
# Dynamic shared memory for weight staging: H200 allows 227 KiB per CTA, the static part is ~35 KiB.
MAX_STAGE_BYTES = 190 * 1024
RING_PAGE_BYTES = 16 * 1024  # csrc/megakernel/ring.cuh: RING_PAGE (tests/test_megakernel_ring.py checks they agree)
# A stage that holds a 16-row down tile (16 x 5632 bf16) and a 16-feature gate/up tile (128 KiB).
STAGE_DOWN16 = 16 * 5632 * 2


def tile_weight_ranges(program: Program) -> list[tuple[int, int, int]]:
    """(segment, byte offset in it, bytes) of the weights each instruction streams, (0, 0, 0) for none;
    the same ranges as tile_weights in csrc/megakernel/megakernel.cu. Segment = kind * 256 + layer."""
    c, tiles = program.config, program.tiles
    D, F, Dh, KV = c.hidden, c.ffn, c.head_dim, c.n_kv_heads * c.head_dim
    out = []
    for ins in program.instructions:
        w = ins.serialize()
        op, layer, a0, a1, a2 = w[I.W_OPCODE], w[I.W_LAYER], w[I.W_A0], w[I.W_A1], w[I.W_A2]
        if op == QkvHead.OPCODE:
            rows = Dh // tiles.qkv_parts
            base = (0 if a0 == I.HEAD_Q else D if a0 == I.HEAD_K else D + KV) + a1 * Dh + a2 * rows
            out.append((I.SEG_WQKV * 256 + layer, 2 * base * D, 2 * rows * D))
        elif op == OProj.OPCODE:
            out.append((I.SEG_WO * 256 + layer, 2 * a0 * D, 2 * a1 * D))
        elif op == GateUp.OPCODE:
            out.append((I.SEG_WGU * 256 + layer, 2 * 2 * a0 * D, 2 * 2 * a1 * D))
        elif op == Down.OPCODE:
            out.append((I.SEG_WD * 256 + layer, 2 * a0 * F, 2 * a1 * F))
        elif op == Logits.OPCODE:
            out.append((I.SEG_LM_HEAD * 256, 2 * a0 * D, 2 * a1 * D))
        else:
            out.append((0, 0, 0))
    return out


OWN_PREFETCH_OPS = {"qkv": QkvHead, "oproj": OProj, "gateup": GateUp, "down": Down, "logits": Logits}


# Row 45's gated prefetch (MK_PF_GATE=1; NOTES.md "Ready: row 45"): the ops whose tiles may take one, each with the
# phase it depends on; a gate is a phase of the same layer before that one (so the tile's own wait implies it).
GATE_PHASES = ("qkv", "attn", "oproj", "gateup")  # a layer's phases in order, as their counters' prefixes below
GATE_COUNTERS = {"qkv": "qkv", "attn": "attn", "oproj": "o", "gateup": "gateup"}
GATED_OPS = {"oproj": (OProj, "attn"), "gateup": (GateUp, "oproj"), "down": (Down, "gateup")}
Gate = tuple[str, str, "int | None"]  # (op, gate phase, bytes after the head: None = the rest of the tile)


def check_gates(gate: tuple[Gate, ...]) -> None:
    """Raise ValueError naming the bad entry of a prefetch_gate spec unless each names a gated op once, a phase before
    that op's dependency, and None or a positive multiple of 16 bytes."""
    seen = set()
    for entry in gate:
        if not (isinstance(entry, tuple) and len(entry) == 3):
            raise ValueError(f"prefetch_gate entries are (op, gate phase, bytes or None), got {entry!r}")
        op, phase, n = entry
        if op not in GATED_OPS or op in seen:
            raise ValueError(f"prefetch_gate op {op!r} is unknown or repeated; valid once each: {sorted(GATED_OPS)}")
        seen.add(op)
        before = GATE_PHASES[:GATE_PHASES.index(GATED_OPS[op][1])]
        if phase not in before:
            raise ValueError(f"prefetch_gate {entry!r}: the gate must be a phase before {op}'s dependency "
                             f"({GATED_OPS[op][1]}); valid: {list(before)}")
        if n is not None and not (isinstance(n, int) and n > 0 and n % 16 == 0 and n < 1 << 27):
            raise ValueError(f"prefetch_gate {entry!r}: bytes must be None (the rest of the tile) or a positive "
                             "multiple of 16 below 128 MiB")


def gate_plan(program: Program, words: np.ndarray, gate: tuple[Gate, ...]) -> None:
    """Write row 45's gates into ``words`` (prefetch_plan's): W_PF_GATE = the gate counter of the tile's layer << PF_GATE_COUNT_BITS
    | its signals per step in this program, and the gated length (16-byte units) into W_PF_FLAGS's high bits."""
    check_gates(gate)
    ranges = tile_weight_ranges(program)
    index = {name: i for i, name in enumerate(program.counters)}
    signals = np.bincount(words[:, I.W_SIGNAL][words[:, I.W_SIGNAL] >= 0], minlength=len(program.counters))
    for op, phase, n in gate:
        opcode = GATED_OPS[op][0].OPCODE
        for i in np.flatnonzero(words[:, I.W_OPCODE] == opcode):
            ctr = index[f"{GATE_COUNTERS[phase]}[{int(words[i, I.W_LAYER])}]"]
            count = int(signals[ctr])
            if not 0 < count < 1 << I.PF_GATE_COUNT_BITS:
                raise ValueError(f"gate counter {program.counters[ctr]!r} gets {count} signals per step; the word holds "
                                 f"1..{(1 << I.PF_GATE_COUNT_BITS) - 1}")
            words[i, I.W_PF_GATE] = (ctr << I.PF_GATE_COUNT_BITS) | count
            words[i, I.W_PF_FLAGS] |= ((ranges[i][2] if n is None else n) // 16) << I.PF_GATE_LEN_SHIFT


def prefetch_plan(program: Program, window_bytes: int | None, own: bool | tuple[str, ...] = False,
                  gate: tuple[Gate, ...] = ()) -> np.ndarray:
    """Instruction words [n, WORDS] with the prefetch plan in words W_PF_* (instructions.py).

    ``own``: each GEMV ticket L2-prefetches its own tile's weights before its dependency wait (True),
    or only the ops named (keys of OWN_PREFETCH_OPS). On from 6e5cdf1 to 2026-12-01 12:38, when
    turning it off measured 4.7% faster (megakernel/NOTES.md); on again since row 34 (2026-12-02), cut to
    the tile's leading MK_PF_OWN_CAP bytes (config.cuh: 32 KiB). ``window_bytes``: ticket i also prefetches the weight bytes that lie
    ``window_bytes`` further down the step's weight stream (tiles in ticket order, wrapping into the
    next step) than its own, as many bytes as its own tile has, so the prefetch front runs a fixed
    number of bytes ahead of consumption and every weight byte is prefetched once. ``gate``: row 45's gated
    prefetches (gate_plan; an MK_PF_GATE=1 build reads them)."""
    words = program.words().copy()
    ranges = tile_weight_ranges(program)
    if own is not True:
        ops = tuple(own or ())
        unknown = sorted(set(ops) - set(OWN_PREFETCH_OPS))
        if unknown:
            raise ValueError(f"prefetch_own names unknown ops {unknown}; valid: {sorted(OWN_PREFETCH_OPS)}")
        keep = {OWN_PREFETCH_OPS[name].OPCODE for name in ops}
        skip = np.array([w not in keep for w in words[:, I.W_OPCODE]])
        words[skip, I.W_PF_FLAGS] |= I.PF_SKIP_OWN
    if gate:
        gate_plan(program, words, gate)
    if window_bytes is None:
        return words
    if window_bytes < 0 or window_bytes % 16:
        raise ValueError(f"prefetch window must be a multiple of 16 bytes >= 0, got {window_bytes}")
    # The weight stream of one step: consecutive tiles of one segment are contiguous in memory.
    segs: list[list[int]] = []  # [segment, first byte, last byte + 1] in stream order
    for seg, off, n in ranges:
        if not n:
            continue
        if segs and segs[-1][0] == seg and segs[-1][2] == off:
            segs[-1][2] = off + n
        else:
            segs.append([seg, off, off + n])
    starts = np.cumsum([0] + [hi - lo for _, lo, hi in segs])
    total = int(starts[-1])

    def pieces(pos: int, n: int) -> list[tuple[int, int, int]]:
        """(segment, offset, bytes) covering stream bytes [pos, pos + n), wrapping at the step's end."""
        out = []
        while n > 0:
            pos %= total
            k = int(np.searchsorted(starts, pos, side="right")) - 1
            seg, lo, hi = segs[k]
            off = lo + pos - int(starts[k])
            take = min(n, hi - off)
            out.append((seg, off, take))
            pos, n = pos + take, n - take
        return out

    pos = 0
    for i, (seg, off, n) in enumerate(ranges):
        if not n:
            continue
        got = pieces(pos + window_bytes, n)
        if len(got) > 2 or any(b % 16 or b >= 16 << 20 or o % 16 for _, o, b in got):
            raise ValueError(f"prefetch window of instruction {i} does not fit two 16-byte-aligned ranges: {got}")
        for r, (gseg, goff, gn) in enumerate(got):
            words[i, I.W_PF_A + 2 * r] = (gseg << 20) | (gn // 16)
            words[i, I.W_PF_A_OFF + 2 * r] = goff // 16
        pos += n
    return words


# Macro only option_flags may set: it must agree with the tile shape the state was laid out for.
OPTION_MACROS = ("MK_FUSED_SAMPLE", "MK_LAST_COMBINE", "MK_ONE_SPLIT", "MK_EARLY_REGS")


def option_flags(tiles: TileShape, given: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Build flags of the tile options. Fused sampling is the kernel's default (no flag);
    TileShape(fused_sample=False) compiles the Sample over all logits; TileShape(last_combine=True) the combine by
    each group's last attention tile (MK_LAST_COMBINE=1, row 26), last_combine="auto" both combines, picked per
    instruction (MK_LAST_COMBINE=2, row 27; "long", row 57: the same build, only the long-split launches arrive);
    TileShape(single_split=N) the one-split launches' direct attention output (MK_ONE_SPLIT=1, row 40: the state has
    attn_out); TileShape(early_regs=N) the tiles that load their weights before their wait (MK_EARLY_REGS=N, row 48).
    ``given`` (the caller's build flags) must not set the options' macros."""
    if tiles.early_regs & 2 and not tiles.single_split:  # the build's check, as a one-line error before nvcc
        raise ValueError(f"TileShape.early_regs={tiles.early_regs} has bit 2 (O-proj tiles of one-split launches) but "
                         "single_split is 0: set single_split or drop bit 2")
    clash = [f for f in given if any(f == f"-D{m}" or f.startswith(f"-D{m}=") for m in OPTION_MACROS)]
    if clash:
        raise ValueError(f"build flags {clash} are set by TileShape.fused_sample / last_combine / single_split / "
                         "early_regs, not by hand")
    return (() if tiles.fused_sample else ("-DMK_FUSED_SAMPLE=0",)) + \
        ((f"-DMK_LAST_COMBINE={1 if tiles.last_combine is True else 2}",) if tiles.last_combine else ()) + \
        (("-DMK_ONE_SPLIT=1",) if tiles.single_split else ()) + \
        ((f"-DMK_EARLY_REGS={tiles.early_regs}",) if tiles.early_regs else ())


def form_words(program: Program, window_bytes: int | None, own: bool | tuple[str, ...] = False,
               gate: tuple[Gate, ...] = ()) -> dict[bool, np.ndarray]:
    """The words of each combine form a launch may run (Program.form; key: last-arrival), with the prefetch plan:
    both forms for a last_combine="auto" program (they differ only in AttnPartial's A3 and OProj's A2, the plan
    is the same), else the program's own. The runtime swaps them per launch by the parameter block's pointer."""
    plan = prefetch_plan(program, window_bytes, own, gate)
    forms = (False, True) if program.tiles.last_combine == "auto" else (bool(program.tiles.last_combine),)
    out = {}
    for last in forms:
        words = plan.copy()
        words[:, : I.W_PF_FLAGS] = program.words(program.form(last))[:, : I.W_PF_FLAGS]  # the plan owns the rest
        out[last] = words
    return out


def flag_value(flags: tuple[str, ...], macro: str) -> str | None:
    """The value the last ``-DMACRO[=V]`` of ``flags`` gives (``-DMACRO`` alone is ``1``); None if unset."""
    value = None
    for f in flags:
        name, eq, v = f[2:].partition("=") if f.startswith("-D") else ("", "", "")
        if name == macro:
            value = v if eq else "1"
    return value


def sm_spread(flags: tuple[str, ...]) -> bool:
    """Whether a build with ``flags`` orders its tickets by the SM-spread rank: megakernel.cu's default,
    MK_SM_SPREAD = MK_STATIC_TICKETS (both 1 unless set), since row 23 (megakernel/NOTES.md)."""
    value = flag_value(flags, "MK_SM_SPREAD")
    if value is None:
        value = flag_value(flags, "MK_STATIC_TICKETS") or "1"
    return value != "0"


def spread_words(flags: tuple[str, ...], grid: int) -> int:
    """int32 words after the dispatch cursor that an MK_SM_SPREAD build's workers register in, zeroed before each
    launch (csrc/megakernel/megakernel.cu: spread_rank): an arrival count, the per-SM slot counters, one key per
    worker. The default build's; 0 for builds without the spread (mk_nospread, mk_dynamic)."""
    return 1 + kernel_limits()["SPREAD_SMS"] + (grid - 1) if sm_spread(flags) else 0


def ring_smem_bytes(pages: int) -> int:
    """Dynamic shared memory of a ring build (ring.cuh): the pages, then a partial sum per (tile row, warp)."""
    lim = kernel_limits()
    return pages * RING_PAGE_BYTES + lim["MAX_TILE_ROWS"] * lim["NWARPS"] * 4 if pages else 0


class MegakernelError(RuntimeError):
    """The kernel stopped itself: a dependency deadline passed, a bad token, or a bad opcode."""


class DoesNotFitError(ValueError):
    """The model or the tile shape exceeds the kernel's compile-time limits, or the grid is not co-resident."""


def kernel_limits(path: Path = CONFIG_CUH) -> dict[str, int]:
    """``constexpr int NAME = value`` constants of config.cuh (THREADS, SMEM_FLOATS, ...)."""
    text = path.read_text(encoding="utf-8")
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"constexpr int (\w+) = (\d+);", text)} | \
        {"NWARPS": int(re.search(r"constexpr int THREADS = (\d+);", text).group(1)) // 32}


def attn_smem_floats(c: LlamaConfig, tiles: TileShape, nwarps: int) -> int:
    """Shared floats of one AttnPartial tile: q, scores, (max, sum), padding, per-warp PV sums."""
    g = c.group // tiles.head_parts(c)  # query heads per tile
    # q, scores, (max, sum), then the PV sums (the kernel parks the split's V rows there too when a
    # max(PV sums, V rows) area still fits: csrc/megakernel/attention.cuh); of the longest split a launch may run
    longest = max(tiles.splits() + ((tiles.single_split,) if tiles.single_split else ()))  # row 40's split too
    return ((g * (c.head_dim + longest + 2) + 3) & ~3) + nwarps * g * c.head_dim


def check_fits(config: LlamaConfig, tiles: TileShape) -> None:
    """Raise DoesNotFitError naming the first size the compiled kernel cannot take."""
    lim = kernel_limits()
    c = config
    checks = [
        ("hidden", c.hidden, c.hidden <= lim["COMBINE_PER_THREAD"] * lim["THREADS"] and c.hidden % 8 == 0
         and c.hidden + c.n_heads * tiles.n_splits(c) <= lim["SMEM_FLOATS"],
         f"<= COMBINE_PER_THREAD * THREADS = {lim['COMBINE_PER_THREAD'] * lim['THREADS']}, multiple of 8, "
         f"hidden + n_heads * n_splits <= {lim['SMEM_FLOATS']}"),
        ("ffn", c.ffn, c.ffn <= lim["SMEM_FLOATS"] and c.ffn % 8 == 0, f"<= {lim['SMEM_FLOATS']}, multiple of 8"),
        ("head_dim", c.head_dim, c.head_dim % 8 == 0 and c.head_dim <= min(lim["MAX_TILE_ROWS"], lim["THREADS"]),
         "multiple of 8, <= THREADS and MAX_TILE_ROWS"),
        ("vocab", c.vocab, c.vocab % 4 == 0, "a multiple of 4 (16-byte logit loads)"),
        ("group (n_heads / n_kv_heads)", c.group, c.group <= lim["MAX_GROUP"], f"<= {lim['MAX_GROUP']}"),
        ("query heads per attention tile (group / attn_head_parts)", c.group // tiles.head_parts(c),
         c.group // tiles.head_parts(c) in (1, 2, 4, 8), "1, 2, 4 or 8 (compiled instances)"),
        ("o_rows", tiles.o_rows, tiles.o_rows <= lim["MAX_TILE_ROWS"], f"<= {lim['MAX_TILE_ROWS']}"),
        ("down_rows", tiles.down_rows, tiles.down_rows <= lim["MAX_TILE_ROWS"], f"<= {lim['MAX_TILE_ROWS']}"),
        ("logits_rows", tiles.logits_rows, tiles.logits_rows <= lim["MAX_TILE_ROWS"], f"<= {lim['MAX_TILE_ROWS']}"),
        ("2 * gate_features", 2 * tiles.gate_features, 2 * tiles.gate_features <= lim["MAX_TILE_ROWS"],
         f"<= {lim['MAX_TILE_ROWS']}"),
        ("n_splits (max_seq / attn_split)", tiles.n_splits(c), tiles.n_splits(c) <= lim["MAX_SPLITS"],
         f"<= MAX_SPLITS = {lim['MAX_SPLITS']}"),
        ("head_dim (attention)", c.head_dim, c.head_dim in (8, 16, 32, 64, 128, 256),
         "a power of two in [8, 256] (whole 16-byte V-row pieces per lane group)"),
        ("attention smem floats", attn_smem_floats(c, tiles, lim["NWARPS"]),
         attn_smem_floats(c, tiles, lim["NWARPS"]) <= lim["SMEM_FLOATS"], f"<= {lim['SMEM_FLOATS']}"),
    ]
    for name, value, ok, rule in checks:
        if not ok:
            raise DoesNotFitError(f"{name} = {value} does not fit the compiled megakernel: needs {rule} "
                                  "(csrc/megakernel/config.cuh)")


@dataclass
class LaunchInfo:
    grid: int  # 1 scheduler + workers
    workers: int
    threads: int
    sms: int
    blocks_per_sm: int  # occupancy calculator's answer for this kernel


class MegakernelDecoder:
    """TinyLlama decode in one persistent kernel launch per call of :meth:`run`."""

    def __init__(self, weights: LlamaWeights, tiles: TileShape | None = None, workers: int | None = None,
                 prefetch_ahead: int = 0, timeout_s: float = 2.0, argus_mode: int = 0,
                 sampling: SamplingParams | None = None, device: int = 0, stage_bytes: int = 0,
                 build_flags: tuple[str, ...] = (), prefetch_window: int | None = None,
                 prefetch_own: bool | tuple[str, ...] = True, ring_pages: int = 0,
                 prefetch_gate: tuple[Gate, ...] = (), gate_stage_bytes: int = 0, smem_carveout: int | None = None):
        from argus_rt.launch import CubinModule

        self.config = weights.config
        self.tiles = tiles or default_tiles(self.config)
        check_fits(self.config, self.tiles)
        if prefetch_ahead < 0:
            raise ValueError(f"prefetch_ahead must be >= 0 instructions, got {prefetch_ahead}")
        # row 47: the kernel's preferred shared-memory carve-out (percent; None: the driver's choice)
        if smem_carveout is not None and not (isinstance(smem_carveout, int) and 0 <= smem_carveout <= 100):
            raise ValueError(f"smem_carveout must be None or an int percent in [0, 100], got {smem_carveout!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
        # ring_pages > 0: GEMV weights as bulk-copied 16 KiB pages (csrc/megakernel/ring.cuh), which share the
        # dynamic shared memory with staging: one or the other
        if not isinstance(ring_pages, int) or not 0 <= ring_pages <= 8 or (ring_pages and stage_bytes):
            raise ValueError(f"ring_pages must be an int in [0, 8] and 0 when stage_bytes is set, got {ring_pages!r}")
        # Row 36's Down pieces (MK_DOWN_PIECES=1, the default build since its H200 run, or 2) have no staged or ring
        # path: op_down would ignore a staged prefix, and MK_RING with the pieces is a compile error (config.cuh).
        # Staged and ring builds name the plain Down (gemv_tile) with -DMK_DOWN_PIECES=0.
        if (stage_bytes or ring_pages) and flag_value(build_flags, "MK_DOWN_PIECES") != "0":
            raise ValueError("stage_bytes and ring_pages need -DMK_DOWN_PIECES=0 in build_flags (the default build's "
                             "Down pieces read no staged rows and have no ring path)")
        # Row 45: gated prefetches (gate_plan) of the tile's own weights, read by an MK_PF_GATE=1 build
        prefetch_gate = tuple(prefetch_gate)
        check_gates(prefetch_gate)
        if prefetch_gate and (stage_bytes or ring_pages):
            raise ValueError("prefetch_gate prefetches into L2 from the tile's start: stage_bytes and ring_pages must be "
                             "off with it")
        # Row 46: gate_stage_bytes > 0 puts the gated bytes in a stage buffer of that size (MK_PF_GATE=2) instead of L2
        if gate_stage_bytes and not (prefetch_gate and isinstance(gate_stage_bytes, int) and gate_stage_bytes % 4096 == 0
                                     and 0 < gate_stage_bytes <= MAX_STAGE_BYTES):
            raise ValueError(f"gate_stage_bytes must be a multiple of 4096 in (0, {MAX_STAGE_BYTES}] with a prefetch_gate, "
                             f"got {gate_stage_bytes!r} with prefetch_gate={prefetch_gate!r}")
        if gate_stage_bytes and any(op == "down" for op, _, _ in prefetch_gate):
            raise ValueError("gate_stage_bytes cannot stage Down tiles: the default build's Down pieces read no staged "
                             "rows; gate oproj and gateup only")
        # Row 48: early tiles wait inside early_tile (early.cuh), past the gate, stage and ring paths of the worker loop
        if self.tiles.early_regs and (prefetch_gate or stage_bytes or ring_pages):
            raise ValueError(f"TileShape.early_regs={self.tiles.early_regs} (the default tiles' registers-before-the-wait "
                             "tiles) has no prefetch_gate, stage_bytes or ring_pages path: use tiles with early_regs=0 "
                             "(megakernel.dag.NOEARLY_TILES) for those")
        self.prefetch_gate = prefetch_gate
        self.device = torch.device("cuda", device)
        self.program: Program = build_decode_program(self.config, self.tiles)
        self.state = DecodeState.create(self.program, weights, self.device)
        self.prefetch_window, self.prefetch_own = prefetch_window, prefetch_own
        self.forms = self._instruction_words(self.program)
        self.launched = self.program  # the last launch's program (split programs: its split length's)
        self.error = torch.zeros(len(ERROR_WORDS), dtype=torch.int32, device=self.device)
        self.step_ns = torch.zeros(self.config.max_seq + 1, dtype=torch.int64, device=self.device)
        self.params = torch.zeros(PARAM_BYTES, dtype=torch.uint8, device=self.device)
        self.prefetch_ahead = prefetch_ahead
        if stage_bytes < 0 or stage_bytes % 16 or stage_bytes > MAX_STAGE_BYTES:
            raise ValueError(f"stage_bytes must be a multiple of 16 in [0, {MAX_STAGE_BYTES}] (0 = no shared-memory "
                             f"staging of weight tiles), got {stage_bytes}")
        self.stage_bytes = stage_bytes or gate_stage_bytes  # the kernel's p.stage_bytes sizes either buffer
        self.ring_pages = ring_pages
        self.dynamic_smem = self.stage_bytes + ring_smem_bytes(ring_pages)
        self.timeout_ns = int(timeout_s * 1e9)
        self.sampling = sampling or SamplingParams()
        self.n_forced = 1
        self.argus_mode = argus_mode
        # e.g. ("-DMK_BLOCKS_PER_SM=2",): csrc/megakernel/config.cuh knobs; plus the flags of the tile options
        self.build_flags = tuple(build_flags) + option_flags(self.tiles, tuple(build_flags)) + \
            ((f"-DMK_RING={ring_pages}",) if ring_pages else ()) + \
            ((f"-DMK_PF_GATE={2 if gate_stage_bytes else 1}",) if prefetch_gate else ())
        self.build = build(argus_mode, extra_flags=self.build_flags)
        self.module = CubinModule.load(self.build.cubin, device=device)
        if self.dynamic_smem:  # static (~35 KiB) + dynamic shared memory above 48 KiB needs the opt-in
            self.module.set_max_dynamic_shared(KERNEL_NAME, self.dynamic_smem)
        self.smem_carveout = smem_carveout
        if smem_carveout is not None:  # before _plan_grid: the occupancy it reads depends on it
            self.module.set_preferred_carveout(KERNEL_NAME, smem_carveout)
        self.launch_info = self._plan_grid(workers)
        # the dispatch cursor, then (MK_SM_SPREAD builds: the default) the workers' SM registration area
        self.spread_words = spread_words(self.build_flags, self.launch_info.grid)
        self.ticket = torch.zeros(1 + self.spread_words, dtype=torch.int32, device=self.device)
        self.stuck = torch.full((self.launch_info.grid, len(STUCK_WORDS)), -1, dtype=torch.int32, device=self.device)
        self.trace_session = None
        self.traces: list = []  # (steps, Trace) per profiled launch

    # ---- setup ------------------------------------------------------------------------------------
    def _plan_grid(self, workers: int | None) -> LaunchInfo:
        from argus_rt.launch import _check, _driver

        drv = _driver()
        threads = kernel_limits()["THREADS"]
        sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        per_sm = _check(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.module.function(KERNEL_NAME), threads,
                                                                         self.dynamic_smem),
                        "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        workers = per_sm * sms - 1 if workers is None else workers  # every co-resident slot but the scheduler's
        if workers < 1:
            raise DoesNotFitError(f"need at least 1 worker CTA, got workers={workers}")
        grid = workers + 1
        if grid > per_sm * sms:
            raise DoesNotFitError(f"grid of {grid} CTAs (1 scheduler + {workers} workers) cannot be co-resident: "
                                  f"{per_sm} CTA(s)/SM x {sms} SMs = {per_sm * sms}; use workers <= {per_sm * sms - 1}")
        return LaunchInfo(grid, workers, threads, sms, int(per_sm))

    def replace_program(self, program: Program) -> None:
        """Run a different instruction stream on the same state (tests: a deliberately broken DAG)."""
        if program.config != self.config or len(program.counters) != len(self.program.counters):
            raise ValueError("replacement program must have this decoder's config and counter set")
        self.program = self.launched = program
        self.forms = self._instruction_words(program)

    def _instruction_words(self, program: Program) -> dict[bool | int | str, torch.Tensor]:
        """The words the kernel reads, per combine form (form_words) or, with split programs
        (TileShape.attn_split_long, single_split), per launch key (TileShape.launch_key: the split length, or
        ONE_SPLIT): the program plus this decoder's prefetch plan."""
        if program.split_programs:
            words = {s: form_words(p, self.prefetch_window, self.prefetch_own, self.prefetch_gate)[bool(p.tiles.last_combine)]
                     for s, p in program.split_programs.items()}
        else:
            words = form_words(program, self.prefetch_window, self.prefetch_own, self.prefetch_gate)
        return {key: torch.from_numpy(np.ascontiguousarray(w)).to(self.device) for key, w in words.items()}

    def instructions_for(self, step_end: int) -> torch.Tensor:
        """The instruction words of a launch ending before step ``step_end``: of its program (TileShape.launch_key,
        the key Program.launch_program takes) with split programs, else of its combine form
        (TileShape.combine_last_at), both by its largest KV length, step_end."""
        if self.program.split_programs:
            return self.forms[self.tiles.launch_key(step_end)]
        return self.forms[self.tiles.combine_last_at(step_end)]

    @property
    def instructions(self) -> torch.Tensor:
        """The program's own list (the last-arrival form of a last_combine="auto" program, attn_split's list with
        split programs)."""
        if self.program.split_programs:
            return self.forms[self.tiles.attn_split]
        return self.forms[bool(self.tiles.last_combine)]

    def set_prompt(self, tokens: list[int]) -> None:
        """Start a new sequence at step 0: forced tokens, and dependency counters back to zero (they only
        grow within a sequence; counters left from an earlier one would satisfy every wait at once)."""
        self.state.set_prompt(tokens)
        self.state.t["counters"].zero_()
        self.n_forced = len(tokens)

    def tokens(self, n: int | None = None) -> list[int]:
        out = self.state.t["tokens"].cpu().tolist()
        return out[: n] if n is not None else out

    # ---- launch -------------------------------------------------------------------------------------
    def _param_values(self, step_begin: int, step_end: int) -> dict:
        t, c = self.state.t, self.config
        ptr = {name: int(tensor.data_ptr()) for name, tensor in t.items()}
        n_instr = len(self.program.launch_program(step_end).instructions)  # split programs: per split length
        return {
            "instructions": int(self.instructions_for(step_end).data_ptr()), "n_instr": n_instr,
            "counters": ptr["counters"], "ticket": int(self.ticket.data_ptr()), "error": int(self.error.data_ptr()),
            "stuck": int(self.stuck.data_ptr()), "step_ns": int(self.step_ns.data_ptr()),
            "ticket_end": step_end * n_instr,
            "step_begin": step_begin, "step_end": step_end,
            **{k: ptr[k] for k in ("embed", "wqkv", "wo", "wgu", "wd", "attn_norm", "ffn_norm", "final_norm",
                                   "lm_head", "k_cache", "v_cache", "x", "x_mid", "q", "attn_part", "h", "logits",
                                   "rope_cos", "rope_sin", "tokens")},
            "n_layers": c.n_layers, "hidden": c.hidden, "ffn": c.ffn, "n_heads": c.n_heads,
            "n_kv_heads": c.n_kv_heads, "head_dim": c.head_dim, "vocab": c.vocab, "max_seq": c.max_seq,
            # the launch's split length; n_splits: the state's partial slots per head (their stride), in every launch
            "attn_split": self.tiles.split_at(step_end), "n_splits": self.tiles.n_splits(c),
            "qkv_parts": self.tiles.qkv_parts,
            "attn_head_parts": self.tiles.head_parts(c),
            "n_forced": self.n_forced,
            "sample_counter": self.program.counters.index("sample"), "seed": self.sampling.seed & 0xFFFFFFFF,
            "timeout_ns": self.timeout_ns, "prefetch_ahead": self.prefetch_ahead, "stage_bytes": self.stage_bytes,
            "eps": c.eps, "temperature": self.sampling.temperature,
        }

    def launch(self, step_begin: int, n_steps: int, stream=None) -> None:
        """Enqueue one launch that decodes steps [step_begin, step_begin + n_steps) (no host sync)."""
        c = self.config
        if n_steps < 1 or step_begin < 0 or step_begin + n_steps > c.max_seq:
            raise ValueError(f"steps [{step_begin}, {step_begin + n_steps}) must lie in [0, {c.max_seq}) "
                             f"(the KV-cache capacity) and be non-empty")
        step_end = step_begin + n_steps
        prog = self.program.launch_program(step_end)
        n_instr = len(prog.instructions)
        if step_end * n_instr >= 2**31:
            raise ValueError(f"{step_end} steps x {n_instr} instructions overflow the int32 ticket")
        blob = pack_params(self._param_values(step_begin, step_end))
        self.params.copy_(torch.frombuffer(bytearray(blob), dtype=torch.uint8), non_blocking=False)
        self.ticket[:1].fill_(step_begin * n_instr)  # dispatch cursor only; dependency counters are never reset
        rebase = self.program.launch_counters(step_begin, step_end) if prog is not self.launched else {}
        if rebase:  # split programs, the other split than the last launch's: attn[L] counts this launch's tiles
            idx = torch.tensor(list(rebase), dtype=torch.int64, device=self.device)
            self.state.t["counters"][idx] = torch.tensor(list(rebase.values()), dtype=torch.int32, device=self.device)
        self.launched = prog  # check_error names its instructions
        if self.spread_words:
            self.ticket[1:].zero_()  # a fresh registration round (the CTA-to-SM placement may differ per launch)
        self.error.zero_()
        self.stuck.fill_(-1)
        self.module.launch(KERNEL_NAME, grid=self.launch_info.grid, block=self.launch_info.threads,
                           args=[self.params], shared_mem=self.dynamic_smem, stream=stream, cooperative=True)

    def check_error(self) -> None:
        """Raise MegakernelError if the last launch stopped itself (synchronises)."""
        err = dict(zip(ERROR_WORDS, self.error.cpu().tolist()))
        if err["code"] == ERROR_NONE:
            return
        if err["code"] == ERROR_DEADLOCK:
            # The first waiter to time out is not necessarily the cause (waits run concurrently): the
            # lowest stuck ticket is, since everything below it finished or was running.
            rows = [dict(zip(STUCK_WORDS, r)) for r in self.stuck.cpu().tolist()]
            rows = [r for r in rows if r["ticket"] >= 0]
            if rows:
                low = min(rows, key=lambda r: r["ticket"])
                block = next(b for b, r in enumerate(self.stuck.cpu().tolist()) if r[0] == low["ticket"])
                err.update(low, block=block)
        index = err["index"]
        prog = self.launched
        ins = deserialize(prog.words()[index]) if 0 <= index < len(prog.instructions) else None
        counter = self.program.counters[err["counter"]] if 0 <= err["counter"] < len(self.program.counters) else None
        if err["code"] == ERROR_DEADLOCK:
            raise MegakernelError(
                f"dependency deadline ({self.timeout_ns / 1e9:g} s) passed in step {err['step']}: instruction "
                f"{index} {ins} (ticket {err['ticket']}, CTA {err['block']}) waited on counter {counter!r} for "
                f"{err['expected']}, it reached {err['observed']}")
        if err["code"] == ERROR_BAD_TOKEN:
            raise MegakernelError(f"step {err['step']}: token outside [0, {self.config.vocab}) at instruction {index} "
                                  f"{ins}; NaN logits in the previous step leave token -1")
        if err["code"] == ERROR_STAGE_TIMEOUT:
            raise MegakernelError(f"a weight-tile bulk copy into shared memory did not land within "
                                  f"{self.timeout_ns / 1e9:g} s (CTA {err['block']}, stage_bytes={self.stage_bytes})")
        if err["code"] == ERROR_BAD_OPCODE:
            raise MegakernelError(f"step {err['step']}: unknown opcode {err['opcode']} at instruction {index}")
        raise MegakernelError(f"kernel error slot holds unknown code {err['code']}: {err}")

    def run(self, step_begin: int, n_steps: int) -> np.ndarray:
        """Decode steps in one launch, wait, raise on kernel errors; per-step device times in ns."""
        self.launch(step_begin, n_steps)
        torch.cuda.synchronize(self.device)
        self.check_error()
        stamps = self.step_ns[: n_steps + 1].cpu().numpy()
        return np.diff(stamps)

    # ---- generation with an in-process profiling hook -------------------------------------------
    def generate(self, prompt: list[int], n_new: int, chunk: int = 64, profile_steps: range | None = None,
                 trace_capacity: int = 16384) -> list[int]:
        """Prompt + ``n_new`` tokens. ``profile_steps`` (needs argus_mode=2) records Argus regions of
        those decode steps only: the control block is armed with a coordinate window before the launch
        that covers them and disarmed after, while the generation keeps running; traces land in
        ``self.traces``."""
        self.set_prompt(prompt)
        total = len(prompt) + n_new - 1  # the last token needs no further step
        if total > self.config.max_seq:
            raise ValueError(f"prompt ({len(prompt)}) + new tokens ({n_new}) exceed max_seq={self.config.max_seq}")
        bounds = {0, total}
        bounds.update(range(0, total, chunk))
        if profile_steps is not None:
            if self.argus_mode != 2:
                raise ValueError(f"profile_steps needs a trace build (argus_mode=2), this decoder has argus_mode="
                                 f"{self.argus_mode}")
            bounds.update({min(max(profile_steps.start, 0), total), min(max(profile_steps.stop, 0), total)})
        edges = sorted(bounds)
        for lo, hi in zip(edges, edges[1:]):
            profiled = profile_steps is not None and lo >= profile_steps.start and hi <= profile_steps.stop
            if profiled:
                self._arm(lo, hi, trace_capacity)
            self.launch(lo, hi - lo)
            if profiled:
                self.trace_session.disarm()
                self.traces.append((range(lo, hi), self.trace_session.snapshot()))
        torch.cuda.synchronize(self.device)
        self.check_error()
        return self.tokens(len(prompt) + n_new)

    def _arm(self, lo: int, hi: int, capacity: int) -> None:
        from argus_rt.trace import TraceConfig, TraceSession

        if self.trace_session is None:
            cfg = TraceConfig(ctas=self.launch_info.grid, threads_per_cta=self.launch_info.threads, capacity=capacity)
            self.trace_session = TraceSession(self.module, cfg, device=self.device)
        self.trace_session.arm(coord_window=(coordinate(lo, 0), coordinate(hi, 0)))

    def region_ids(self) -> dict[int, str]:
        return {r.id: r.name for r in region_tree()}
