"""Fused sampling, the megakernel's default (TileShape.fused_sample; megakernel/NOTES.md row 14): each
Logits tile writes its best (value, index) and Sample reduces those. On the CPU: the interpreter's fused
Sample against the unfused one and the fp32 model, the buffer layout the kernel computes, the runtime's
build flag, and (with nvcc) that the unfused build (benchmarks/decode.py mk_nofsample) compiles without
op spills. GPU: tests/test_megakernel_fusions_gpu.py."""
import dataclasses
import re

import pytest
import torch

from megakernel.dag import DagError, TileShape, build_decode_program
from megakernel.instructions import Logits, Sample
from megakernel.interpreter import Interpreter, SamplingParams
from megakernel.runtime import option_flags
from megakernel.state import DecodeState
from test_megakernel_interpreter import TILES, _prompt, tiny  # noqa: F401  (the tiny model fixture)
from tinyllama.model import Transformer
from toolchain import needs_nvcc

UNFUSED = dataclasses.replace(TILES, fused_sample=False)


def test_fused_sample_is_the_default():
    assert TileShape().fused_sample and TILES.fused_sample
    assert option_flags(TileShape()) == ()  # the runtime's default cubin is the plain build's
    assert option_flags(TileShape(fused_sample=False)) == ("-DMK_FUSED_SAMPLE=0",)
    with pytest.raises(ValueError, match="set by TileShape.fused_sample"):
        option_flags(TileShape(), ("-DMK_FUSED_SAMPLE=1",))


def test_fused_sample_must_be_a_bool(tiny):
    c, _ = tiny
    with pytest.raises(DagError, match="fused_sample must be a bool"):
        TileShape(fused_sample=1).check(c)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("logits_rows", [64, 2])  # 8 partials; 256 partials (one per kernel thread)
def test_fused_sample_draws_the_unfused_tokens(tiny, temperature, logits_rows):
    c, w = tiny
    prompt = _prompt(c, 5, seed=4)
    sampling = SamplingParams(temperature, seed=99)
    out = {}
    for fused in (False, True):
        tiles = dataclasses.replace(TILES, fused_sample=fused, logits_rows=logits_rows)
        state = DecodeState.create(build_decode_program(c, tiles), w)
        state.set_prompt(prompt)
        Interpreter(state, n_forced=len(prompt), sampling=sampling).run_steps(0, 24)
        out[fused] = state.t["tokens"][:25].tolist()
        if fused:  # the partials of the last step are each tile's best (value, index) of what Sample compares
            vals = Interpreter(state, sampling=sampling)._sample_values(state.t["logits"].double(), 23)
            best = vals.view(-1, logits_rows).max(1)
            assert torch.equal(state.t["sample_idx"].long(), best.indices + torch.arange(0, c.vocab, logits_rows))
            assert torch.equal(state.t["sample_val"], best.values.float())
    assert out[True] == out[False]
    assert len(set(out[True][5:])) > 1 or temperature == 0.0  # sampling really draws different tokens


def test_fused_greedy_tokens_are_the_fp32_models_argmax(tiny):
    """Each token the fused Sample picks is the fp32 model's argmax given the same context (where the
    top two logits are not a near tie, which bf16 weights and KV cache may legitimately flip)."""
    c, w = tiny
    ref = Transformer(w, dtype=torch.float32)
    prompt = _prompt(c, 4, seed=8)
    state = DecodeState.create(build_decode_program(c, TILES), w)
    state.set_prompt(prompt)
    Interpreter(state, n_forced=len(prompt)).run_steps(0, 20)
    tokens = state.t["tokens"][:21].tolist()
    checked = 0
    with torch.no_grad():
        logits = ref(torch.tensor([tokens[:20]]), torch.arange(20))[0]  # [20, vocab]: position s predicts s + 1
    for s in range(len(prompt) - 1, 20):
        top2 = torch.topk(logits[s], 2).values
        if (top2[0] - top2[1]).item() > 1e-2 * logits[s].abs().max().item():
            assert tokens[s + 1] == int(torch.argmax(logits[s])), s
            checked += 1
    assert checked >= 8


def _after_one_step(tiny):
    """The tiny model's program, interpreter and tensors after step 0 (the Logits tiles' partials written)."""
    c, w = tiny
    prog = build_decode_program(c, TILES)
    state = DecodeState.create(prog, w)
    state.set_prompt([1])
    interp = Interpreter(state, n_forced=1)
    interp.run_steps(0, 1)
    return c, prog, interp, state.t


