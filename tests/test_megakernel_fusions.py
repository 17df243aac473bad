"""Opt-in fusions of the megakernel (TileShape.publish_ssq / fused_sample; build flags MK_EARLY_WEIGHTS,
MK_COMBINE_ONEPASS): the interpreter's model of their semantics against the fp32 model, the DAG and
runtime checks, and (with nvcc) that every variant row of benchmarks/decode.py compiles for sm_90a
with no spills in the op functions. Not GPU-tested yet: megakernel/NOTES.md "Ready for the next device run"."""
import dataclasses
import re
import shutil

import pytest
import torch

from megakernel.dag import DagError, TileShape, build_decode_program
from megakernel.instructions import Down, Embed, OProj
from megakernel.interpreter import Interpreter, SamplingParams, relative_error
from megakernel.runtime import OPTION_FLAGS, option_flags
from megakernel.state import DecodeState, fusion_layout
from test_megakernel_interpreter import TILES, _prompt, tiny  # noqa: F401  (the tiny model fixture)
from tinyllama.config import get_config
from tinyllama.model import Transformer


@pytest.mark.parametrize("options", [dict(publish_ssq=True), dict(fused_sample=True),
                                     dict(publish_ssq=True, fused_sample=True, down_rows=8, o_rows=32)])
def test_fused_options_match_fp32_model(tiny, options):
    c, w = tiny
    ref = Transformer(w, dtype=torch.float32)
    prog = build_decode_program(c, dataclasses.replace(TILES, **options))
    state = DecodeState.create(prog, w)
    prompt = _prompt(c, 36, seed=11)
    state.set_prompt(prompt)
    interp = Interpreter(state, n_forced=len(prompt))
    for step in range(36):  # 3 attention splits; random order catches a dependency the options need
        interp.run_steps(step, 1, order="random" if step % 2 else "list", seed=step)
        with torch.no_grad():
            want = ref(torch.tensor([[prompt[step]]]), torch.tensor([step]))[0, -1]
        assert relative_error(state.t["logits"], want) < 2e-3, step


