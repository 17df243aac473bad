"""Row 40 (megakernel/NOTES.md "Ready: row 40"; TileShape(single_split=N), build flag MK_ONE_SPLIT=1, rows mk_one_split
and mk_one_split_o8): a launch whose largest KV length (step_end) is <= single_split runs the one-split program, whose
AttnPartial tiles (split 0 only) write their heads' normalised output to attn_out and whose O-proj tiles load it: no
combine. Longer launches keep the default's programs. On the CPU: the launch form choice (kv 128-192 yes, kv 1025+ no,
the boundary), the program (the attention tiles' A3 word, O-proj's A2 and wait count), the parameter block per launch,
the interpreter on the tiny model in both forms against the default and against the plain single-split program, the
localisation of a wrong instruction in the one-split form, and (with nvcc) the default cubin unchanged with the flag
unset and the flag build's registers and spills. GPU: tests/test_megakernel_fusions_gpu.py (FUSION_K=one_split)."""
import dataclasses
import hashlib
import re

import numpy as np
import pytest
import torch

from benchmarks.decode import O_PIECES, variant_rows
from decoder_stub import cpu_decoder
from megakernel import instructions as I
from megakernel.dag import (
    COMBINE_TILES,
    DEFAULT_TILES,
    ONE_SPLIT,
    DagError,
    TileShape,
    build_decode_program,
    default_tiles,
)
from megakernel.instructions import ATTN_DIRECT, NO_COUNTER, AttnPartial, OProj
from megakernel.interpreter import Interpreter, InterpreterError, localise, relative_error
from megakernel.runtime import CSRC, check_fits, form_words, option_flags
from megakernel.state import BUFFER_NAMES, DecodeState
from test_megakernel_interpreter import TILES, _prompt, replay_step, tiny  # noqa: F401  (the tiny model fixture)
from test_megakernel_split_auto import _run, _same_bits
from tinyllama.config import get_config
from toolchain import needs_nvcc

FULL = get_config("tinyllama-1.1b")
ONE = dataclasses.replace(COMBINE_TILES, single_split=256)  # the row's tiles
# tiny model: launches ending at <= 20 run one 20-position split, <= 24 16-position splits, later ones 32
ONE_TINY = dataclasses.replace(TILES, attn_split_long=32, split_threshold=24, single_split=20)


def test_the_row_and_its_flag():
    assert variant_rows()["mk_one_split"] == {"tiles": ONE}
    assert variant_rows()["mk_one_split_o8"] == {"tiles": dataclasses.replace(ONE, o_rows=8),
                                                 "build_flags": ("-DMK_DOWN_PIECES=1",) + O_PIECES}
    assert option_flags(ONE) == ("-DMK_ONE_SPLIT=1",) and option_flags(COMBINE_TILES) == ()
    assert TileShape().single_split == COMBINE_TILES.single_split == 0  # off unless set
    with pytest.raises(ValueError, match="set by TileShape"):
        option_flags(ONE, ("-DMK_ONE_SPLIT=1",))
    check_fits(FULL, ONE)
    header = (CSRC / "megakernel" / "opcodes.cuh").read_text()
    assert int(re.search(r"#define ATTN_DIRECT \((-?\d+)\)", header).group(1)) == ATTN_DIRECT != NO_COUNTER


def test_the_default_is_rows_40_and_42():
    """Since H200 2026-12-02 19:07 (NOTES.md "Row 42 measured"): the decoder's default is mk_combine's tiles with
    384-position one-split launches and one query head per attention tile, built with -DMK_ONE_SPLIT=1; on a model
    whose query group is not 8 (the tiny model: 2) still one head per tile."""
    assert DEFAULT_TILES == dataclasses.replace(COMBINE_TILES, single_split=384, attn_head_parts=8, early_regs=7)
    assert default_tiles(FULL) == DEFAULT_TILES and option_flags(DEFAULT_TILES) == ("-DMK_ONE_SPLIT=1", "-DMK_EARLY_REGS=7")
    tiny = get_config("tiny")
    assert default_tiles(tiny).head_parts(tiny) == tiny.group == 2
    check_fits(FULL, DEFAULT_TILES)
    build_decode_program(tiny, default_tiles(tiny)).check()
    assert variant_rows()["mk_combine"] == {"tiles": COMBINE_TILES}
    assert "mk_one_split384_hp8" not in variant_rows()  # the default itself now


