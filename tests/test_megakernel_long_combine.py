"""Row 57 (megakernel/NOTES.md "Ready: row 57"; TileShape(last_combine="long"), benchmarks/decode.py mk_long_last): the
default's programs, except that the long-split launches (largest KV length above split_threshold) combine by each
group's last attention tile, so their O-proj tiles load attn_out (OProj.combined = 1) and take the early path, as the
one-split launches' do. On the CPU: the option and its refusals, the three programs against the default's (the same
tiles; only the long program arrives), the interpreter across launches of all three programs (the default's values,
one combine per group and step in the long launches only, whatever ran before), the decoder's words per launch key,
and (with nvcc) the build. GPU: tests/test_megakernel_early_gpu.py (test_long_last_combine_*)."""
import dataclasses

import numpy as np
import pytest
import torch

from benchmarks.decode import variant_rows
from decoder_stub import cpu_decoder
from megakernel.dag import DEFAULT_TILES, ONE_SPLIT, DagError, TileShape, build_decode_program
from megakernel.instructions import NO_COUNTER, AttnPartial, OProj
from megakernel.interpreter import relative_error
from megakernel.runtime import form_words, option_flags
from megakernel.state import BUFFER_NAMES
from test_megakernel_adaptive_combine import _run
from test_megakernel_interpreter import TILES, _prompt, tiny  # noqa: F401  (the tiny model fixture)
from test_megakernel_lastcombine import CountingInterpreter, _spills
from tinyllama.config import get_config
from toolchain import needs_nvcc

FULL = get_config("tinyllama-1.1b")
LONG = dataclasses.replace(DEFAULT_TILES, last_combine="long")
# tiny model: launches ending at <= 12 run the one-split program, <= 24 16-position splits, later 32-position splits
TINY_BASE = dataclasses.replace(TILES, attn_split_long=32, split_threshold=24, single_split=12)
TINY_LONG = dataclasses.replace(TINY_BASE, last_combine="long")


def _named(prog) -> list[tuple]:
    """Each instruction with its counters by name (the long option adds arrival counters, so indices shift)."""
    names = prog.counters

    def name(i):
        return names[i] if i >= 0 else i
    out = []
    for ins in prog.instructions:
        fields = dataclasses.asdict(ins)
        for key in ("wait", "signal"):
            fields[key] = name(fields[key])
        if isinstance(ins, AttnPartial):
            fields["arrive"] = name(fields["arrive"])
        out.append((type(ins).__name__, tuple(sorted(fields.items()))))
    return out


