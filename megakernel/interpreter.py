"""Reference interpreter: executes the instruction stream in PyTorch, one instruction at a time.

It runs on the same :class:`DecodeState` tensors as the kernel, in fp32 with bf16 weights and KV
cache, so it is the kernel's specification. ``order="random"`` runs any ready instruction (its
counter satisfied) in a random order, which catches a dependency the DAG forgot. :func:`localise`
replays one kernel step here and names the first instruction whose output differs.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import torch

from .instructions import (
    ATTN_DIRECT,
    HEAD_K,
    HEAD_Q,
    HEAD_V,
    AttnPartial,
    Down,
    Embed,
    GateUp,
    Instruction,
    Logits,
    OProj,
    QkvHead,
    Sample,
)
from .state import DecodeState


class InterpreterError(RuntimeError):
    """The instruction stream cannot make progress (a dependency that is never satisfied)."""


def gumbel_uniform(seed: int, step: int, n: int, first: int = 0) -> np.ndarray:
    """Uniform (0, 1) noise of the on-device sampler for indices [first, first + n): murmur3 finaliser
    of (index, step, seed)."""
    with np.errstate(over="ignore"):
        x = (np.arange(first, first + n, dtype=np.uint32) * np.uint32(0x9E3779B1) + np.uint32((step * 0x85EBCA77) & 0xFFFFFFFF)
             + np.uint32(seed & 0xFFFFFFFF))
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x85EBCA6B)
        x ^= x >> np.uint32(13)
        x *= np.uint32(0xC2B2AE35)
        x ^= x >> np.uint32(16)
    return ((x >> np.uint32(8)).astype(np.float64) + 0.5) / float(1 << 24)


@dataclass
class SamplingParams:
    """temperature 0 = greedy; otherwise Gumbel-max sampling with ``seed``."""

    temperature: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if not (self.temperature >= 0.0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")


class Interpreter:
    """Runs decode steps of ``state.program`` on ``state`` (tensors updated in place)."""

    def __init__(self, state: DecodeState, n_forced: int = 1, sampling: SamplingParams | None = None):
        self.s = state
        self.c = state.program.config
        self.tiles = state.program.tiles
        self.n_forced = n_forced
        self.sampling = sampling or SamplingParams()
        self.split = self.tiles.attn_split  # KV positions per AttnPartial tile of the launch (run_steps sets it)

    # ---- scheduling ---------------------------------------------------------------------------
    def run_steps(self, first: int, count: int, order: str = "list", seed: int = 0,
                  launch_end: int | None = None) -> None:
        """Steps [first, first + count) as one launch: the list of its program and combine form
        (Program.launch_form), chosen by the launch's end, ``launch_end`` when these steps are part of a longer
        launch (first + count). With split programs (TileShape.attn_split_long) the launch first sets the attention
        counters as the runtime does (Program.launch_counters) and runs its split length."""
        if order not in ("list", "random"):
            raise ValueError(f"order must be 'list' or 'random', got {order!r}")
        rng = random.Random(seed)
        end = first + count if launch_end is None else launch_end
        for ctr, value in self.s.program.launch_counters(first, end).items():
            self.s.t["counters"][ctr] = value
        self.split = self.tiles.split_at(end)
        instructions = self.s.program.launch_form(end)
        for step in range(first, first + count):
            if order == "list":
                for ins in instructions:
                    self._check_ready(ins, step)
                    self.execute(ins, step)
            else:
                self._run_random(instructions, step, rng)

    def _ready(self, ins: Instruction, step: int) -> bool:
        return ins.wait < 0 or int(self.s.t["counters"][ins.wait]) >= ins.expected(step)

    def _check_ready(self, ins: Instruction, step: int) -> None:
        if not self._ready(ins, step):
            raise InterpreterError(f"step {step}: {ins} runs before its dependency: counter "
                                   f"{self.s.program.counters[ins.wait]!r} = {int(self.s.t['counters'][ins.wait])}"
                                   f" < {ins.expected(step)}")

    def _run_random(self, instructions: list[Instruction], step: int, rng: random.Random) -> None:
        pending = list(instructions)
        while pending:
            ready = [i for i, ins in enumerate(pending) if self._ready(ins, step)]
            if not ready:
                raise InterpreterError(f"step {step}: deadlock, {len(pending)} instructions wait; first: {pending[0]}")
            ins = pending.pop(rng.choice(ready))
            self.execute(ins, step)

    # ---- ops ----------------------------------------------------------------------------------
    def execute(self, ins: Instruction, step: int) -> None:
        handler = {Embed: self._embed, QkvHead: self._qkv, AttnPartial: self._attn, OProj: self._oproj,
                   GateUp: self._gateup, Down: self._down, Logits: self._logits, Sample: self._sample}.get(type(ins))
        if handler is None:
            raise InterpreterError(f"no handler for {type(ins).__name__}")
        handler(ins, step)
        self.s.t["counters"][ins.signal] += 1

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean() + self.c.eps) * w.float()

    def _embed(self, ins: Embed, step: int) -> None:
        t = self.s.t
        t["x"][0] = t["embed"][int(t["tokens"][step])].float()

    def _qkv_dims(self, ins: QkvHead) -> tuple[int, torch.Tensor]:
        """(first packed Wqkv row, head dims written) of a QkvHead tile."""
        c, P = self.c, self.tiles.qkv_parts
        rows = c.head_dim // P
        base = (0, c.hidden, c.hidden + c.kv_dim)[ins.kind] + ins.head * c.head_dim + ins.part * rows
        if ins.kind == HEAD_V:
            return base, torch.arange(ins.part * rows, (ins.part + 1) * rows)
        h = rows // 2
        first = torch.arange(ins.part * h, (ins.part + 1) * h)
        return base, torch.cat([first, first + c.head_dim // 2])

    def _qkv(self, ins: QkvHead, step: int) -> None:
        t, c, L = self.s.t, self.c, ins.layer
        base, dims = self._qkv_dims(ins)
        xn = self._norm(t["x"][L], t["attn_norm"][L])
        y = t["wqkv"][L, base: base + len(dims)].float() @ xn  # [rows]
        if ins.kind in (HEAD_Q, HEAD_K):
            h = len(dims) // 2
            cos, sin = t["rope_cos"][step, dims[:h]], t["rope_sin"][step, dims[:h]]
            a, b = y[:h].clone(), y[h:].clone()
            y = torch.cat([a * cos - b * sin, b * cos + a * sin])
        if ins.kind == HEAD_Q:
            t["q"][L, ins.head * c.head_dim + dims] = y
        else:
            cache = t["k_cache"] if ins.kind == HEAD_K else t["v_cache"]
            cache[L, ins.head, step, dims] = y.to(torch.bfloat16)

    def _split_range(self, split: int, step: int) -> tuple[int, int]:
        lo = split * self.split
        return lo, min(lo + self.split, step + 1)

    def _attn(self, ins: AttnPartial, step: int) -> None:
        t, c, L = self.s.t, self.c, ins.layer
        lo, hi = self._split_range(ins.split, step)
        if ins.arrive == ATTN_DIRECT:  # row 40, a one-split launch: the head's only split, normalised into attn_out
            self._attn_direct(ins, step, lo, hi)
            return
        if lo < hi:  # beyond the current length: nothing to attend to
            self._attn_partial(ins, lo, hi)
        if ins.arrive >= 0:  # TileShape.last_combine: empty splits arrive too; the step's last arrival combines
            t["counters"][ins.arrive] += 1
            if self._last_arrival(int(t["counters"][ins.arrive]), step):
                heads = slice(ins.kv_head * c.group, (ins.kv_head + 1) * c.group)
                t["attn_out"][L, heads.start * c.head_dim: heads.stop * c.head_dim] = self._combine(L, step, heads)

    def _last_arrival(self, count: int, step: int) -> bool:
        """The kernel's test (megakernel.cu: attn_arrive) on the arrival counter after this tile's add. "auto" and
        "long": a whole multiple of the launch's tiles per group, since launches of the O-proj form add no arrivals
        (every tile of a step arrives before any of the next, so the multiple is this step's count); True: (step + 1)
        of them."""
        per_step = -(-self.c.max_seq // self.split) * self.tiles.head_parts(self.c)
        if self.tiles.last_combine in ("auto", "long"):
            return count % per_step == 0
        return count == (step + 1) * per_step

    def _attn_partial(self, ins: AttnPartial, lo: int, hi: int) -> None:
        t, c, L = self.s.t, self.c, ins.layer
        k = t["k_cache"][L, ins.kv_head, lo:hi].float()  # [n, Dh]
        v = t["v_cache"][L, ins.kv_head, lo:hi].float()
        for head in _attn_heads(ins, c, self.tiles):
            q = t["q"][L, head * c.head_dim: (head + 1) * c.head_dim]
            scores = (k @ q) / math.sqrt(c.head_dim)
            m = scores.max()
            p = torch.exp(scores - m)
            t["attn_part"][L, head, ins.split, : c.head_dim] = p @ v
            t["attn_part"][L, head, ins.split, c.head_dim] = m
            t["attn_part"][L, head, ins.split, c.head_dim + 1] = p.sum()

    def _attn_direct(self, ins: AttnPartial, step: int, lo: int, hi: int) -> None:
        """A one-split launch's tile (TileShape.single_split): positions [0, step] are its split's, so its heads'
        attention output is o / l of that split, written to attn_out[layer] (what O-proj then loads)."""
        t, c, L = self.s.t, self.c, ins.layer
        if lo != 0 or hi != step + 1:  # the kernel's tile would attend to positions [0, split) only
            raise InterpreterError(f"{ins} in a launch of {self.split}-position splits is no one-split tile")
        k = t["k_cache"][L, ins.kv_head, lo:hi].float()
        v = t["v_cache"][L, ins.kv_head, lo:hi].float()
        for head in _attn_heads(ins, c, self.tiles):
            q = t["q"][L, head * c.head_dim: (head + 1) * c.head_dim]
            scores = (k @ q) / math.sqrt(c.head_dim)
            p = torch.exp(scores - scores.max())
            t["attn_out"][L, head * c.head_dim: (head + 1) * c.head_dim] = (p @ v) / p.sum()

    def _combine(self, layer: int, step: int, heads: slice = slice(None)) -> torch.Tensor:
        """Attention output of ``heads`` (all: [hidden]) from the used splits' (o, max, sum) partials."""
        c = self.c
        used = -(-(step + 1) // self.split)
        part = self.s.t["attn_part"][layer, heads, :used]  # [heads, used, Dh + 2]
        m = part[..., c.head_dim]
        w = torch.exp(m - m.max(dim=1, keepdim=True).values)  # [H, used]
        o = (w[..., None] * part[..., : c.head_dim]).sum(1) / (w * part[..., c.head_dim + 1]).sum(1, keepdim=True)
        return o.reshape(-1)

    def _oproj(self, ins: OProj, step: int) -> None:
        t, L, r = self.s.t, ins.layer, slice(ins.row0, ins.row0 + ins.rows)
        # combined: the groups' last AttnPartial tiles combined the splits (attn_out); else this tile does
        attn = t["attn_out"][L] if ins.combined else self._combine(L, step)
        t["x_mid"][L, r] = t["x"][L, r] + t["wo"][L, r].float() @ attn

    def _gateup(self, ins: GateUp, step: int) -> None:
        t, L, n = self.s.t, ins.layer, ins.features
        xn = self._norm(t["x_mid"][L], t["ffn_norm"][L])
        rows = t["wgu"][L, 2 * ins.f0: 2 * ins.f0 + 2 * n].float()  # tile: n gate rows, then n up rows
        y = rows @ xn
        t["h"][L, ins.f0: ins.f0 + n] = torch.nn.functional.silu(y[:n]) * y[n:]

    def _down(self, ins: Down, step: int) -> None:
        t, L, r = self.s.t, ins.layer, slice(ins.row0, ins.row0 + ins.rows)
        t["x"][L + 1, r] = t["x_mid"][L, r] + t["wd"][L, r].float() @ t["h"][L]

    def _logits(self, ins: Logits, step: int) -> None:
        t, r = self.s.t, slice(ins.row0, ins.row0 + ins.rows)
        L = self.c.n_layers
        t["logits"][r] = t["lm_head"][r].float() @ self._norm(t["x"][L], t["final_norm"])
        if self.tiles.fused_sample:  # this tile's best (value, index): what the fused Sample reduces
            vals = self._sample_values(t["logits"][r].double(), step, ins.row0)
            k = int(torch.argmax(vals))  # first of equal maxima: the lowest index
            t["sample_val"][ins.row0 // ins.rows] = vals[k]
            t["sample_idx"][ins.row0 // ins.rows] = ins.row0 + k

    def _sample_values(self, logits: torch.Tensor, step: int, first: int = 0) -> torch.Tensor:
        """What the sampler maximises over vocabulary rows [first, first + len): the logit (greedy), or
        logit / temperature + Gumbel noise of (seed, step, row)."""
        if self.sampling.temperature > 0:
            u = torch.from_numpy(gumbel_uniform(self.sampling.seed, step, logits.numel(), first)).to(logits.device)
            logits = logits / self.sampling.temperature - torch.log(-torch.log(u))
        return logits

    def _sample(self, ins: Sample, step: int) -> None:
        t = self.s.t
        if step + 1 < self.n_forced or step + 1 >= t["tokens"].numel():
            return
        if self.tiles.fused_sample:  # the partials of the wait_count Logits tiles, as the kernel reduces them;
            # ties go to the first tile, so to the lowest index
            t["tokens"][step + 1] = int(t["sample_idx"][int(torch.argmax(t["sample_val"][: ins.wait_count]))])
            return
        t["tokens"][step + 1] = int(torch.argmax(self._sample_values(t["logits"].double(), step)))


def _attn_heads(ins: AttnPartial, c, tiles) -> range:
    """Query heads of an AttnPartial tile: its head part of its KV head's group."""
    per = c.group // tiles.head_parts(c)
    first = ins.kv_head * c.group + ins.head_part * per
    return range(first, first + per)


# ---- localisation ---------------------------------------------------------------------------------
def outputs_of(ins: Instruction, state: DecodeState, step: int, launch_end: int | None = None) -> torch.Tensor:
    """View of what ``ins`` writes in ``step`` (empty for a split past the current length) in a launch ending at
    ``launch_end`` (default step + 1: its split length, TileShape.split_at)."""
    t, c = state.t, state.program.config
    if isinstance(ins, Embed):
        return t["x"][0]
    if isinstance(ins, QkvHead):
        _, dims = Interpreter(state)._qkv_dims(ins)
        if ins.kind == HEAD_Q:
            return t["q"][ins.layer, ins.head * c.head_dim + dims]
        return (t["k_cache"] if ins.kind == HEAD_K else t["v_cache"])[ins.layer, ins.head, step, dims]
    if isinstance(ins, AttnPartial):
        tiles = state.program.tiles
        kv_len = step + 1 if launch_end is None else launch_end
        lo = ins.split * tiles.split_at(kv_len)
        heads = _attn_heads(ins, c, tiles)
        if ins.arrive == ATTN_DIRECT:  # row 40, a one-split launch: its heads' rows of attn_out
            return t["attn_out"][ins.layer, heads.start * c.head_dim: heads.stop * c.head_dim]
        part = t["attn_part"][ins.layer, heads.start: heads.stop, ins.split] if lo <= step else t["attn_part"][:0]
        if ins.arrive >= 0 and (ins.split, ins.head_part) == (tiles.splits_at(c, kv_len) - 1, tiles.head_parts(c) - 1):
            # last_combine: the group's combined output, charged to its last tile in stream order (on the device
            # whichever tile arrives last writes it)
            rows = slice(ins.kv_head * c.group * c.head_dim, (ins.kv_head + 1) * c.group * c.head_dim)
            return torch.cat([part.reshape(-1), t["attn_out"][ins.layer, rows]])
        return part
    if isinstance(ins, OProj):
        return t["x_mid"][ins.layer, ins.row0: ins.row0 + ins.rows]
    if isinstance(ins, GateUp):
        return t["h"][ins.layer, ins.f0: ins.f0 + ins.features]
    if isinstance(ins, Down):
        return t["x"][ins.layer + 1, ins.row0: ins.row0 + ins.rows]
    if isinstance(ins, Logits):
        return t["logits"][ins.row0: ins.row0 + ins.rows]
    if isinstance(ins, Sample):
        return t["tokens"][step + 1: step + 2]
    raise InterpreterError(f"no output map for {type(ins).__name__}")


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| in float64; inf when got has NaN or ref is all zero but got is not."""
    got, ref = got.double(), ref.double()
    if torch.isnan(got).any() or torch.isinf(got).any():
        return math.inf
    denom = ref.norm().item()
    diff = (got - ref).norm().item()
    return diff / denom if denom > 0 else (0.0 if diff == 0 else math.inf)


def localise(before: DecodeState, after: DecodeState, step: int, n_forced: int = 1,
             sampling: SamplingParams | None = None, rtol: float = 1e-2,
             device: str | torch.device = "cpu", launch_end: int | None = None) -> tuple[int, Instruction, float] | None:
    """Replay ``step`` from ``before`` in the interpreter; compare with the kernel's ``after``.

    Returns (index, instruction, relative error) of the first instruction in stream order whose
    output differs by more than ``rtol`` (token mismatches count as error 1), or None. ``launch_end``: the end
    of the kernel's launch that ran ``step`` (default step + 1, a one-step launch), which picks the program (split
    length) and the combine form.
    """
    ref = before.clone(device=device)  # the interpreter can run on the GPU too, for full-size models
    got = after.clone(device=device)
    end = step + 1 if launch_end is None else launch_end
    Interpreter(ref, n_forced=n_forced, sampling=sampling).run_steps(step, 1, launch_end=end)
    for idx, ins in enumerate(ref.program.launch_form(end)):
        want, have = outputs_of(ins, ref, step, end), outputs_of(ins, got, step, end)
        if want.numel() == 0:
            continue
        if want.dtype in (torch.int32, torch.int64):
            err = 0.0 if torch.equal(want, have) else 1.0
        else:
            err = relative_error(have, want)
        if err > rtol:
            return idx, ins, err
    return None