def test_published_sums_of_squares_are_the_rows_of_x(tiny):
    c, w = tiny
    tiles = dataclasses.replace(TILES, publish_ssq=True)
    state = DecodeState.create(build_decode_program(c, tiles), w)
    state.set_prompt(_prompt(c, 3, seed=1))
    Interpreter(state, n_forced=3).run_steps(0, 3)
    t = state.t
    for layer in range(c.n_layers + 1):  # Embed (layer 0: all in slot 0) and Down tiles
        assert torch.allclose(t["ssq_x"][layer].sum(), t["x"][layer].pow(2).sum(), rtol=1e-5)
        if layer:
            want = t["x"][layer].view(-1, tiles.down_rows).pow(2).sum(1)
            assert torch.allclose(t["ssq_x"][layer], want, rtol=1e-5)
    assert torch.equal(t["ssq_x"][0, 1:], torch.zeros(c.hidden // tiles.down_rows - 1))
    want = t["x_mid"].view(c.n_layers, -1, tiles.o_rows).pow(2).sum(2)  # OProj tiles
    assert torch.allclose(t["ssq_mid"], want, rtol=1e-5)


def test_published_sums_are_what_the_norm_uses(tiny):
    """A wrong published sum changes the next layer's output: the norm really reads the partials."""
    c, w = tiny
    tiles = dataclasses.replace(TILES, publish_ssq=True)
    prog = build_decode_program(c, tiles)

    class WrongSsq(Interpreter):
        def _down(self, ins, step):
            super()._down(ins, step)
            if ins.layer == 0 and ins.row0 == 0:
                self.s.t["ssq_x"][1, 0] *= 4.0

    a, b = DecodeState.create(prog, w), DecodeState.create(prog, w)
    for s in (a, b):
        s.set_prompt([5])
    Interpreter(a).run_steps(0, 1)
    WrongSsq(b).run_steps(0, 1)
    assert torch.equal(a.t["x"][1], b.t["x"][1])  # x itself is unchanged ...
    assert relative_error(b.t["logits"], a.t["logits"]) > 1e-3  # ... but what reads its norm is


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_fused_sample_draws_the_same_tokens(tiny, temperature):
    c, w = tiny
    prompt = _prompt(c, 5, seed=4)
    out = {}
    for fused in (False, True):
        state = DecodeState.create(build_decode_program(c, dataclasses.replace(TILES, fused_sample=fused)), w)
        state.set_prompt(prompt)
        Interpreter(state, n_forced=len(prompt), sampling=SamplingParams(temperature, seed=99)).run_steps(0, 24)
        out[fused] = state.t["tokens"][:25].tolist()
        if fused:  # the partials are each tile's best (value, index)
            vals = Interpreter(state, sampling=SamplingParams(temperature, seed=99))._sample_values(
                state.t["logits"].double(), 23)
            tiles = state.program.tiles
            best = vals.view(-1, tiles.logits_rows).max(1)
            assert torch.equal(state.t["sample_idx"].long(),
                               best.indices + torch.arange(0, c.vocab, tiles.logits_rows))
    assert out[True] == out[False]
    assert len(set(out[True][5:])) > 1 or temperature == 0.0


def test_fused_sample_ties_go_to_the_lowest_index(tiny):
    c, w = tiny
    tiles = dataclasses.replace(TILES, fused_sample=True)
    prog = build_decode_program(c, tiles)
    state = DecodeState.create(prog, w)
    state.set_prompt([1])
    interp = Interpreter(state, n_forced=1)
    interp.run_steps(0, 1)
    t = state.t
    t["sample_val"][:] = 1.0  # every tile's best equal: the first tile's index wins
    t["sample_idx"][:] = torch.arange(0, c.vocab, tiles.logits_rows, dtype=torch.int32) + 3
    interp._sample(prog.instructions[-1], 0)
    assert int(t["tokens"][1]) == 3


def test_fusion_buffers_follow_the_attention_partials(tiny):
    c, w = tiny
    tiles = dataclasses.replace(TILES, publish_ssq=True, fused_sample=True)
    t = DecodeState.create(build_decode_program(c, tiles), w).t
    lay = fusion_layout(c, tiles)
    base = t["attn_part"].data_ptr()
    for name in ("ssq_x", "ssq_mid", "sample_val", "sample_idx"):  # where the kernel computes them
        assert t[name].data_ptr() == base + 4 * lay[name], name
    assert t["attn_part"].numel() == lay["ssq_x"] and t["sample_idx"].dtype == torch.int32
    assert t["sample_idx"].numel() == lay["parts"]["sample"] == c.vocab // tiles.logits_rows
    assert (t["sample_idx"] == -1).all() and torch.isnan(t["ssq_x"]).all()


def test_options_are_checked_and_compiled_in(tiny):
    c, _ = tiny
    with pytest.raises(DagError, match="publish_ssq needs o_rows and down_rows <= 32"):
        TileShape(publish_ssq=True, down_rows=64).check(c)
    with pytest.raises(DagError, match="fused_sample must be a bool"):
        TileShape(fused_sample=1).check(c)
    big = get_config("tinyllama-1.1b")
    assert option_flags(TileShape(), big) == ()
    assert option_flags(TileShape(publish_ssq=True, fused_sample=True), big) == tuple(OPTION_FLAGS.values()) + (
        "-DMK_SSQ_X_PARTS=128", "-DMK_SSQ_MID_PARTS=128", "-DMK_SAMPLE_PARTS=500")
    assert option_flags(TileShape(fused_sample=True), big)[0] == "-DMK_FUSED_SAMPLE=1"
    with pytest.raises(ValueError, match="set by TileShape options"):
        option_flags(TileShape(fused_sample=True), big, ("-DMK_SAMPLE_PARTS=7",))
    prog = build_decode_program(c, TileShape(publish_ssq=True, fused_sample=True))
    assert [type(i) for i in prog.instructions] == [type(i) for i in build_decode_program(c).instructions]
    assert any(isinstance(i, (Embed, OProj, Down)) for i in prog.instructions)


# ---- every variant row of benchmarks/decode.py that changes kernel code compiles without spills ----
VARIANT_FLAGS = {
    "mk_early": ("-DMK_EARLY_WEIGHTS=1",),
    "mk_onepass": ("-DMK_COMBINE_ONEPASS=1",),
    "mk_early_onepass": ("-DMK_EARLY_WEIGHTS=1", "-DMK_COMBINE_ONEPASS=1"),
    "mk_fused_all": ("-DMK_EARLY_WEIGHTS=1", "-DMK_COMBINE_ONEPASS=1") + option_flags(
        TileShape(publish_ssq=True, fused_sample=True), get_config("tinyllama-1.1b")),
}


def _spills(log: str) -> dict[str, tuple[int, int]]:
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(
        r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
        log)}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("name", ["mk_early", "mk_fused_all"])
def test_variant_builds_without_op_spills(name, tmp_path_factory):
    from megakernel.build import build

    r = build(0, build_dir=tmp_path_factory.mktemp(name), extra_flags=VARIANT_FLAGS[name])
    spills = _spills(r.ptxas_log)
    assert r.registers() is not None and r.registers() <= 128
    # No function but the worker entry and the (unused by default) 8-head attention instance may spill,
    # and those only the few bytes they spill in the default build.
    assert all(st == 0 for fn, (st, _) in spills.items() if "argus_megakernel" not in fn and "ILi8E" not in fn), \
        r.ptxas_log
    assert sum(st for st, _ in spills.values()) <= 96, r.ptxas_log