def test_long_is_a_tile_option_and_a_row():
    assert variant_rows()["mk_long_last"] == {"tiles": LONG}
    assert option_flags(LONG) == ("-DMK_LAST_COMBINE=2", "-DMK_ONE_SPLIT=1", "-DMK_EARLY_REGS=7")
    assert [LONG.combine_last_at(n) for n in (1, 384, 385, 512, 513, 1024, 2048)] == [False] * 4 + [True] * 3
    assert [LONG.splits_at(FULL, n) for n in (384, 512, 513)] == [2048 // 384 + 1, 16, 8]
    LONG.check(FULL)


@pytest.mark.parametrize("kw,match", [
    ({"last_combine": "long"}, "last_combine='long' combines in the attn_split_long launches: set attn_split_long"),
    ({"last_combine": "auto", "attn_split_long": 256}, "needs last_combine=False or 'long'.* got last_combine='auto'"),
    ({"last_combine": True, "single_split": 256}, "needs last_combine=False or 'long'.* got last_combine=True"),
    ({"last_combine": "Long", "attn_split_long": 256}, "last_combine must be a bool, 'auto' or 'long', got 'Long'"),
])
def test_bad_values_are_refused_in_one_line(kw, match):
    with pytest.raises(DagError, match=match) as e:
        build_decode_program(FULL, TileShape(**kw))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("step_end", [1, 384, 512, 513, 1217])
def test_only_the_long_program_arrives_and_its_o_proj_loads_attn_out(step_end):
    """Full TinyLlama: each launch's program is the default's tile for tile (counters by name); the long program's
    AttnPartial tiles arrive on their group's counter and its O-proj tiles (16 rows: the early path's shape) load
    attn_out; the other two programs arrive nowhere. One counter set: the default's plus the arrival counters."""
    long, base = build_decode_program(FULL, LONG), build_decode_program(FULL, DEFAULT_TILES)
    arrivals = [n for n in long.counters if n.startswith("attn_arrive")]
    assert len(arrivals) == FULL.n_layers * FULL.n_kv_heads
    assert [n for n in long.counters if n not in arrivals] == base.counters
    run, ref = long.launch_program(step_end), base.launch_program(step_end)
    assert run.counters == long.counters and long.launch_form(step_end) is run.instructions
    last = LONG.combine_last_at(step_end)
    assert run.tiles.last_combine is last
    expected = ref.instructions if not last else [
        dataclasses.replace(i, combined=1) if isinstance(i, OProj) else i for i in ref.instructions]
    got = _named(run)
    if last:  # the arrival counter of each tile's group, by name
        assert {dict(f)["arrive"] for kind, f in got if kind == "AttnPartial"} == set(arrivals)
        got = [(kind, tuple((k, NO_COUNTER if k == "arrive" else v) for k, v in f)) if kind == "AttnPartial"
               else (kind, f) for kind, f in got]
        assert {(i.rows, i.combined) for i in run.instructions if isinstance(i, OProj)} == {(16, 1)}
    ref_named = _named(dataclasses.replace(ref, instructions=expected))
    assert got == ref_named
    assert long.launch_counters(64, step_end) == {
        long.counters.index(base.counters[i]): v for i, v in base.launch_counters(64, step_end).items()}


@pytest.mark.parametrize("order", ["list", "random"])
def test_interpreter_equals_the_default_across_the_programs(tiny, order):
    """Launches of the one-split, short, long, short (a new start would be a new sequence: here one past the
    threshold again) programs: the default's logits and tokens after each; a combine once per group and step in the
    long launches only (by the group's last tile, the launch's tiles per group before it); the arrival counters
    count only the long launches' tiles."""
    c, w = tiny
    prompt = _prompt(c, 46, seed=57)
    launches = [(0, 12, None), (12, 12, None), (24, 16, None), (40, 1, None), (41, 5, None)]
    _, _, base = _run(c, w, TINY_BASE, launches, prompt, interp_cls=CountingInterpreter)
    interp, state, long = _run(c, w, TINY_LONG, launches, prompt, order=order, interp_cls=CountingInterpreter)
    for k, (a, b) in enumerate(zip(long, base)):
        assert relative_error(a["logits"], b["logits"]) < 1e-6, k
        assert torch.equal(a["tokens"], b["tokens"]), k
    for k in (0, 1):  # the one-split and short launches: every buffer bit for bit (attn_out: the one-split's)
        assert [n for n in BUFFER_NAMES if n != "counters" and not torch.equal(long[k][n].nan_to_num(7.0),
                                                                               base[k][n].nan_to_num(7.0))] == [], k
    per_group = TINY_LONG.splits_at(c, 40) * TINY_LONG.head_parts(c)
    assert per_group == (c.max_seq // 32) * TINY_LONG.head_parts(c)
    long_steps = list(range(24, 46))
    assert sorted({key[0] for key, _ in interp.combines}) == long_steps
    assert len(interp.combines) == len(long_steps) * c.n_layers * c.n_kv_heads
    assert {n for _, n in interp.combines} == {per_group}
    arrive = [i for i, n in enumerate(state.program.counters) if n.startswith("attn_arrive")]
    assert (state.t["counters"][arrive] == len(long_steps) * per_group).all()


def test_the_decoder_words_each_launch_key_in_its_own_form(tiny):
    """MegakernelDecoder's words per launch key: the long program's in its last-arrival form (A3 names the arrival
    counter, O-proj's A2 set), the short and one-split programs' as theirs; the parameter block points at them."""
    from megakernel import instructions as I

    c, w = tiny
    dec = cpu_decoder(c, w, TINY_LONG)
    prog = dec.program
    assert set(dec.forms) == {16, 32, ONE_SPLIT}
    for key, sub in prog.split_programs.items():
        assert np.array_equal(dec.forms[key].numpy(), form_words(sub, None, True)[key == 32])
        words = dec.forms[key].numpy()
        ops = words[:, I.W_OPCODE]
        a3 = words[ops == AttnPartial.OPCODE, I.W_A3]
        a2 = words[ops == OProj.OPCODE, I.W_A2]
        if key == 32:
            assert (a3 >= 0).all() and (a2 == 1).all()
        else:
            assert (a3 < 0).all() and set(a2) == {int(key == ONE_SPLIT)}
    for end, key in ((12, ONE_SPLIT), (24, 16), (25, 32)):
        assert dec._param_values(0, end)["instructions"] == dec.forms[key].data_ptr(), end


@needs_nvcc
def test_the_build_keeps_the_default_worker_spills(tmp_path):
    """128 registers; the worker's spill stores no more than the default build's (ptxas, nvcc 13.0, 2026-12-04: 8 B
    each; the stack frame grows from 56 to 80 B with attn_arrive's call), the group combine not spilling, and the
    one-query-head attention tile's spills the default's. On the kernel row 57 was measured with (before row 58: with
    row 58's combine the row's worker spills 12 B)."""
    from megakernel.build import build

    before58 = ("-DMK_COMBINE_AHEAD=0",)
    long = build(0, build_dir=tmp_path / "long", extra_flags=option_flags(LONG) + before58)
    base = build(0, build_dir=tmp_path / "base", extra_flags=option_flags(DEFAULT_TILES) + before58)
    assert long.registers() == base.registers() == 128
    got, ref = _spills(long.ptxas_log), _spills(base.ptxas_log)
    assert got["argus_megakernel"] <= ref["argus_megakernel"]
    assert [f for f in got if "combine_group" in f] and all(got[f] == 0 for f in got if "combine_group" in f)
    v2 = [f for f in ref if "attention_partial_v2_tILi1" in f]
    assert v2 and all(got[f] == ref[f] for f in v2)