@pytest.mark.parametrize("kv_len,key,split", [
    (1, ONE_SPLIT, 256), (129, ONE_SPLIT, 256), (192, ONE_SPLIT, 256), (193, ONE_SPLIT, 256), (256, ONE_SPLIT, 256),
    (257, 128, 128), (321, 128, 128), (512, 128, 128), (513, 256, 256), (1025, 256, 256), (1217, 256, 256)])
def test_which_launches_are_one_split(kv_len, key, split):
    """By the launch's largest KV length (step_end): one split up to 256 (the benchmark's kv 128 launches ending at
    193; the one ending at 257 not), then row 35's choice (128 up to 512, 256 above: kv 1025+ never one-split)."""
    assert ONE.one_split_at(kv_len) == (key == ONE_SPLIT)
    assert ONE.launch_key(kv_len) == key and ONE.split_at(kv_len) == split
    assert COMBINE_TILES.launch_key(kv_len) == COMBINE_TILES.split_at(kv_len) == (128 if kv_len <= 512 else 256)


@pytest.mark.parametrize("kw,match", [
    ({"single_split": 255}, "single_split must be 0 .off. or a positive even int"),
    ({"single_split": -256}, "single_split must be"),
    ({"single_split": True}, "single_split must be"),
    ({"single_split": "256"}, "single_split must be"),
    ({"single_split": 256, "last_combine": True}, "single_split=256 needs last_combine=False"),
    ({"single_split": 256, "last_combine": "auto"}, "single_split=256 needs last_combine=False"),
])
def test_bad_values_are_refused_in_one_line(kw, match):
    with pytest.raises(DagError, match=match) as e:
        build_decode_program(FULL, TileShape(**kw))
    assert "\n" not in str(e.value)


def test_the_one_split_program():
    """Full TinyLlama: the one-split list is mk_split256's with only split 0's AttnPartial tiles (4 KV heads x 4 head
    parts per layer), each A3 = ATTN_DIRECT, and O-proj tiles with A2 = 1 waiting for those 16; every other word is
    mk_split256's; the same counters, of which only attn[L] counts differently (16 per step)."""
    prog = build_decode_program(FULL, ONE)
    assert set(prog.split_programs) == {128, 256, ONE_SPLIT}
    assert prog.words().tobytes() == build_decode_program(FULL, COMBINE_TILES).words().tobytes()  # its own list
    for end in (513, 1025):
        assert prog.launch_program(end).words().tobytes() == build_decode_program(
            FULL, COMBINE_TILES).launch_program(end).words().tobytes()
    one = prog.launch_program(193)
    assert one is prog.split_programs[ONE_SPLIT] and one.one_split and prog.launch_form(193) is one.instructions
    attn = [ins for ins in one.instructions if isinstance(ins, AttnPartial)]
    assert len(attn) == 22 * 16 and {(ins.split, ins.arrive) for ins in attn} == {(0, ATTN_DIRECT)}
    oproj = [ins for ins in one.instructions if isinstance(ins, OProj)]
    assert {(ins.wait_count, ins.combined) for ins in oproj} == {(16, 1)} and len(oproj) == 22 * 128
    words = one.words()
    assert (words[[isinstance(i, AttnPartial) for i in one.instructions], I.W_A3] == ATTN_DIRECT).all()
    assert (words[[isinstance(i, OProj) for i in one.instructions], I.W_A2] == 1).all()
    ref = build_decode_program(FULL, TileShape(attn_split=256, down_rows=8))  # mk_split256
    keep = [ins for ins in ref.instructions if not (isinstance(ins, AttnPartial) and ins.split)]
    assert len(keep) == len(one.instructions) == len(ref.instructions) - 22 * 4 * 7 * 4
    for a, b in zip(keep, one.instructions):
        if isinstance(a, AttnPartial):
            assert dataclasses.replace(a, arrive=ATTN_DIRECT) == b
        elif isinstance(a, OProj):
            assert dataclasses.replace(a, wait_count=16, combined=1) == b
        else:
            assert a == b
    assert one.counters == prog.counters == ref.counters
    rebase = prog.launch_counters(129, 193)
    assert sorted(prog.counters[i] for i in rebase) == sorted(f"attn[{L}]" for L in range(22))
    assert set(rebase.values()) == {129 * 16}
    assert set(prog.launch_counters(193, 257).values()) == {193 * 256}  # back to 128-splits: 4 x 16 x 4 tiles


