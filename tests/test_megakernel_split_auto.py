"""Row 35 (megakernel/NOTES.md "Ready: row 35"; TileShape(attn_split_long=256), the decoder's default (COMBINE_TILES)
since its H200 run; control mk_split128): each
launch runs the attention split length of its largest KV length, attn_split (128) up to TileShape.split_threshold (512)
and attn_split_long (256) above, on one state laid out for the more splits, with the default binary (the kernel reads
the split length and the counts from the parameter block and the words). On the CPU: the choice on both sides of the
threshold, the two programs (the default's and mk_split256's lists, their tile and dependency counts), the attention
counters set at each launch (they carry across launches), each launch's parameter block, the interpreter against the
default program across launches that cross the threshold (list and random order), localisation in the long form, and
bad values refused. GPU: tests/test_megakernel_fusions_gpu.py (FUSION_K=split_auto)."""
import dataclasses

import numpy as np
import pytest
import torch

from benchmarks.decode import variant_rows
from decoder_stub import cpu_decoder
from megakernel.dag import COMBINE_TILES, DagError, Program, TileShape, build_decode_program
from megakernel.instructions import AttnPartial, OProj
from megakernel.interpreter import Interpreter, SamplingParams, localise, relative_error
from megakernel.runtime import DoesNotFitError, MegakernelDecoder, check_fits, form_words, option_flags
from megakernel.state import BUFFER_NAMES, DecodeState
from test_megakernel_interpreter import TILES, _prompt, replay_step, tiny  # noqa: F401  (the tiny model fixture)
from tinyllama.config import get_config

T = 24  # tiny model: launches ending at <= 24 run 16-position splits, later ones 32-position splits
AUTO = dataclasses.replace(TILES, attn_split_long=32, split_threshold=T)
FULL = get_config("tinyllama-1.1b")


def _attn_per_layer(prog: Program) -> int:
    return sum(isinstance(ins, AttnPartial) and ins.layer == 0 for ins in prog.instructions)


def test_split_auto_is_a_tile_option_and_a_row():
    auto = TileShape(attn_split_long=256)
    # the decoder's default from row 35's H200 run (and row 36's 8-row Down tiles) to rows 40 + 42's
    assert COMBINE_TILES == dataclasses.replace(auto, down_rows=8)
    # the control: the default with one split length
    assert variant_rows()["mk_split128"] == {"tiles": dataclasses.replace(COMBINE_TILES, attn_split_long=0)}
    assert "mk_split_auto" not in variant_rows()
    assert option_flags(auto) == option_flags(TileShape()) == ()  # the default's flags: the same (cached) cubin
    assert (TileShape().attn_split_long, TileShape().split_threshold) == (0, 512)
    assert [auto.split_at(n) for n in (1, 130, 512, 513, 1024, 2048)] == [128, 128, 128, 256, 256, 256]
    assert [TileShape().split_at(n) for n in (1, 513, 2048)] == [128] * 3
    assert TileShape(attn_split=256).split_at(1) == 256 and auto.splits() == (128, 256)
    assert auto.n_splits(FULL) == TileShape().n_splits(FULL) == 16  # the state's slots: the short split's
    check_fits(FULL, auto)


@pytest.mark.parametrize("kw,match", [
    ({"attn_split_long": 128}, "attn_split_long must be 0 .off. or an even int > attn_split .128., got 128"),
    ({"attn_split_long": 64}, "attn_split_long must be .* got 64"),
    ({"attn_split_long": 257}, "attn_split_long must be .* got 257"),
    ({"attn_split_long": -256}, "attn_split_long must be .* got -256"),
    ({"attn_split_long": True}, "attn_split_long must be .* got True"),
    ({"attn_split_long": "256"}, "attn_split_long must be .* got '256'"),
    ({"attn_split_long": 256, "last_combine": True}, "attn_split_long=256 needs last_combine=False.* got last_combine=True"),
    ({"attn_split_long": 256, "last_combine": "auto"}, "needs last_combine=False.* got last_combine='auto'"),
    ({"attn_split_long": 256, "split_threshold": -1}, "split_threshold must be an int >= 0 .KV positions., got -1"),
    ({"attn_split_long": 256, "split_threshold": "512"}, "split_threshold must be .* got '512'"),
])
def test_bad_values_are_refused_in_one_line(kw, match):
    with pytest.raises(DagError, match=match) as e:
        build_decode_program(FULL, TileShape(**kw))
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


