"""Reference interpreter of the instruction stream vs the plain PyTorch model (tiny config, CPU)."""
import dataclasses
import math

import numpy as np
import pytest
import torch

from megakernel.dag import TileShape, build_decode_program
from megakernel.instructions import NO_COUNTER, Down, GateUp
from megakernel.interpreter import (
    Interpreter,
    InterpreterError,
    SamplingParams,
    gumbel_uniform,
    localise,
    relative_error,
)
from megakernel.state import DecodeState, pack_wqkv, qkv_row_order
from tinyllama.config import get_config
from tinyllama.model import Transformer
from tinyllama.weights import random_weights

TILES = TileShape(o_rows=16, gate_features=16, down_rows=16, logits_rows=64, attn_split=16)  # several splits


@pytest.fixture(scope="module")
def tiny():
    c = get_config("tiny")
    return c, random_weights(c, seed=3)


def _prompt(c, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, c.vocab, (n,), generator=g).tolist()


def replay_step(c, w, tiles, seed: int, step: int, runner: type[Interpreter] = Interpreter,
                launch_end: int | None = None) -> tuple[DecodeState, DecodeState]:
    """(before, after) for localise: the state after steps [0, step) of a 40-token forced prompt (``seed``), and a
    copy of it after step ``step`` run by ``runner`` (Interpreter, or a subclass that computes one thing wrong), both
    as parts of a launch ending at ``launch_end``."""
    state = DecodeState.create(build_decode_program(c, tiles), w)
    state.set_prompt(_prompt(c, 40, seed=seed))
    Interpreter(state, n_forced=40).run_steps(0, step, launch_end=launch_end)
    before = state.clone()
    after = before.clone()
    runner(after, n_forced=40).run_steps(step, 1, launch_end=launch_end)
    return before, after


@pytest.mark.parametrize("qkv_parts,attn_head_parts", [(1, 1), (2, 1), (8, 1), (1, 2)])
def test_interpreter_matches_fp32_model_over_many_steps(tiny, qkv_parts, attn_head_parts):
    c, w = tiny
    ref = Transformer(w, dtype=torch.float32)
    prog = build_decode_program(c, dataclasses.replace(TILES, qkv_parts=qkv_parts, attn_head_parts=attn_head_parts))
    state = DecodeState.create(prog, w)
    prompt = _prompt(c, 40, seed=11)
    state.set_prompt(prompt)
    interp = Interpreter(state, n_forced=len(prompt))
    for step in range(40):  # KV positions 0..39 = 3 attention splits of 16
        interp.run_steps(step, 1, order="random" if step % 2 else "list", seed=step)
        with torch.no_grad():
            want = ref(torch.tensor([[prompt[step]]]), torch.tensor([step]))[0, -1]
        # Only difference to the fp32 model: the KV cache is stored in bf16.
        assert relative_error(state.t["logits"], want) < 2e-3, step
    assert int(state.t["counters"][prog.counters.index("sample")]) == 40  # monotonic, never reset


def test_random_order_equals_list_order(tiny):
    c, w = tiny
    prog = build_decode_program(c, TILES)
    a, b = DecodeState.create(prog, w), DecodeState.create(prog, w)
    prompt = _prompt(c, 20, seed=5)
    for s in (a, b):
        s.set_prompt(prompt)
    Interpreter(a, n_forced=20).run_steps(0, 20, order="list")
    Interpreter(b, n_forced=20).run_steps(0, 20, order="random", seed=7)
    assert torch.equal(a.t["logits"], b.t["logits"])
    assert torch.equal(a.t["k_cache"], b.t["k_cache"])


def test_random_order_exposes_a_missing_dependency(tiny):
    c, w = tiny
    prog = build_decode_program(c, TILES)
    # Drop GateUp's wait on OProj: a GateUp tile may now read x_mid before it is written (NaN-poisoned).
    prog.instructions = [ins.__class__(**{**ins.__dict__, "wait": NO_COUNTER}) if isinstance(ins, GateUp) else ins
                         for ins in prog.instructions]
    state = DecodeState.create(prog, w)
    state.set_prompt([1])
    Interpreter(state).run_steps(0, 1, order="random", seed=0)
    assert torch.isnan(state.t["logits"]).any()


