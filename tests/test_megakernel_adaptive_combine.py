"""Row 27 (megakernel/NOTES.md "Ready: row 27"; TileShape(last_combine="auto"), build flag MK_LAST_COMBINE=2): one
binary with both attention combines, the form picked per launch by its largest KV length (the O-proj combine up to
TileShape.combine_threshold positions, the last-arrival combine above). On the CPU: the choice at KV lengths below, at
and above the threshold, the two instruction lists (they differ only in AttnPartial's A3 and OProj's A2), the
parameter block's list per launch, the interpreter's semantics across launches whose form switches (the default's
values; a combine only in last-arrival launches, by the group's last tile, whatever forms ran before), localisation
in both forms, and (with nvcc) the build's registers and spills. GPU: tests/test_megakernel_fusions_gpu.py
(FUSION_K=adaptive)."""
import dataclasses
import re

import pytest
import torch

from benchmarks.decode import variant_rows
from megakernel import instructions as I
from megakernel.dag import DagError, TileShape, build_decode_program
from megakernel.instructions import NO_COUNTER, AttnPartial, OProj
from megakernel.interpreter import Interpreter, SamplingParams, localise, relative_error
from megakernel.runtime import form_words, option_flags
from megakernel.state import BUFFER_NAMES, DecodeState
from test_megakernel_interpreter import TILES, _prompt, replay_step, tiny  # noqa: F401  (the tiny model fixture)
from test_megakernel_lastcombine import CountingInterpreter, _spills
from toolchain import needs_nvcc

T = 24  # tiny model, 16-position splits: launches ending at <= 24 (1-2 used splits) run the O-proj combine
AUTO = dataclasses.replace(TILES, last_combine="auto", combine_threshold=T)
LAST = dataclasses.replace(TILES, last_combine=True)


def _per_group(c, tiles) -> int:
    return tiles.n_splits(c) * tiles.head_parts(c)


def test_auto_is_a_tile_option_and_a_row(tiny):
    c, _ = tiny
    assert option_flags(TileShape(last_combine="auto")) == ("-DMK_LAST_COMBINE=2",)
    assert option_flags(TileShape(last_combine="auto", fused_sample=False)) == ("-DMK_FUSED_SAMPLE=0",
                                                                                "-DMK_LAST_COMBINE=2")
    assert TileShape().combine_threshold == 512 and variant_rows()["mk_adaptive_combine"] == {
        "tiles": TileShape(last_combine="auto", down_rows=8)}  # the default's Down tiles since row 36
    for bad in ({"last_combine": "Auto"}, {"last_combine": 2}, {"combine_threshold": -1},
                {"combine_threshold": 512.0}, {"combine_threshold": True}):
        with pytest.raises(DagError, match="last_combine must be a bool, 'auto' or 'long'|combine_threshold must be"):
            TileShape(**bad).check(c)


def test_the_form_is_chosen_by_the_launch_largest_kv_length(tiny):
    c, _ = tiny
    assert [AUTO.combine_last_at(n) for n in (1, T - 1, T, T + 1, c.max_seq)] == [False, False, False, True, True]
    assert not any(TILES.combine_last_at(n) for n in (1, T, T + 1, c.max_seq))
    assert all(LAST.combine_last_at(n) for n in (1, T, T + 1, c.max_seq))
    prog = build_decode_program(c, AUTO)
    assert prog.launch_form(T + 1) is prog.instructions  # the program's own list: the last-arrival form
    short = prog.launch_form(T)
    assert all(ins.arrive == NO_COUNTER for ins in short if isinstance(ins, AttnPartial))
    assert all(ins.combined == 0 for ins in short if isinstance(ins, OProj))
    assert all(ins.arrive != NO_COUNTER for ins in prog.instructions if isinstance(ins, AttnPartial))
    assert all(ins.combined == 1 for ins in prog.instructions if isinstance(ins, OProj))
    # the other options have only their own form
    with pytest.raises(DagError, match="no last-arrival combine form"):
        build_decode_program(c, TILES).form(True)
    with pytest.raises(DagError, match="no O-proj combine form"):
        build_decode_program(c, LAST).form(False)