def test_fused_sample_reads_the_partials(tiny):
    """A wrong partial changes the token: Sample really reduces the Logits tiles' pairs, not the logits."""
    c, prog, interp, t = _after_one_step(tiny)
    k = int(torch.argmin(t["sample_val"]))  # the worst tile's best becomes the best of all
    t["sample_val"][k] = t["sample_val"].max() + 1.0
    interp._sample(prog.instructions[-1], 0)
    assert int(t["tokens"][1]) == int(t["sample_idx"][k]) != int(torch.argmax(t["logits"]))


def test_fused_sample_ties_go_to_the_lowest_index(tiny):
    c, prog, interp, t = _after_one_step(tiny)
    t["sample_val"][:] = 1.0  # every tile's best equal: the first tile's index wins
    t["sample_idx"][:] = torch.arange(0, c.vocab, TILES.logits_rows, dtype=torch.int32) + 3
    interp._sample(prog.instructions[-1], 0)
    assert int(t["tokens"][1]) == 3


def test_partials_lie_where_the_kernel_computes_them(tiny):
    """csrc/megakernel/megakernel.cu: values at attn_part + n_layers * n_heads * n_splits * (head_dim + 2)
    floats, indices right after them, one per Logits tile; the kernel's part count is the Sample
    instruction's wait count (one signal per Logits tile)."""
    c, w = tiny
    prog = build_decode_program(c, TILES)
    t = DecodeState.create(prog, w).t
    n_logits = sum(isinstance(i, Logits) for i in prog.instructions)
    sample = prog.instructions[-1]
    assert isinstance(sample, Sample) and sample.wait_count == n_logits == c.vocab // TILES.logits_rows
    attn = c.n_layers * c.n_heads * TILES.n_splits(c) * (c.head_dim + 2)
    assert t["attn_part"].numel() == attn
    assert t["sample_val"].data_ptr() == t["attn_part"].data_ptr() + 4 * attn
    assert t["sample_idx"].data_ptr() == t["sample_val"].data_ptr() + 4 * n_logits
    assert t["sample_val"].numel() == t["sample_idx"].numel() == n_logits and t["sample_idx"].dtype == torch.int32
    assert (t["sample_idx"] == -1).all() and torch.isnan(t["sample_val"]).all()  # poisoned until written


def test_unfused_sample_ignores_the_partials(tiny):
    c, w = tiny
    prog = build_decode_program(c, UNFUSED)
    state = DecodeState.create(prog, w)
    state.set_prompt([1])
    Interpreter(state, n_forced=1).run_steps(0, 1)
    assert int(state.t["tokens"][1]) == int(torch.argmax(state.t["logits"]))
    assert (state.t["sample_idx"] == -1).all()  # the unfused Logits tiles write no partials


def _spills(log: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores", log)}


# Row 36's default Down pieces (MK_DOWN_PIECES=1) with the unfused Sample (benchmarks/decode.py mk_nofsample, nvcc 13.0,
# 2026-12-02) spilled in load_rmsnorm (4 B) and the 1- and 2-head attention tiles (4 B, 24 B), which the same build
# with Down through gemv_tile (-DMK_DOWN_PIECES=0) did not; since row 55 (MK_TAIL_LOADS, session 21) neither spills
# there (this case was a strict xfail until then). With the control's Down (-DMK_TAIL_LOADS=0) the op spills remain.
@needs_nvcc
@pytest.mark.parametrize("down", [
    ("-DMK_DOWN_PIECES=0",),
    (),
    pytest.param(("-DMK_TAIL_LOADS=0",), marks=pytest.mark.xfail(strict=True, reason="row 36's Down pieces before row "
                                                                                      "55: op spills, see above")),
], ids=["plain_down", "default_down", "default_down_before_row55"])
def test_unfused_build_compiles_without_op_spills(tmp_path, down):
    """benchmarks/decode.py mk_nofsample (the default build: tests/test_megakernel_build.py)."""
    from megakernel.build import build

    r = build(0, build_dir=tmp_path, extra_flags=option_flags(UNFUSED) + down)
    spills = _spills(r.ptxas_log)
    assert spills and r.registers() is not None and r.registers() <= 128
    # Only the worker entry and the (unused at 2 heads per tile) 8-head attention instance may spill.
    assert all(n == 0 for fn, n in spills.items() if "argus_megakernel" not in fn and "ILi8E" not in fn), r.ptxas_log
    assert sum(spills.values()) <= 96, r.ptxas_log