def test_a_long_split_that_does_not_fit_the_kernel_is_refused():
    with pytest.raises(DoesNotFitError, match="attention smem floats"):
        check_fits(FULL, TileShape(attn_split_long=8192))


@pytest.mark.parametrize("step_end,split", [(1, 128), (512, 128), (513, 256), (1217, 256)])
def test_each_launch_runs_the_program_of_its_split(step_end, split):
    """Full TinyLlama: the launch's program is the default's (128) or mk_split256's (256) list word for word; its
    AttnPartial tiles per layer (4 KV heads x splits x 4 head parts) are O-proj's wait count; the counters are the
    same names, and only attn[L] counts differently per step."""
    prog = build_decode_program(FULL, TileShape(attn_split_long=256))
    assert prog.words().tobytes() == build_decode_program(FULL, TileShape()).words().tobytes()  # its own list: 128's
    run = prog.launch_program(step_end)
    assert run.tiles.attn_split == split and run.tiles.attn_split_long == 0
    assert run.words().tobytes() == build_decode_program(FULL, TileShape(attn_split=split)).words().tobytes()
    assert prog.launch_form(step_end) is run.instructions
    tiles = FULL.n_kv_heads * (2048 // split) * 4
    assert _attn_per_layer(run) == tiles and len(run.instructions) == len(prog.instructions) - 22 * (256 - tiles)
    assert {ins.wait_count for ins in run.instructions if isinstance(ins, OProj)} == {tiles}
    assert run.counters == prog.counters
    short, long = (p.signals_per_step() for p in prog.split_programs.values())
    differ = [prog.counters[i] for i in range(len(short)) if short[i] != long[i]]
    assert differ == [f"attn[{layer}]" for layer in range(22)]
    rebase = prog.launch_counters(100, step_end)
    assert sorted(prog.counters[i] for i in rebase) == sorted(differ) and set(rebase.values()) == {100 * tiles}


def test_a_plain_program_has_one_launch_program_and_no_rebase():
    prog = build_decode_program(FULL, TileShape())
    assert prog.split_programs == {} and prog.launch_program(2048) is prog and prog.launch_counters(64, 2048) == {}


def test_each_launch_gets_the_words_and_parameters_of_its_split(tiny):
    """The parameter block of a launch (runtime: _param_values) points at its split's words, with that list's length
    as n_instr and ticket stride, its split length, and the state's slot count as the partials' stride."""
    c, w = tiny
    dec = cpu_decoder(c, w, AUTO)
    prog = dec.program
    assert set(dec.forms) == {16, 32} and dec.instructions is dec.forms[16]
    for split, words in dec.forms.items():  # each with the prefetch plan of its own list
        assert np.array_equal(words.numpy(), form_words(prog.split_programs[split], None, True)[False])
    n = {s: len(p.instructions) for s, p in prog.split_programs.items()}
    assert n[16] - n[32] == c.n_layers * c.n_kv_heads * 8
    for begin, end, split in ((0, T - 8, 16), (T - 8, T, 16), (T, T + 1, 32), (0, T + 1, 32)):
        v = dec._param_values(begin, end)
        assert v["instructions"] == dec.forms[split].data_ptr(), (begin, end)
        assert (v["n_instr"], v["ticket_end"], v["attn_split"]) == (n[split], end * n[split], split), (begin, end)
        assert v["n_splits"] == AUTO.n_splits(c) == 16  # the layout's stride in both: attn_part [L, H, 16, Dh + 2]
    assert tuple(dec.state.t["attn_part"].shape) == (c.n_layers, c.n_heads, 16, c.head_dim + 2)


def _run(c, w, tiles, launches, prompt, order="list"):
    """Launches (first, count) of one interpreter from the prompt; the buffers after each."""
    state = DecodeState.create(build_decode_program(c, tiles), w)
    state.set_prompt(prompt)
    interp = Interpreter(state, n_forced=len(prompt))
    after = []
    for first, count in launches:
        interp.run_steps(first, count, order=order, seed=first)
        after.append({n: state.t[n].clone() for n in BUFFER_NAMES} | (
            {"attn_out": state.t["attn_out"].clone()} if "attn_out" in state.t else {}))  # one-split states (row 40)
    return state, after


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit patterns (NaN-poisoned slots nobody wrote compare equal)."""
    view = {4: torch.int32, 2: torch.int16}.get(a.element_size())
    return torch.equal(a.view(view), b.view(view)) if view and a.is_floating_point() else torch.equal(a, b)


def _attn_counters(state) -> list[int]:
    return [i for i, n in enumerate(state.program.counters) if n.startswith("attn[")]


@pytest.mark.parametrize("order", ["list", "random"])
def test_interpreter_equals_the_default_across_the_threshold(tiny, order):
    """Launches ending at 16 and 24 (= threshold: 16-position splits, every buffer the default's bit for bit), then
    one of 16 steps to 40 (32-position splits: logits within fp32 rounding of the default's, the same sampled tokens),
    then one step: the attention counters count each launch's own tiles (40 x 16, then 41 x 16 per layer)."""
    c, w = tiny
    prompt = _prompt(c, 30, seed=41)  # steps 29.. sample their next token
    launches = [(0, 16), (16, T - 16), (T, 40 - T), (40, 1)]
    _, base = _run(c, w, TILES, launches, prompt)
    state, auto = _run(c, w, AUTO, launches, prompt, order=order)
    for k in (0, 1):
        assert [n for n in BUFFER_NAMES if not _same_bits(auto[k][n], base[k][n])] == [], k
    for k in (2, 3):
        assert relative_error(auto[k]["logits"], base[k]["logits"]) < 1e-5, k
        assert torch.equal(auto[k]["tokens"], base[k]["tokens"]), k
    attn = _attn_counters(state)
    per_layer = {s: c.n_kv_heads * AUTO.head_parts(c) * -(-c.max_seq // s) for s in (16, 32)}
    assert per_layer == {16: 32, 32: 16}
    assert (auto[1]["counters"][attn] == T * 32).all() and (auto[2]["counters"][attn] == 40 * 16).all()
    assert (auto[3]["counters"][attn] == 41 * 16).all()
    others = [i for i in range(len(state.program.counters)) if i not in attn]
    assert torch.equal(auto[3]["counters"][others], base[3]["counters"][others])
    # the long launch wrote 32-position partials: slot 1 of each head holds positions 32..39 at step 39
    assert torch.isfinite(auto[2]["attn_part"][:, :, :2]).all()


def test_without_the_counter_rebase_o_proj_runs_before_its_attention(tiny, monkeypatch):
    """What Program.launch_counters guards: after 24 steps of 32 tiles per layer, attn[L] holds 24 x 32 >= the long
    launch's (step + 1) x 16 for steps up to 47, so its O-proj tiles are ready before any of their AttnPartial tiles
    (the random order then runs some first and reads the previous step's partials)."""
    c, w = tiny
    prompt = _prompt(c, 40, seed=42)
    launches = [(0, T), (T, 8)]
    _, base = _run(c, w, TILES, launches, prompt)
    monkeypatch.setattr(Program, "launch_counters", lambda self, begin, end: {})
    state, stale = _run(c, w, AUTO, launches, prompt, order="random")
    assert (stale[0]["counters"][_attn_counters(state)] == T * 32).all()
    assert relative_error(stale[1]["logits"], base[1]["logits"]) > 1e-3


def test_a_new_sequence_after_long_launches_runs_short_again(tiny):
    """set_prompt zeroes the counters; launches from 0 that end below the threshold run the short program again."""
    c, w = tiny
    prompt = _prompt(c, 20, seed=43)
    state = DecodeState.create(build_decode_program(c, AUTO), w)
    state.set_prompt(_prompt(c, 36, seed=44))
    Interpreter(state, n_forced=36).run_steps(0, 36)
    state.set_prompt(prompt)
    state.t["counters"].zero_()
    Interpreter(state, n_forced=len(prompt)).run_steps(0, 20)
    _, base = _run(c, w, TILES, [(0, 20)], prompt)
    assert relative_error(state.t["logits"], base[0]["logits"]) == 0.0
    assert torch.equal(state.t["tokens"][:21], base[0]["tokens"][:21])


@pytest.mark.parametrize("step,end,split", [(20, T, 16), (35, 36, 32)])
def test_localise_follows_the_launch_split(tiny, step, end, split):
    """A step of a launch of either split length localises clean; a wrong partial of split 1 (positions 16..31 or
    32..63) is named at that AttnPartial tile of the launch's own list."""
    c, w = tiny
    before, after = replay_step(c, w, AUTO, 45, step, launch_end=end)
    assert localise(before, after, step=step, n_forced=40, launch_end=end) is None
    after.t["attn_part"][1, 2, 1, 5] += 1.0  # layer 1, query head 2 (KV head 1), split 1
    idx, ins, err = localise(before, after, step=step, n_forced=40, launch_end=end)
    assert isinstance(ins, AttnPartial) and (ins.layer, ins.kv_head, ins.split) == (1, 1, 1) and err > 1e-2
    assert before.program.launch_form(end)[idx] is ins and before.program.launch_program(end).tiles.attn_split == split


def test_the_runtime_launch_sets_the_attention_counters(tiny):
    """MegakernelDecoder.launch on CPU tensors with a stub module: a launch of the long split after short launches
    sets attn[L] to step_begin x 16 (from step_begin x 32) before the kernel starts, leaves every other counter, and
    its parameter block carries the long list's length; a second launch of the same split writes no counter (the
    timed launches of the benchmark do exactly the default's host work); check_error names instructions of the
    launched list."""
    from megakernel.instructions import Sample
    from megakernel.params import ERROR_BAD_TOKEN, PARAM_BYTES, PARAM_FIELDS
    from megakernel.runtime import LaunchInfo, MegakernelError

    c, w = tiny
    prog = build_decode_program(c, AUTO)
    dec = object.__new__(MegakernelDecoder)
    dec.config, dec.tiles, dec.program, dec.launched, dec.device = c, AUTO, prog, prog, torch.device("cpu")
    dec.prefetch_window, dec.prefetch_own, dec.prefetch_gate = None, True, ()
    dec.state = DecodeState.create(prog, w)
    dec.forms = dec._instruction_words(prog)
    dec.params = torch.zeros(PARAM_BYTES, dtype=torch.uint8)
    dec.ticket, dec.spread_words = torch.zeros(1, dtype=torch.int32), 0
    dec.error, dec.stuck = torch.zeros(10, dtype=torch.int32), torch.zeros(2, 8, dtype=torch.int32)
    dec.step_ns = torch.zeros(4, dtype=torch.int64)
    dec.n_forced, dec.timeout_ns, dec.prefetch_ahead, dec.stage_bytes = 1, 1, 0, 0
    dec.sampling, dec.dynamic_smem = SamplingParams(), 0
    dec.launch_info = LaunchInfo(grid=2, workers=1, threads=256, sms=1, blocks_per_sm=1)
    launched = []
    dec.module = type("Stub", (), {"launch": lambda self, *a, **kw: launched.append(kw)})()

    def field(name: str) -> int:
        i = [n for n, _ in PARAM_FIELDS].index(name)
        return int(dec.params[8 * i: 8 * i + 8].view(torch.int64))

    counters = dec.state.t["counters"]
    attn = _attn_counters(dec.state)
    short = torch.tensor(prog.split_programs[16].signals_per_step(), dtype=torch.int32)
    long = torch.tensor(prog.split_programs[32].signals_per_step(), dtype=torch.int32)
    dec.launch(0, T)
    assert (counters == 0).all() and dec.launched is prog.split_programs[16] and field("attn_split") == 16
    counters.copy_(T * short)  # as the kernel leaves them after steps 0..23
    dec.launch(T, 16)
    assert (counters[attn] == T * long[attn]).all() and (counters[attn] != T * short[attn]).all()
    others = [i for i in range(len(counters)) if i not in attn]
    assert torch.equal(counters[others], (T * short)[others])
    n_long = len(prog.split_programs[32].instructions)
    assert (field("n_instr"), field("ticket_end"), field("attn_split"), field("n_splits")) == (n_long, 40 * n_long, 32, 16)
    assert int(dec.ticket[0]) == T * n_long and dec.launched is prog.split_programs[32] and len(launched) == 2
    counters.copy_(40 * long)  # a further launch of the same split: the counters are already its own, left alone
    dec.launch(40, 1)
    assert torch.equal(counters, 40 * long) and len(launched) == 3
    dec.error[:4] = torch.tensor([ERROR_BAD_TOKEN, 0, T, n_long - 1])  # the long list's last index: its Sample
    assert not isinstance(prog.instructions[n_long - 1], Sample)  # (in the short list another instruction)
    with pytest.raises(MegakernelError, match=f"instruction {n_long - 1} Sample\\("):
        dec.check_error()