def test_the_forms_differ_only_in_the_combine_words(tiny):
    """Same ops, waits, signals and counters (a launch of either form runs on the same state and counters); the
    last-arrival form's words are mk_lastcombine's, the prefetch plan is the same in both."""
    c, _ = tiny
    prog = build_decode_program(c, AUTO)
    forms = form_words(prog, window_bytes=None, own=True)
    assert set(forms) == {False, True}
    assert (forms[True] == build_decode_program(c, LAST).words()).all()
    diff = forms[False] != forms[True]
    rows, cols = diff.nonzero()
    kinds = {(type(prog.instructions[r]).__name__, int(k)) for r, k in zip(rows, cols)}
    assert kinds == {("AttnPartial", I.W_A3), ("OProj", I.W_A2)}
    n_attn = sum(isinstance(ins, AttnPartial) for ins in prog.instructions)
    n_oproj = sum(isinstance(ins, OProj) for ins in prog.instructions)
    assert len(rows) == n_attn + n_oproj  # every AttnPartial and every OProj, nothing else
    assert (forms[False][:, I.W_PF_FLAGS:] == forms[True][:, I.W_PF_FLAGS:]).all()
    plan = form_words(prog, window_bytes=1 << 16)
    assert (plan[False][:, I.W_PF_FLAGS:] == plan[True][:, I.W_PF_FLAGS:]).all()
    assert set(form_words(build_decode_program(c, TILES), None)) == {False}


def test_each_launch_gets_the_words_of_its_form(tiny):
    """The parameter block of a launch points at its form's list (runtime: instructions_for)."""
    from megakernel.runtime import MegakernelDecoder

    c, w = tiny
    prog = build_decode_program(c, AUTO)
    dec = object.__new__(MegakernelDecoder)  # no GPU: only what _param_values reads
    dec.config, dec.tiles, dec.program = c, AUTO, prog
    dec.state = DecodeState.create(prog, w)
    dec.forms = {last: torch.from_numpy(words) for last, words in form_words(prog, None).items()}
    dec.ticket = dec.error = dec.stuck = torch.zeros(4, dtype=torch.int32)
    dec.step_ns = torch.zeros(4, dtype=torch.int64)
    dec.n_forced, dec.timeout_ns, dec.prefetch_ahead, dec.stage_bytes = 1, 1, 0, 0
    dec.sampling = SamplingParams()
    ptr = {last: t.data_ptr() for last, t in dec.forms.items()}
    for begin, end, last in ((0, T - 8, False), (T - 8, T, False), (T, T + 1, True), (0, T + 1, True)):
        assert dec._param_values(begin, end)["instructions"] == ptr[last], (begin, end)
    assert dec.instructions.data_ptr() == ptr[True]


def _run(c, w, tiles, launches, prompt, order="list", interp_cls=Interpreter):
    """Launches (first, count, launch_end or None) of one interpreter; the state after each."""
    state = DecodeState.create(build_decode_program(c, tiles), w)
    state.set_prompt(prompt)
    interp = interp_cls(state, n_forced=len(prompt))
    after = []
    for first, count, end in launches:
        interp.run_steps(first, count, order=order, seed=first, launch_end=end)
        after.append({n: state.t[n].clone() for n in BUFFER_NAMES} | {
            "attn_out": state.t["attn_out"].clone() if "attn_out" in state.t else None})
    return interp, state, after


@pytest.mark.parametrize("order", ["list", "random"])
def test_interpreter_equals_the_default_across_the_switch(tiny, order):
    """Launches ending at 16 and at the threshold (O-proj form), then one to 40 (last arrival): after each, the
    default's logits and tokens; attn_out untouched (NaN) until the first last-arrival launch, which combines once per
    group and step by the group's last tile."""
    c, w = tiny
    prompt = _prompt(c, 40, seed=31)
    launches = [(0, 16, None), (16, T - 16, None), (T, 40 - T, None)]
    _, _, base = _run(c, w, TILES, launches, prompt)
    interp, state, auto = _run(c, w, AUTO, launches, prompt, order=order, interp_cls=CountingInterpreter)
    for k, (a, b) in enumerate(zip(auto, base)):
        assert relative_error(a["logits"], b["logits"]) < 1e-6, k
        assert torch.equal(a["tokens"], b["tokens"]), k
    assert torch.isnan(auto[0]["attn_out"]).all() and torch.isnan(auto[1]["attn_out"]).all()
    assert not torch.isnan(auto[2]["attn_out"]).any()
    steps_last = 40 - T
    assert len(interp.combines) == steps_last * c.n_layers * c.n_kv_heads
    assert {key[0] for key, _ in interp.combines} == set(range(T, 40))
    assert {n for _, n in interp.combines} == {_per_group(c, AUTO)}
    arrive = [i for i, n in enumerate(state.program.counters) if n.startswith("attn_arrive")]
    assert (state.t["counters"][arrive] == steps_last * _per_group(c, AUTO)).all()