def test_a_one_split_program_is_checked():
    prog = build_decode_program(FULL, ONE).split_programs[ONE_SPLIT]
    bad = dataclasses.replace(prog, instructions=[dataclasses.replace(i, combined=0) if isinstance(i, OProj) else i
                                                  for i in prog.instructions])
    with pytest.raises(DagError, match="OProj.combined"):
        bad.check()
    plain = dataclasses.replace(prog, one_split=False)
    with pytest.raises(DagError, match="one_split=False but 352 of 352"):
        plain.check()


def test_each_launch_gets_the_words_and_parameters_of_its_program(tiny):
    c, w = tiny
    dec = cpu_decoder(c, w, ONE_TINY)
    prog = dec.program
    assert set(dec.forms) == {16, 32, ONE_SPLIT} and "attn_out" in dec.state.t
    for key, words in dec.forms.items():
        assert np.array_equal(words.numpy(), form_words(prog.split_programs[key], None, True)[False])
    n = {k: len(p.instructions) for k, p in prog.split_programs.items()}
    for begin, end, key, split in ((0, 12, ONE_SPLIT, 20), (12, 20, ONE_SPLIT, 20), (20, 21, 16, 16),
                                   (21, 24, 16, 16), (24, 25, 32, 32), (0, 40, 32, 32)):
        v = dec._param_values(begin, end)
        assert v["instructions"] == dec.forms[key].data_ptr(), (begin, end)
        assert (v["n_instr"], v["ticket_end"], v["attn_split"], v["n_splits"]) == (n[key], end * n[key], split, 16)


