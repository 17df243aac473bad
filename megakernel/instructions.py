"""Megakernel instructions: one dataclass per op, each serialised to ``WORDS`` int32 words.

Word layout (the C++ side reads the same indices from ``csrc/megakernel/opcodes.cuh``; a test
parses that header and checks both agree):

    0 opcode   1 layer   2 wait counter   3 wait count per step   4 wait step delta
    5 signal counter   6..9 op arguments a0..a3   10..14 prefetch plan (written by the host runtime,
    zero in a serialised instruction)   15 zero (reserved)

An instruction of decode step ``s`` may start once ``counters[wait] >= (s + 1 + delta) * count``
(counters only grow: no per-step reset); when done it adds 1 to ``counters[signal]``.
``wait == NO_COUNTER`` means "no dependency".
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

WORDS = 16
NO_COUNTER = -1
# AttnPartial.arrive of a one-split launch's tile (row 40, TileShape.single_split; opcodes.cuh: ATTN_DIRECT): the tile
# writes its heads' normalised output o / l to attn_out[layer], which O-proj loads (OProj.combined = 1)
ATTN_DIRECT = -2

# Word indices, mirrored by csrc/megakernel/opcodes.cuh (W_*).
W_OPCODE, W_LAYER, W_WAIT, W_WAIT_COUNT, W_WAIT_DELTA, W_SIGNAL, W_A0, W_A1, W_A2, W_A3 = range(10)
# Prefetch plan words (megakernel/runtime.py: prefetch_plan): flags (bit 0: skip the tile's own L2
# prefetch), then two weight ranges, each (segment << 20 | length) and offset, in 16-byte units.
W_PF_FLAGS, W_PF_A, W_PF_A_OFF, W_PF_B, W_PF_B_OFF = range(10, 15)
PF_SKIP_OWN = 1
# Row 45's gated prefetch (runtime.prefetch_plan's ``gate``; MK_PF_GATE=1 builds): W_PF_GATE = gate counter <<
# PF_GATE_COUNT_BITS | its signals per step, and the gated length in 16-byte units in W_PF_FLAGS from PF_GATE_LEN_SHIFT.
W_PF_GATE = 15
PF_GATE_LEN_SHIFT, PF_GATE_COUNT_BITS = 8, 10
SEG_WQKV, SEG_WO, SEG_WGU, SEG_WD, SEG_LM_HEAD = range(5)  # segment = kind * 256 + layer

# Kinds of QKV head tiles (QkvHead.kind).
HEAD_Q, HEAD_K, HEAD_V = 0, 1, 2


class EncodingError(ValueError):
    """An instruction that cannot be serialised or a word vector that cannot be decoded."""


@dataclass(frozen=True)
class Instruction:
    """Fields shared by every op: which layer, what it waits for, what it signals."""

    layer: int
    wait: int  # counter index, or NO_COUNTER
    wait_count: int  # signals the wait counter gets per decode step
    wait_delta: int  # step offset of the dependency (-1: the previous step's producer)
    signal: int  # counter index this instruction increments when done

    OPCODE: ClassVar[int] = 0
    ARGS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def opcode(cls) -> int:
        return cls.OPCODE

    def args(self) -> list[int]:
        return [getattr(self, name) for name in self.ARGS]

    def serialize(self) -> list[int]:
        words = [self.opcode(), self.layer, self.wait, self.wait_count, self.wait_delta, self.signal, *self.args()]
        for i, w in enumerate(words):
            if not isinstance(w, int) or not -(2**31) <= w < 2**31:
                raise EncodingError(f"{type(self).__name__} word {i} = {w!r} is not an int32")
        if self.signal < 0:
            raise EncodingError(f"{type(self).__name__} must signal a counter, got signal={self.signal}")
        return words + [0] * (WORDS - len(words))

    def expected(self, step: int) -> int:
        """Counter value the dependency must reach before this instruction runs in ``step``."""
        if self.wait == NO_COUNTER:
            return 0
        return max(0, (step + 1 + self.wait_delta) * self.wait_count)


@dataclass(frozen=True)
class Embed(Instruction):
    """x[0] = embedding row of tokens[step] (fp32)."""

    OPCODE: ClassVar[int] = 1


@dataclass(frozen=True)
class QkvHead(Instruction):
    """Part ``part`` of one head's rows of RMSNorm(x[layer]) @ Wqkv^T, then RoPE (q, k) and KV append (k, v).

    With P parts per head (TileShape.qkv_parts), a q/k part holds the RoPE pairs (d, d + Dh/2) for
    d in [part * Dh/(2P), (part + 1) * Dh/(2P)): the packed weights order each head's rows that way.
    """

    kind: int  # HEAD_Q, HEAD_K or HEAD_V
    head: int  # head index within its kind
    part: int = 0
    OPCODE: ClassVar[int] = 2
    ARGS: ClassVar[tuple[str, ...]] = ("kind", "head", "part")


@dataclass(frozen=True)
class AttnPartial(Instruction):
    """GQA decode attention of one KV head's query group over one split of the KV positions.

    With P head parts (TileShape.attn_head_parts) the group's G query heads are cut into P tiles of
    G / P heads: part ``head_part`` covers group heads [head_part * G/P, (head_part + 1) * G/P)."""

    kv_head: int
    split: int
    head_part: int = 0
    # TileShape.last_combine: the counter of its (layer, KV head) group's arrivals; the arrival that completes
    # the step's count combines the group's splits (NO_COUNTER: O-proj combines, the default; ATTN_DIRECT: a one-split
    # launch's tile writes its heads' normalised output to attn_out, row 40)
    arrive: int = NO_COUNTER
    OPCODE: ClassVar[int] = 3
    ARGS: ClassVar[tuple[str, ...]] = ("kv_head", "split", "head_part", "arrive")


@dataclass(frozen=True)
class OProj(Instruction):
    """Rows [row0, row0 + rows) of x_mid = x + Wo @ combine(attention partials)."""

    row0: int
    rows: int
    # 1: load the combined vector attn_out[layer] that its KV groups' last AttnPartial tiles wrote (TileShape
    # last_combine True, or "auto" in a launch of the last-arrival form); 0: combine every head's splits itself
    combined: int = 0
    OPCODE: ClassVar[int] = 4
    ARGS: ClassVar[tuple[str, ...]] = ("row0", "rows", "combined")


@dataclass(frozen=True)
class GateUp(Instruction):
    """Features [f0, f0 + features) of h = SiLU(RMSNorm(x_mid) @ Wg^T) * (RMSNorm(x_mid) @ Wu^T)."""

    f0: int
    features: int
    OPCODE: ClassVar[int] = 5
    ARGS: ClassVar[tuple[str, ...]] = ("f0", "features")


@dataclass(frozen=True)
class Down(Instruction):
    """Rows [row0, row0 + rows) of x[layer + 1] = x_mid + Wd @ h."""

    row0: int
    rows: int
    OPCODE: ClassVar[int] = 6
    ARGS: ClassVar[tuple[str, ...]] = ("row0", "rows")


@dataclass(frozen=True)
class Logits(Instruction):
    """Rows [row0, row0 + rows) of logits = LMHead @ RMSNorm(x[n_layers])."""

    row0: int
    rows: int
    OPCODE: ClassVar[int] = 7
    ARGS: ClassVar[tuple[str, ...]] = ("row0", "rows")


@dataclass(frozen=True)
class Sample(Instruction):
    """tokens[step + 1] = greedy argmax, or Gumbel-max sample at the temperature (unless forced)."""

    OPCODE: ClassVar[int] = 8


INSTRUCTION_TYPES: tuple[type[Instruction], ...] = (Embed, QkvHead, AttnPartial, OProj, GateUp, Down, Logits, Sample)
BY_OPCODE = {cls.OPCODE: cls for cls in INSTRUCTION_TYPES}
assert len(BY_OPCODE) == len(INSTRUCTION_TYPES), "duplicate opcode"


def deserialize(words) -> Instruction:
    """Inverse of :meth:`Instruction.serialize`."""
    words = [int(w) for w in words]
    if len(words) != WORDS:
        raise EncodingError(f"an instruction has {WORDS} words, got {len(words)}")
    cls = BY_OPCODE.get(words[W_OPCODE])
    if cls is None:
        raise EncodingError(f"unknown opcode {words[W_OPCODE]}; valid opcodes: "
                            + ", ".join(f"{op} ({c.__name__})" for op, c in sorted(BY_OPCODE.items())))
    base = dict(layer=words[W_LAYER], wait=words[W_WAIT], wait_count=words[W_WAIT_COUNT],
                wait_delta=words[W_WAIT_DELTA], signal=words[W_SIGNAL])
    extra = {name: words[W_A0 + i] for i, name in enumerate(cls.ARGS)}
    return cls(**base, **extra)


def field_names(cls: type[Instruction]) -> list[str]:
    return [f.name for f in fields(cls)]