def test_the_last_arrival_is_found_whatever_forms_ran_before(tiny):
    """Forms O, L, O, L (launch_end picks them): the arrival counter counts only the last-arrival launches' steps, so
    the last arrival is a whole multiple of the tiles per group (mk_lastcombine's (step + 1) x tiles would never match
    after an O-proj-form launch: its interpreter rule finds no combine here, and its O-proj reads NaN)."""
    c, w = tiny
    prompt = _prompt(c, 40, seed=32)
    launches = [(0, 8, T), (8, 8, T + 1), (16, 4, T), (20, 12, 40)]
    _, _, base = _run(c, w, TILES, launches, prompt)
    interp, _, auto = _run(c, w, AUTO, launches, prompt, interp_cls=CountingInterpreter)
    for k, (a, b) in enumerate(zip(auto, base)):
        assert relative_error(a["logits"], b["logits"]) < 1e-6, k
    assert sorted({key[0] for key, _ in interp.combines}) == list(range(8, 16)) + list(range(20, 32))
    assert len(interp.combines) == 20 * c.n_layers * c.n_kv_heads

    class StepCountRule(CountingInterpreter):  # mk_lastcombine's test on an auto program
        def _last_arrival(self, count, step):
            return count == (step + 1) * _per_group(self.c, self.tiles)

    interp, _, wrong = _run(c, w, AUTO, launches, prompt, interp_cls=StepCountRule)
    assert interp.combines == [] and torch.isnan(wrong[1]["logits"]).all() and torch.isnan(wrong[3]["logits"]).all()


class WrongCombine(Interpreter):
    """Every combine of layer 1 off by 0.5 in one output: the groups' (last arrival) and O-proj's (all heads)."""

    def _combine(self, layer, step, heads=slice(None)):
        out = super()._combine(layer, step, heads)
        if layer == 1:
            out = out.clone()
            out[3] += 0.5
        return out


@pytest.mark.parametrize("last", [False, True])
def test_localise_follows_the_launch_form(tiny, last):
    """A step of a launch of either form localises clean when right; a wrong combine is named where that form
    computes it: the group's last AttnPartial tile (last arrival) or the first O-proj tile (O-proj combine)."""
    c, w = tiny
    step, end = (20, T) if not last else (30, 36)
    before, good = replay_step(c, w, AUTO, 33, step, launch_end=end)
    assert localise(before, good, step=step, n_forced=40, launch_end=end) is None
    before, bad = replay_step(c, w, AUTO, 33, step, WrongCombine, launch_end=end)
    _, ins, err = localise(before, bad, step=step, n_forced=40, launch_end=end)
    assert err > 1e-2 and ins.layer == 1
    assert isinstance(ins, AttnPartial if last else OProj), ins
    if last:
        assert ins.kv_head == 0 and (ins.split, ins.head_part) == (AUTO.n_splits(c) - 1, AUTO.head_parts(c) - 1)


@needs_nvcc
def test_the_build_has_both_combines_and_its_spills_are_the_known_ones(tmp_path):
    """128 registers; the group combine (4 instances) and the O-proj combine in one cubin, neither spilling. The
    worker's spills are above the default's (ptxas, 2026-12-02: threadIdx.x spilled, reloaded after each GEMV call;
    NOTES.md "Ready: row 27"): bounded here at what was seen, so a further rise fails."""
    from megakernel.build import build

    auto = build(0, build_dir=tmp_path / "auto", extra_flags=option_flags(TileShape(last_combine="auto")))
    base = build(0, build_dir=tmp_path / "base")
    spills = {n: _spills(r.ptxas_log) for n, r in (("auto", auto), ("base", base))}
    assert auto.registers() is not None and auto.registers() <= 128, auto.ptxas_log
    combine = {fn: n for fn, n in spills["auto"].items() if "combine_group" in fn}
    assert len(combine) == 4 and all(n == 0 for n in combine.values()), auto.ptxas_log
    assert [n for fn, n in spills["auto"].items() if "load_attention_combined" in fn] == [0]
    assert [n for fn, n in spills["auto"].items() if "attn_arrive" in fn] == [0]
    worker = {n: s["argus_megakernel"] for n, s in spills.items()}
    assert worker["auto"] <= worker["base"] + 20, auto.ptxas_log
    trace = build(2, build_dir=tmp_path / "trace", extra_flags=option_flags(TileShape(last_combine="auto")))
    assert trace.registers() <= 128 and re.search(r"combine_group_t", trace.ptxas_log)