@pytest.mark.parametrize("order", ["list", "random"])
def test_interpreter_both_forms_against_the_default(tiny, order):
    """Launches ending at 12 and 20 (one-split: attn_out written, attn_part untouched), 24 (16-position splits) and 40
    (32): after each, logits within fp32 reordering of the default program's and the same sampled tokens; attn[L]
    counts each launch's own tiles (20 x 8 after the one-split launches: 2 KV heads x 4 head parts)."""
    c, w = tiny
    prompt = _prompt(c, 30, seed=51)  # steps 29.. sample
    launches = [(0, 12), (12, 8), (20, 4), (24, 16)]
    _, base = _run(c, w, TILES, launches, prompt)
    state, got = _run(c, w, ONE_TINY, launches, prompt, order=order)
    for k in range(4):
        assert relative_error(got[k]["logits"], base[k]["logits"]) < 1e-5, k
        assert torch.equal(got[k]["tokens"], base[k]["tokens"]), k
    attn = [i for i, n in enumerate(state.program.counters) if n.startswith("attn[")]
    per_layer = c.n_kv_heads * ONE_TINY.head_parts(c)
    assert (got[1]["counters"][attn] == 20 * per_layer).all()
    assert torch.isnan(got[1]["attn_part"]).all() and not torch.isnan(got[1]["attn_out"]).any()
    assert (got[3]["counters"][attn] == 40 * per_layer * -(-c.max_seq // 32)).all()


def test_one_split_launches_equal_the_plain_single_split_program(tiny):
    """The interpreter's one-split form is the combine of one split: every buffer but the partials, attn_out and the
    attn counters has the bits of the plain program of 20-position splits (O-proj combining its one used split)."""
    c, w = tiny
    prompt = _prompt(c, 25, seed=52)
    _, ref = _run(c, w, dataclasses.replace(TILES, attn_split=20), [(0, 20)], prompt)
    _, got = _run(c, w, ONE_TINY, [(0, 20)], prompt, order="random")
    skip = {"attn_part", "counters"}
    assert [n for n in BUFFER_NAMES if n not in skip and not _same_bits(got[0][n], ref[0][n])] == []


def test_after_long_launches_layer_0_is_the_defaults_bits(tiny):
    """What the full-model GPU test at kv ~1024 asserts, here in the interpreter: after one-split launches (to 12, 20)
    and the other programs' launches (24, 40), layer 0's buffers are the bits of the same shape without single_split
    (its K/V come from the embeddings alone and its last step runs the same words), though the one-split launches' own
    outputs were not (on the tiny model the later layers' bf16 K/V may still round to the same bits)."""
    c, w = tiny
    prompt = _prompt(c, 41, seed=55)  # every token forced
    launches = [(0, 12), (12, 8), (20, 4), (24, 16)]
    _, ref = _run(c, w, dataclasses.replace(ONE_TINY, single_split=0), launches, prompt)
    _, got = _run(c, w, ONE_TINY, launches, prompt)
    a, b = got[-1], ref[-1]
    for name in ("q", "k_cache", "v_cache", "attn_part", "x_mid", "h"):
        assert _same_bits(a[name][0], b[name][0]), name
    assert _same_bits(a["x"][:2], b["x"][:2]) and torch.equal(a["tokens"], b["tokens"])
    # the one-split launches' own outputs were not the default's bits (step 19: one split of 20 vs two of 16)
    assert not _same_bits(got[1]["x_mid"], ref[1]["x_mid"])
    assert relative_error(a["logits"], b["logits"]) < 1e-5


def test_a_one_split_tile_outside_its_form_is_refused(tiny):
    c, w = tiny
    state = DecodeState.create(build_decode_program(c, ONE_TINY), w)
    state.set_prompt(_prompt(c, 30, seed=53))
    one = state.program.split_programs[ONE_SPLIT]
    interp = Interpreter(state, n_forced=30)
    interp.run_steps(0, 20)
    interp.split = 20
    tile = next(ins for ins in one.instructions if isinstance(ins, AttnPartial))
    with pytest.raises(InterpreterError, match="no one-split tile"):
        interp.execute(tile, 25)  # position 25 lies past the single split


class WrongAttention(Interpreter):
    """Layer 1's one-split tiles write one output off by 0.5."""

    def _attn_direct(self, ins, step, lo, hi):
        super()._attn_direct(ins, step, lo, hi)
        if ins.layer == 1 and (ins.kv_head, ins.head_part) == (1, 0):
            self.s.t["attn_out"][1, ins.kv_head * self.c.group * self.c.head_dim + 3] += 0.5


class WrongOProj(Interpreter):
    def _oproj(self, ins, step):
        super()._oproj(ins, step)
        if ins.layer == 1 and ins.row0 == 16:
            self.s.t["x_mid"][1, 17] += 0.5


@pytest.mark.parametrize("runner,kind", [(WrongAttention, AttnPartial), (WrongOProj, OProj)])
def test_localise_in_the_one_split_form(tiny, runner, kind):
    """A step of a one-split launch localises clean; a wrong direct output is named at its AttnPartial tile (its heads'
    rows of attn_out), a wrong O-proj at that O-proj tile, both of the one-split list."""
    c, w = tiny
    step, end = 15, 20
    before, good = replay_step(c, w, ONE_TINY, 54, step, launch_end=end)
    assert localise(before, good, step=step, n_forced=40, launch_end=end) is None
    before, bad = replay_step(c, w, ONE_TINY, 54, step, runner, launch_end=end)
    idx, ins, err = localise(before, bad, step=step, n_forced=40, launch_end=end)
    assert isinstance(ins, kind) and ins.layer == 1 and err > 1e-2, ins
    assert before.program.launch_form(end)[idx] is ins
    if kind is AttnPartial:
        assert (ins.kv_head, ins.head_part, ins.split, ins.arrive) == (1, 0, 0, ATTN_DIRECT)
    else:
        assert (ins.row0, ins.combined) == (16, 1)


# the kernel before rows 55 and 58 (5939ed3's default: benchmarks/decode.py mk_tail_late with the loop combine)
TAIL_LATE = ("-DMK_TAIL_LOADS=0", "-DMK_COMBINE_AHEAD=0")


def _spills(log: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores", log)}


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_default_cubin_unchanged_and_the_flag_builds_spills(tmp_path, mode):
    """The flag unset (or 0) is the default cubin byte for byte. The flag build: 128 registers; no function TinyLlama
    runs spills more stores than in the default (the worker, the 1- and 2-head attention tiles; ptxas 2026-12-02:
    worker 24 -> 20 B mode 0, 32 -> 28 mode 2, the tiles 0); only the unused 8-head three-pass instance spills more,
    bounded at what was seen (20 -> 32 B mode 0, 20 -> 24 mode 2; NOTES.md "Ready: row 40")."""
    from megakernel.build import build

    base = build(mode, build_dir=tmp_path / "base")
    zero = build(mode, build_dir=tmp_path / "zero", extra_flags=("-DMK_ONE_SPLIT=0",))
    digest = {n: hashlib.sha256(r.cubin.read_bytes()).hexdigest() for n, r in (("base", base), ("zero", zero))}
    assert digest["base"] == digest["zero"]
    # Row 55 (MK_TAIL_LOADS, session 21) cut the worker's spills in both builds (mode 0: base 4 B, the flag build 8 B);
    # the flag build's spills are compared as they were measured, on the kernel before row 55 (and row 58, whose
    # combine ptxas allocates with the worker), and rows 55 + 58 must not add any to the flag build.
    now = build(mode, build_dir=tmp_path / "now", extra_flags=option_flags(ONE))
    base_late = build(mode, build_dir=tmp_path / "base_late", extra_flags=TAIL_LATE)
    one = build(mode, build_dir=tmp_path / "one", extra_flags=option_flags(ONE) + TAIL_LATE)
    # (but the unused 8-head three-pass instance, whose spills follow the allocation: 44 B mode 0, 32 mode 2 with row
    # 58, nvcc 13.0, 2026-12-04)
    s_now, s_then = _spills(now.ptxas_log), _spills(one.ptxas_log)
    assert all(n <= s_then[fn] for fn, n in s_now.items() if "attention_partial_tILi8E" not in fn), now.ptxas_log
    assert all(n <= 48 for fn, n in s_now.items() if "attention_partial_tILi8E" in fn), now.ptxas_log
    assert one.registers() == 128, one.ptxas_log
    s_base, s_one = _spills(base_late.ptxas_log), _spills(one.ptxas_log)
    assert set(s_base) == set(s_one)
    worse = {fn: (s_base[fn], s_one[fn]) for fn in s_one if s_one[fn] > s_base[fn]}
    assert all("attention_partial_tILi8E" in fn for fn in worse), worse
    assert all(n <= {0: 32, 2: 24}[mode] for _, n in worse.values()), worse
    for fn, n in s_one.items():
        if "attention_partial_v2_t" in fn:
            assert n == 0, (fn, n)
    o8 = build(mode, build_dir=tmp_path / "o8",
               extra_flags=("-DMK_DOWN_PIECES=1",) + O_PIECES + option_flags(ONE) + TAIL_LATE)  # as `one`
    assert o8.registers() == 128 and sum(_spills(o8.ptxas_log).values()) <= sum(s_one.values()), o8.ptxas_log
