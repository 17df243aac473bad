"""Lower one TinyLlama decode step to a static tile DAG of megakernel instructions.

The list is in a topological order: every instruction waits only on counters signalled by
instructions earlier in the list (or, for ``Embed``, by the previous step's ``Sample``). Workers
take instructions in list order from a ticket counter, so the lowest unfinished ticket can always
run: the order itself rules out deadlock.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from tinyllama.config import LlamaConfig

from .instructions import (
    ATTN_DIRECT,
    HEAD_K,
    HEAD_Q,
    HEAD_V,
    NO_COUNTER,
    WORDS,
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


class DagError(ValueError):
    """A tile shape that does not divide the model, or a DAG whose dependencies are wrong."""


@dataclass(frozen=True)
class TileShape:
    """How each op is cut into tiles (sizes in rows, features or KV positions)."""

    # Defaults measured fastest on H200 on 2026-12-01 (megakernel/NOTES.md, trajectory table).
    o_rows: int = 16  # Wo rows per OProj tile
    # FFN features per GateUp tile (2x as many weight rows). 22 (256 TinyLlama tiles) since row 23 (NOTES.md;
    # H200 2026-12-02 00:50, SM-spread tickets: 1.001 / 1.125 ms/token at kv 128 / 1024 vs 1.008 / 1.128 for
    # 32, within the repeats' spread)
    gate_features: int = 22
    down_rows: int = 16  # Wd rows per Down tile
    logits_rows: int = 64  # LM-head rows per Logits tile
    attn_split: int = 128  # KV positions per AttnPartial tile
    qkv_parts: int = 4  # QkvHead tiles per head (each head_dim / qkv_parts rows)
    # AttnPartial tiles per (KV head, split), each with group / parts query heads; 0 = 2 heads per tile
    # (group / 2 parts; 1 part for groups of <= 2), measured fastest on H200 (4 parts for TinyLlama).
    attn_head_parts: int = 0
    # fused_sample: each Logits tile also writes the argmax (greedy) or Gumbel-max of its rows as a
    # (value, index) pair, and Sample reduces those vocab / logits_rows pairs instead of all vocab logits.
    # On by default since 2026-12-01 (H200 15:08: 1.078 vs 1.093 ms/token, megakernel/NOTES.md row 14);
    # False compiles the Sample over all logits (the runtime's build flag MK_FUSED_SAMPLE=0).
    fused_sample: bool = True
    # last_combine (row 26, opt-in; the build flag MK_LAST_COMBINE=1): each AttnPartial tile arrives on a
    # per-(layer, KV head) counter, and the group's last arrival combines the group's splits into attn_out, which
    # the O-proj tiles load instead of each combining every head's splits itself (the default, False).
    # "auto" (row 27, MK_LAST_COMBINE=2: one binary with both paths): each launch runs the O-proj combine when its
    # largest KV length is <= combine_threshold and the last-arrival combine above it (combine_last_at).
    # "long" (row 57, opt-in; MK_LAST_COMBINE=2 with the default's MK_ONE_SPLIT and MK_EARLY_REGS): only the
    # attn_split_long program combines by last arrival, so its O-proj tiles load attn_out (OProj.combined = 1) and
    # take the early path as the one-split launches' do; the short and one-split programs keep their forms.
    last_combine: bool | str = False
    # KV positions (used by last_combine="auto" only). 512 = 4 splits of 128. H200 2026-12-02 02:41: the last-arrival
    # form +1.7% at kv 128 (2-3 used splits), -1.7% at kv 1024 (9-10). Break-even by the count of dependent L2 round
    # trips (O-proj: ceil(u/8) + ceil(u/2); last arrival: atomic + ceil(u/8) + O-proj's vector load): equal at u = 3-4
    # used splits, the last arrival ahead from u = 5 (513 positions); a straight line through the two measurements
    # crosses at u ~ 5.6 (~720) and gives a launch between 513 and ~720 away ~0.3% at most (NOTES.md "Ready: row 27").
    combine_threshold: int = 512
    # attn_split_long (row 35, opt-in; 0 = off): a launch whose largest KV length is above split_threshold runs the
    # program of attn_split_long-position splits, the others attn_split's (split_at, Program.launch_program). The state
    # keeps attn_split's slots (the more splits); the kernel reads the split length from the parameter block, so no
    # build flag and the default cubin. H200 2026-12-02 14:30: TileShape(attn_split=256) -5.8% at kv 1024, +1.2% at
    # kv 128 against 128 (NOTES.md "Ready: row 35").
    attn_split_long: int = 0
    # KV positions (attn_split_long only). 512 = 4 splits of 128: a 256-split tile with more than 128 positions takes
    # two K/V trips (row 32's tile: 128 rows per trip at Dh 64), which the combine gains back only from 3 used
    # 128-splits (kv > 256), and it is ahead from kv 769 (NOTES.md "Ready: row 35"); 512 keeps every step of a launch
    # of up to 257 steps above kv 256 when it runs the long splits.
    split_threshold: int = 512
    # single_split (row 40, opt-in; 0 = off; the build flag MK_ONE_SPLIT=1): a launch whose largest KV length is <=
    # single_split runs the one-split program (Program.one_split): attn_split = single_split, so each head has exactly
    # one non-empty split, whose AttnPartial tiles (split 0 only: n_kv_heads x head_parts per layer) write their heads'
    # normalised output o / l to attn_out[layer] and O-proj loads it (OProj.combined = 1): no combine. Longer launches
    # run the other programs (attn_split / attn_split_long by split_threshold) as without it (NOTES.md "Ready: row 40").
    single_split: int = 0
    # early_regs (rows 48 + 48b, the default since their H200 run, 2026-12-03: 0.861 -> 0.789 ms/token at kv 128; the
    # build flag MK_EARLY_REGS, csrc/megakernel/early.cuh): a mask of the tiles that load their weights into registers
    # before their dependency wait: 1 QKV, 2 one-split O-proj (needs single_split), 4 gate/up's first 16 rows, 8 (row
    # 48c, opt-in) Down rows' first trips. Tiles of other shapes take the plain path in the same build. 0: off
    # (NOEARLY_TILES, the default before row 48).
    early_regs: int = 0

    def check(self, c: LlamaConfig) -> None:
        for name, value, total in (("o_rows", self.o_rows, c.hidden), ("gate_features", self.gate_features, c.ffn),
                                   ("down_rows", self.down_rows, c.hidden), ("logits_rows", self.logits_rows, c.vocab),
                                   ("attn_split", self.attn_split, c.max_seq)):
            if not isinstance(value, int) or value <= 0 or value % 2:
                raise DagError(f"TileShape.{name} must be a positive even int, got {value!r}")
            if name != "attn_split" and total % value:
                raise DagError(f"TileShape.{name}={value} does not divide the model dimension {total}")
        if not isinstance(self.attn_head_parts, int) or self.attn_head_parts < 0 or c.group % self.head_parts(c):
            raise DagError(f"TileShape.attn_head_parts={self.attn_head_parts!r} must be a positive int dividing the "
                           f"query group ({c.group} heads per KV head)")
        if not isinstance(self.fused_sample, bool):
            raise DagError(f"TileShape.fused_sample must be a bool, got {self.fused_sample!r}")
        if not (isinstance(self.last_combine, bool) or self.last_combine in ("auto", "long")):
            raise DagError(f"TileShape.last_combine must be a bool, 'auto' or 'long', got {self.last_combine!r}")
        if not isinstance(self.combine_threshold, int) or isinstance(self.combine_threshold, bool) or \
                self.combine_threshold < 0:
            raise DagError(f"TileShape.combine_threshold must be an int >= 0 (KV positions), got "
                           f"{self.combine_threshold!r}")
        long = self.attn_split_long
        if not isinstance(long, int) or isinstance(long, bool) or long < 0 or long % 2 or 0 < long <= self.attn_split:
            raise DagError(f"TileShape.attn_split_long must be 0 (off) or an even int > attn_split ({self.attn_split}), "
                           f"got {long!r}")
        if long and self.last_combine not in (False, "long"):
            raise DagError(f"TileShape.attn_split_long={long} needs last_combine=False or 'long' (the last-arrival "
                           f"count per group is one split length's), got last_combine={self.last_combine!r}")
        if self.last_combine == "long" and not long:
            raise DagError("TileShape.last_combine='long' combines in the attn_split_long launches: set attn_split_long")
        if not isinstance(self.split_threshold, int) or isinstance(self.split_threshold, bool) or \
                self.split_threshold < 0:
            raise DagError(f"TileShape.split_threshold must be an int >= 0 (KV positions), got {self.split_threshold!r}")
        one = self.single_split
        if not isinstance(one, int) or isinstance(one, bool) or one < 0 or one % 2:
            raise DagError(f"TileShape.single_split must be 0 (off) or a positive even int (KV positions), got {one!r}")
        if one and self.last_combine not in (False, "long"):
            raise DagError(f"TileShape.single_split={one} needs last_combine=False or 'long' (both write attn_out in the "
                           f"same launches otherwise), got "
                           f"last_combine={self.last_combine!r}")
        early = self.early_regs
        if not isinstance(early, int) or isinstance(early, bool) or not 0 <= early <= 15:
            raise DagError(f"TileShape.early_regs must be a mask in [0, 15] (1 QKV, 2 O-proj, 4 gate/up, 8 Down), got "
                           f"{early!r}")
        if not isinstance(self.qkv_parts, int) or self.qkv_parts < 1 or c.head_dim % (4 * self.qkv_parts):
            raise DagError(f"TileShape.qkv_parts={self.qkv_parts!r} must be a positive int with head_dim "
                           f"({c.head_dim}) divisible by 4 * qkv_parts (whole, even RoPE pair blocks)")

    def combine_last_at(self, kv_len: int) -> bool:
        """Whether a launch whose largest KV length is ``kv_len`` (its last step's position + 1) runs the
        last-arrival combine: always (True), never (False), above combine_threshold ("auto"), or when it runs the
        attn_split_long program ("long")."""
        if self.last_combine == "auto":
            return kv_len > self.combine_threshold
        if self.last_combine == "long":
            return self.launch_key(kv_len) == self.attn_split_long
        return self.last_combine

    def one_split_at(self, kv_len: int) -> bool:
        """Whether a launch whose largest KV length is ``kv_len`` runs the one-split program (single_split)."""
        return bool(self.single_split) and kv_len <= self.single_split

    def split_at(self, kv_len: int) -> int:
        """KV positions per AttnPartial tile of a launch whose largest KV length is ``kv_len`` (its last step's
        position + 1): single_split in a one-split launch, else attn_split_long above split_threshold when set, else
        attn_split."""
        if self.one_split_at(kv_len):
            return self.single_split
        return self.attn_split_long if self.attn_split_long and kv_len > self.split_threshold else self.attn_split

    def launch_key(self, kv_len: int) -> int | str:
        """Key of the program a launch whose largest KV length is ``kv_len`` runs, in Program.split_programs (and in
        the decoder's words, MegakernelDecoder.forms): ONE_SPLIT for a one-split launch, else its split length."""
        return ONE_SPLIT if self.one_split_at(kv_len) else self.split_at(kv_len)

    def splits(self) -> tuple[int, ...]:
        """The split lengths a launch may run (the short one first)."""
        return (self.attn_split,) + ((self.attn_split_long,) if self.attn_split_long else ())

    def head_parts(self, c: LlamaConfig) -> int:
        """AttnPartial tiles per (KV head, split) for this model (resolves attn_head_parts = 0)."""
        return self.attn_head_parts or max(1, c.group // 2)

    def n_splits(self, c: LlamaConfig) -> int:
        """AttnPartial tiles per KV head (covers the whole KV-cache capacity) of attn_split; with attn_split_long also
        the state's partial slots per head (the kernel's p.n_splits: their stride in every launch)."""
        return -(-c.max_seq // self.attn_split)

    def splits_at(self, c: LlamaConfig, kv_len: int) -> int:
        """AttnPartial tiles per (KV head, head part) in a launch whose largest KV length is ``kv_len``: its split
        length's cover of the KV-cache capacity (the kernel's last-arrival count per group, with head_parts)."""
        return -(-c.max_seq // self.split_at(kv_len))


# Program.split_programs' key of the one-split program (TileShape.single_split): not a split length, since
# single_split may equal attn_split_long (DEFAULT_TILES' 256 with single_split=256).
ONE_SPLIT = "one_split"


@dataclass
class Program:
    """A decode step as instructions plus the names of the counters they use."""

    config: LlamaConfig
    tiles: TileShape
    instructions: list[Instruction] = field(default_factory=list)
    counters: list[str] = field(default_factory=list)
    # TileShape.attn_split_long: the concrete program of each split length (split -> Program; same counters, their
    # lists differ in the AttnPartial tiles and O-proj's wait count); this program's own list is attn_split's
    split_programs: dict[int | str, "Program"] = field(default_factory=dict)
    # TileShape.single_split: this concrete program is the one-split form (split 0 only, AttnPartial.arrive =
    # ATTN_DIRECT, OProj.combined = 1), split_programs[ONE_SPLIT] of its composite program
    one_split: bool = False
    _split_counts: dict | None = field(default=None, repr=False, compare=False)  # launch_counters' cache

    def counter(self, name: str) -> int:
        self.counters.append(name)
        return len(self.counters) - 1

    def words(self, instructions: list[Instruction] | None = None) -> np.ndarray:
        """int32 array [n_instructions, WORDS]: what the kernel reads (of ``instructions``: a form of this
        program's list, by default the list itself)."""
        ins = self.instructions if instructions is None else instructions
        return np.asarray([i.serialize() for i in ins], dtype=np.int32).reshape(-1, WORDS)

    def form(self, last: bool) -> list[Instruction]:
        """The instruction list of one combine form: ``last``, the groups' last AttnPartial tiles combine (they
        arrive on their counters, O-proj loads attn_out), else each O-proj tile combines. A last_combine="auto"
        program's own list is the last-arrival form, the other one differs only there (same waits, signals and
        counters: a launch may run either on the same state); other programs have only their own form."""
        if self.tiles.last_combine == "long":  # a composite program's own list is attn_split's, the O-proj combine
            if last:
                raise DagError("a TileShape.last_combine='long' program's own list has no last-arrival form: take its "
                               "launch program's (launch_form)")
            return self.instructions
        if self.tiles.last_combine != "auto":
            if last != self.tiles.last_combine:
                raise DagError(f"a TileShape.last_combine={self.tiles.last_combine} program has no "
                               f"{'last-arrival' if last else 'O-proj'} combine form")
            return self.instructions
        if last:
            return self.instructions
        return oproj_combine_list(self.instructions)

    def launch_program(self, step_end: int) -> "Program":
        """The program a launch ending before step ``step_end`` runs: with TileShape.attn_split_long the one of
        split_at(step_end) (its largest KV length: step s attends positions 0..s), else this one."""
        return self.split_programs[self.tiles.launch_key(step_end)] if self.split_programs else self

    def launch_form(self, step_end: int) -> list[Instruction]:
        """The list a launch ending before step ``step_end`` runs: its program (launch_program), and in it the
        combine form of its largest KV length, step_end (TileShape.combine_last_at)."""
        return self.launch_program(step_end).form(self.tiles.combine_last_at(step_end))

    def launch_counters(self, step_begin: int, step_end: int) -> dict[int, int]:
        """Counter index -> the value a launch of steps [step_begin, step_end) starts from, for the counters whose
        signals per step differ between the split programs (attn[L]): step_begin x the launch program's count.
        Counters carry across launches and a wait expects (step + 1) x count, so after a launch of the other split
        length they hold step_begin x the other count; every other counter already holds its value. Empty without
        split programs."""
        if not self.split_programs:
            return {}
        if self._split_counts is None:  # cached: one pass over each list, not one per launch
            counts = {s: p.signals_per_step() for s, p in self.split_programs.items()}
            differ = [i for i in range(len(self.counters)) if len({cs[i] for cs in counts.values()}) > 1]
            self._split_counts = {s: {i: cs[i] for i in differ} for s, cs in counts.items()}
        return {i: step_begin * n for i, n in self._split_counts[self.tiles.launch_key(step_end)].items()}

    def signals_per_step(self) -> list[int]:
        counts = [0] * len(self.counters)
        for ins in self.instructions:
            counts[ins.signal] += 1
        return counts

    def check(self) -> None:
        """Raise DagError unless every wait names a counter that earlier instructions fill exactly."""
        counts = self.signals_per_step()
        seen = [0] * len(self.counters)
        for idx, ins in enumerate(self.instructions):
            if not 0 <= ins.signal < len(self.counters):
                raise DagError(f"instruction {idx} ({ins}) signals unknown counter {ins.signal}")
            if ins.wait != NO_COUNTER:
                if not 0 <= ins.wait < len(self.counters):
                    raise DagError(f"instruction {idx} ({ins}) waits on unknown counter {ins.wait}")
                if ins.wait_count != counts[ins.wait]:
                    raise DagError(f"instruction {idx} ({ins}) expects {ins.wait_count} signals per step on "
                                   f"{self.counters[ins.wait]!r}, which gets {counts[ins.wait]}")
                filled_before = seen[ins.wait] if ins.wait_delta == 0 else counts[ins.wait]
                if ins.wait_delta not in (0, -1) or filled_before != ins.wait_count:
                    raise DagError(f"instruction {idx} ({ins}) waits on {self.counters[ins.wait]!r} before all "
                                   "its producers are earlier in the stream: deadlock")
            seen[ins.signal] += 1
        self._check_arrivals()

    def _check_arrivals(self) -> None:
        """last_combine's arrival counters: each gets exactly one KV head's tiles (the kernel's last-arrival test
        counts n_splits * head_parts per step) and is no dependency counter."""
        c, tiles = self.config, self.tiles
        arrivals: dict[int, list[AttnPartial]] = {}
        for ins in self.instructions:
            if isinstance(ins, AttnPartial) and ins.arrive >= 0:
                arrivals.setdefault(ins.arrive, []).append(ins)
        last = tiles.last_combine if tiles.last_combine != "long" else False  # "long": the composite's own list
        if bool(arrivals) != bool(last):
            raise DagError(f"TileShape.last_combine={tiles.last_combine} but {len(arrivals)} arrival counters")
        direct = [ins for ins in self.instructions if isinstance(ins, AttnPartial) and ins.arrive == ATTN_DIRECT]
        attn = [ins for ins in self.instructions if isinstance(ins, AttnPartial)]
        if self.one_split != bool(direct) or (direct and (len(direct) != len(attn) or {i.split for i in direct} != {0})):
            raise DagError(f"one_split={self.one_split} but {len(direct)} of {len(attn)} AttnPartial tiles write attn_out "
                           f"(a one-split program has split 0 only, every tile direct)")
        combined = {ins.combined for ins in self.instructions if isinstance(ins, OProj)}
        if combined != {int(bool(last) or self.one_split)}:
            raise DagError(f"TileShape.last_combine={tiles.last_combine}, one_split={self.one_split} but OProj.combined "
                           f"in {sorted(combined)}")
        waited = {ins.wait for ins in self.instructions} | {ins.signal for ins in self.instructions}
        for ctr, group in arrivals.items():
            heads = {(ins.layer, ins.kv_head) for ins in group}
            if ctr in waited or not 0 <= ctr < len(self.counters) or len(heads) != 1 or \
                    len(group) != tiles.n_splits(c) * tiles.head_parts(c):
                raise DagError(f"arrival counter {ctr} must count one KV head's {tiles.n_splits(c)} x "
                               f"{tiles.head_parts(c)} AttnPartial tiles and nothing else, got {sorted(heads)}")


# The decoder's tiles for TinyLlama when none are given (MegakernelDecoder through default_tiles): TileShape's defaults
# plus row 35's per-launch split (attn_split_long=256; H200 2026-12-02 15:18, NOTES.md "Row 35 measured"), row 36's
# 8-row Down tiles that the default build (MK_DOWN_PIECES=1) streams with every warp (17:54, "Row 36 measured"), row
# 40's one-split launches up to 384 positions (no combine; option_flags adds -DMK_ONE_SPLIT=1) and row 42's one query
# head per attention tile (attn_head_parts = the query group, 8): H200 2026-12-02 19:07, b693915, 0.858 vs 0.902
# ms/token at kv 128 and 0.957 vs 0.957 at kv 1024 against the default before ("Row 42 measured"), which
# benchmarks/decode.py keeps as the control row mk_combine (COMBINE_TILES). A TileShape the caller builds keeps one
# split length, 16-row Down tiles, the combine and 2-head tiles unless it sets them (rows that pin a split, a
# last-arrival combine or an older default measure exactly what they name).
DEFAULT_TILES = TileShape(down_rows=8, attn_split_long=256, single_split=384, attn_head_parts=8, early_regs=7)
# The default before row 48 (rows 40 + 42 on row 36's tiles): every weight tile loads after its wait; the base of the
# opt-in rows measured before it (45-47) and of those whose flags replace the early path's wait or loop.
NOEARLY_TILES = replace(DEFAULT_TILES, early_regs=0)
# The default before rows 40 + 42 (rows 36-39): every launch combines its splits in O-proj, 2 query heads per tile.
COMBINE_TILES = TileShape(down_rows=8, attn_split_long=256)


def default_tiles(config: LlamaConfig) -> TileShape:
    """DEFAULT_TILES for ``config``: one query head per attention tile whatever the model's query group is."""
    return replace(DEFAULT_TILES, attn_head_parts=config.group)


def build_decode_program(config: LlamaConfig, tiles: TileShape | None = None) -> Program:
    """The static tile DAG of one decode step."""
    c = config
    tiles = tiles or TileShape()
    tiles.check(c)
    if tiles.attn_split_long or tiles.single_split:  # row 35: one program per split length on one state
        # (Program.launch_program); row 40: and the one-split program
        # "long" (row 57): every program has the arrival counters (one counter set), only the long one arrives
        long_last = tiles.last_combine == "long"
        plain = replace(tiles, attn_split_long=0, single_split=0, last_combine=long_last)

        def split_program(split: int) -> Program:
            prog = build_decode_program(c, replace(plain, attn_split=split))
            return oproj_combine_program(prog) if long_last and split != tiles.attn_split_long else prog

        forms: dict[int | str, Program] = {s: split_program(s) for s in tiles.splits()}
        if tiles.single_split:
            forms[ONE_SPLIT] = one_split_program(split_program(tiles.single_split))
        short = forms[tiles.attn_split]
        if any(p.counters != short.counters for p in forms.values()):
            raise DagError("the split programs' counters differ: a launch of one could not follow a launch of another")
        prog = Program(c, tiles, list(short.instructions), list(short.counters), split_programs=forms)
        prog.check()
        return prog
    prog = Program(c, tiles)
    emit = prog.instructions.append
    n_splits = tiles.n_splits(c)
    n_qkv = (c.n_heads + 2 * c.n_kv_heads) * tiles.qkv_parts

    embed_ctr = prog.counter("embed")
    sample_ctr_index = None  # known after the loop; Embed waits on the previous step's Sample
    prev, prev_count = embed_ctr, 1
    embed_pos = len(prog.instructions)
    emit(None)  # placeholder for Embed, filled once the sample counter exists
    for layer in range(c.n_layers):
        qkv = prog.counter(f"qkv[{layer}]")
        for kind, n in ((HEAD_Q, c.n_heads), (HEAD_K, c.n_kv_heads), (HEAD_V, c.n_kv_heads)):
            for head in range(n):
                for part in range(tiles.qkv_parts):
                    emit(QkvHead(layer, prev, prev_count, 0, qkv, kind, head, part))
        attn = prog.counter(f"attn[{layer}]")
        for kv_head in range(c.n_kv_heads):
            # last_combine: the group's arrival counter (nobody waits on it: the last arrival combines)
            arrive = prog.counter(f"attn_arrive[{layer}][{kv_head}]") if tiles.last_combine else NO_COUNTER
            for split in range(n_splits):
                for hp in range(tiles.head_parts(c)):
                    emit(AttnPartial(layer, qkv, n_qkv, 0, attn, kv_head, split, hp, arrive))
        o = prog.counter(f"o[{layer}]")
        for row0 in range(0, c.hidden, tiles.o_rows):
            emit(OProj(layer, attn, c.n_kv_heads * n_splits * tiles.head_parts(c), 0, o, row0, tiles.o_rows,
                       int(bool(tiles.last_combine))))
        gate = prog.counter(f"gateup[{layer}]")
        for f0 in range(0, c.ffn, tiles.gate_features):
            emit(GateUp(layer, o, c.hidden // tiles.o_rows, 0, gate, f0, tiles.gate_features))
        down = prog.counter(f"down[{layer}]")
        for row0 in range(0, c.hidden, tiles.down_rows):
            emit(Down(layer, gate, c.ffn // tiles.gate_features, 0, down, row0, tiles.down_rows))
        prev, prev_count = down, c.hidden // tiles.down_rows
    logits = prog.counter("logits")
    for row0 in range(0, c.vocab, tiles.logits_rows):
        emit(Logits(c.n_layers, prev, prev_count, 0, logits, row0, tiles.logits_rows))
    sample_ctr_index = prog.counter("sample")
    # Its wait count (one signal per Logits tile) is also how many (value, index) partials the fused
    # Sample reduces: the kernel reads that word, so no build flag carries the count.
    emit(Sample(c.n_layers, logits, c.vocab // tiles.logits_rows, 0, sample_ctr_index))
    # Step s embeds tokens[s], written by step s-1's Sample (step 0's token comes from the host).
    prog.instructions[embed_pos] = Embed(0, sample_ctr_index, 1, -1, embed_ctr)
    prog.check()
    return prog


def oproj_combine_list(instructions: list[Instruction]) -> list[Instruction]:
    """A last-arrival list in its O-proj combine form: no AttnPartial arrives, every O-proj tile combines."""
    return [replace(ins, arrive=NO_COUNTER) if isinstance(ins, AttnPartial) else
            replace(ins, combined=0) if isinstance(ins, OProj) else ins for ins in instructions]


def oproj_combine_program(prog: Program) -> Program:
    """A plain last_combine=True program in the O-proj combine form, with its counters (the arrival counters stay,
    unused): the short and one-split programs of a last_combine="long" composite (one counter set for every launch)."""
    if prog.split_programs or prog.tiles.last_combine is not True:
        raise DagError("oproj_combine_program takes a plain program with last_combine=True")
    out = Program(prog.config, replace(prog.tiles, last_combine=False), oproj_combine_list(prog.instructions),
                  list(prog.counters))
    out.check()
    return out


def one_split_program(prog: Program) -> Program:
    """The one-split form (row 40, TileShape.single_split) of a plain program whose attn_split is the single split:
    the same list with only split 0's AttnPartial tiles, each writing its heads' normalised output to attn_out
    (arrive = ATTN_DIRECT), and O-proj tiles that wait for those tiles alone and load attn_out (combined = 1). Valid
    only for launches whose steps all lie within the split (step_end <= attn_split): the other splits are empty there.
    Same counters (attn[L] gets n_kv_heads x head_parts signals per step: Program.launch_counters sets it)."""
    c, tiles = prog.config, prog.tiles
    if prog.split_programs or tiles.last_combine:
        raise DagError("one_split_program takes a plain program with last_combine=False")
    per_layer = c.n_kv_heads * tiles.head_parts(c)
    out = []
    for ins in prog.instructions:
        if isinstance(ins, AttnPartial):
            if ins.split == 0:
                out.append(replace(ins, arrive=ATTN_DIRECT))
        elif isinstance(ins, OProj):
            out.append(replace(ins, wait_count=per_layer, combined=1))
        else:
            out.append(ins)
    one = Program(c, tiles, out, list(prog.counters), one_split=True)
    one.check()
    return one