def test_interpreter_refuses_a_dependency_that_is_never_met(tiny):
    c, w = tiny
    prog = build_decode_program(c, TILES)
    i = next(k for k, ins in enumerate(prog.instructions) if isinstance(ins, Down))
    prog.instructions[i] = prog.instructions[i].__class__(**{**prog.instructions[i].__dict__, "wait_count": 10**6})
    state = DecodeState.create(prog, w)
    state.set_prompt([1])
    with pytest.raises(InterpreterError, match="deadlock"):
        Interpreter(state).run_steps(0, 1, order="random")
    with pytest.raises(InterpreterError, match="runs before its dependency"):
        Interpreter(DecodeState.create(prog, w)).run_steps(0, 1, order="list")


def test_greedy_sampling_feeds_the_next_step(tiny):
    c, w = tiny
    prog = build_decode_program(c, TILES)
    state = DecodeState.create(prog, w)
    state.set_prompt([7, 8])
    Interpreter(state, n_forced=2).run_steps(0, 4)
    ref = Transformer(w, dtype=torch.float32)
    tokens = [7, 8]
    with torch.no_grad():
        for pos in range(4):
            logits = ref(torch.tensor([[tokens[pos]]]), torch.tensor([pos]))[0, -1]
            if pos + 1 >= len(tokens):
                tokens.append(int(torch.argmax(logits)))
    assert state.t["tokens"][:5].tolist() == tokens[:5]


def test_gumbel_max_samples_the_softmax():
    logits = np.array([0.0, 1.0, 2.0, -1.0])
    temperature = 0.7
    n = 20000
    counts = np.zeros(4)
    for step in range(n):
        u = gumbel_uniform(seed=1234, step=step, n=4)
        counts[np.argmax(logits / temperature - np.log(-np.log(u)))] += 1
    p = np.exp(logits / temperature)
    p /= p.sum()
    assert np.all(np.abs(counts / n - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-3)
    u = gumbel_uniform(seed=1, step=2, n=100000)
    assert 0.0 < u.min() and u.max() < 1.0
    assert np.array_equal(u, gumbel_uniform(seed=1, step=2, n=100000))
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1.0)


def test_localise_names_the_first_wrong_instruction(tiny):
    c, w = tiny
    prog = build_decode_program(c, TILES)
    state = DecodeState.create(prog, w)
    prompt = _prompt(c, 12, seed=2)
    state.set_prompt(prompt)
    Interpreter(state, n_forced=12).run_steps(0, 10)
    before = state.clone()

    class WrongDownTile(Interpreter):  # stands in for a kernel with a bug in one tile
        def _down(self, ins, step):
            super()._down(ins, step)
            if ins.layer == 1 and ins.row0 == 32:
                self.s.t["x"][2, 40] += 0.5

    after = before.clone()
    WrongDownTile(after, n_forced=12).run_steps(10, 1)
    found = localise(before, after, step=10, n_forced=12)
    assert found is not None
    idx, ins, err = found
    assert isinstance(ins, Down) and ins.layer == 1 and ins.row0 == 32 and err > 1e-2
    good = before.clone()
    Interpreter(good, n_forced=12).run_steps(10, 1)
    assert localise(before, good, step=10, n_forced=12) is None


def test_relative_error_flags_nan():
    assert relative_error(torch.tensor([float("nan"), 1.0]), torch.ones(2)) == math.inf
    assert relative_error(torch.ones(3), torch.ones(3)) == 0.0


def test_qkv_packing_puts_rope_pairs_in_one_part(tiny):
    c, w = tiny
    assert qkv_row_order(8, 1) == list(range(8))
    assert qkv_row_order(8, 2) == [0, 1, 4, 5, 2, 3, 6, 7]  # part 0: pairs (0,4), (1,5); part 1: (2,6), (3,7)
    packed = pack_wqkv(w.layers[0]["wqkv"], c, 2)
    order = qkv_row_order(c.head_dim, 2)
    head = 3
    assert torch.equal(packed[head * c.head_dim: (head + 1) * c.head_dim],
                       w.layers[0]["wqkv"][[head * c.head_dim + r for r in order]])
    v0 = c.hidden + c.kv_dim
    assert torch.equal(packed[v0:], w.layers[0]["wqkv"][v0:])  # v rows: no RoPE, not reordered
