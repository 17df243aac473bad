"""Row 51 on the CPU (megakernel/NOTES.md "Ready: row 51"; TileShape.attn_o_rows, build flag MK_ATTN_O=1, row
mk_attn_o): a one-split launch's AttnPartial and OProj tiles fused into AttnO tiles, one per (Wo row block, query
head), each adding its head's share of Wo @ attn into x_mid, which Embed and Down set to x. The program (which tiles,
waits and counters), refusals in one line, the interpreter's fused launches against the unfused ones (the same sums in
another order: close, not equal), localisation charging x_mid to the last head's tile, the flag, and (with nvcc) the
builds. GPU: tests/test_megakernel_attn_o_gpu.py."""
import dataclasses

import pytest
import torch

from megakernel.dag import DEFAULT_TILES, ONE_SPLIT, DagError, build_decode_program
from megakernel.instructions import AttnO, AttnPartial, GateUp, OProj
from megakernel.interpreter import Interpreter, localise
from megakernel.runtime import option_flags
from megakernel.state import DecodeState
from test_megakernel_interpreter import TILES, _prompt, tiny  # noqa: F401  (the tiny model fixture)
from tinyllama.config import get_config
from toolchain import (  # noqa: F401  (megakernel_builds: the fixture)
    cubin_sha256,
    default_tile_flags,
    megakernel_builds,
    needs_nvcc,
)

FULL = get_config("tinyllama-1.1b")
ROW = dataclasses.replace(DEFAULT_TILES, attn_o_rows=256)
# tiny model: launches ending at <= 20 run the one-split (fused) program, <= 24 16-position splits, later ones 32
PLAIN_TINY = dataclasses.replace(TILES, attn_split_long=32, split_threshold=24, single_split=20)
FUSED_TINY = dataclasses.replace(PLAIN_TINY, attn_o_rows=32)


def test_the_row_and_its_flag():
    from benchmarks.decode import variant_rows

    assert variant_rows()["mk_attn_o"] == {"tiles": ROW}
    assert option_flags(ROW) == option_flags(DEFAULT_TILES) + ("-DMK_ATTN_O=1",)
    assert DEFAULT_TILES.attn_o_rows == 0
    with pytest.raises(ValueError, match="set by TileShape"):
        option_flags(ROW, ("-DMK_ATTN_O=1",))


def test_the_fused_program():
    """Full TinyLlama: the one-split list has 32 heads x 8 row blocks of AttnO per layer in place of its 32 AttnPartial
    and 128 OProj tiles, waiting on qkv[L] as AttnPartial did and signalling o[L], whose GateUp tiles wait for 256;
    the longer launches' programs are the default's."""
    prog = build_decode_program(FULL, ROW)
    ref = build_decode_program(FULL, DEFAULT_TILES)
    one, ref_one = prog.split_programs[ONE_SPLIT], ref.split_programs[ONE_SPLIT]
    for key in (128, 256):
        assert prog.split_programs[key].words().tobytes() == ref.split_programs[key].words().tobytes()
    fused = [i for i in one.instructions if isinstance(i, AttnO)]
    assert len(fused) == 22 * 256 and {i.rows for i in fused} == {256}
    assert not any(isinstance(i, (AttnPartial, OProj)) for i in one.instructions)
    attn = {i.layer: i for i in ref_one.instructions if isinstance(i, AttnPartial)}
    oproj = {i.layer: i for i in ref_one.instructions if isinstance(i, OProj)}
    for i in fused:
        assert (i.wait, i.wait_count, i.wait_delta, i.signal) == (attn[i.layer].wait, attn[i.layer].wait_count, 0,
                                                                 oproj[i.layer].signal)
    assert {i.wait_count for i in one.instructions if isinstance(i, GateUp)} == {256}
    assert one.counters == ref_one.counters
    layer0 = [(i.row0, i.head) for i in fused if i.layer == 0]
    assert layer0[:3] == [(0, 0), (0, 1), (0, 2)]  # row blocks outermost: consecutive tickets, different heads
    rebase = prog.launch_counters(129, 193)
    assert {prog.counters[i] for i, v in rebase.items() if v == 129 * 256} == {f"o[{L}]" for L in range(22)}
    long = prog.launch_counters(1025, 1089)  # back to a two-split program: O-proj's 128 tiles
    assert {prog.counters[i] for i, v in long.items() if v == 1025 * 128} >= {f"o[{L}]" for L in range(22)}


@pytest.mark.parametrize("kw,match", [
    ({"attn_o_rows": 100}, "attn_o_rows must be 0 .off. or a positive int dividing hidden"),
    ({"attn_o_rows": -256}, "attn_o_rows must be"),
    ({"attn_o_rows": True}, "attn_o_rows must be"),
    ({"attn_o_rows": 256, "single_split": 0}, "set single_split too"),
    ({"attn_o_rows": 256, "early_regs": 15}, "early_regs bit 8"),
])
def test_bad_values_are_refused_in_one_line(kw, match):
    with pytest.raises(DagError, match=match) as e:
        build_decode_program(FULL, dataclasses.replace(DEFAULT_TILES, **kw))
    assert "\n" not in str(e.value)


def test_a_fused_program_is_checked():
    one = build_decode_program(FULL, ROW).split_programs[ONE_SPLIT]
    short = dataclasses.replace(one, instructions=[i for i in one.instructions
                                                   if not (isinstance(i, AttnO) and i.head == 5 and i.row0 == 0)])
    with pytest.raises(DagError):  # GateUp now expects more signals than o[L] gets, and the cover has a hole
        short.check()
    plain = dataclasses.replace(one, one_split=False)
    with pytest.raises(DagError, match="AttnO tiles belong to a one-split program"):
        plain.check()


def _run(c, w, tiles, prompt, launches):
    state = DecodeState.create(build_decode_program(c, tiles), w)
    state.set_prompt(prompt)
    interp = Interpreter(state, n_forced=len(prompt))
    for first, count in launches:
        interp.run_steps(first, count)
    return state


def test_fused_launches_match_the_unfused_interpreter(tiny):
    """Tiny model, launches across the fused one-split program (ending <= 20) and the 16- / 32-position ones after:
    the same tokens, and x, x_mid, the KV cache and the logits within fp32 rounding of the unfused program's."""
    c, w = tiny
    prompt = _prompt(c, 6, seed=31)
    launches = [(0, 8), (8, 4), (12, 8), (20, 4), (24, 16)]
    plain, fused = (_run(c, w, t, prompt, launches) for t in (PLAIN_TINY, FUSED_TINY))
    assert fused.t["tokens"][:40].tolist() == plain.t["tokens"][:40].tolist()
    for name in ("x", "x_mid", "k_cache", "v_cache", "logits"):
        a, b = fused.t[name].float(), plain.t[name].float()
        ok = ~torch.isnan(b)
        assert torch.equal(torch.isnan(a), torch.isnan(b)), name
        assert torch.allclose(a[ok], b[ok], rtol=1e-4, atol=1e-4), name


def test_localisation_charges_x_mid_to_the_last_head(tiny):
    """A wrong x_mid row after a fused step is found at the layer's last-head AttnO tile of its row block."""
    c, w = tiny
    state = DecodeState.create(build_decode_program(c, FUSED_TINY), w)
    state.set_prompt(_prompt(c, 4, seed=32))
    Interpreter(state, n_forced=4).run_steps(0, 3)
    before = state.clone()
    after = state.clone()
    Interpreter(after, n_forced=4).run_steps(3, 1)
    assert localise(before, after, 3, n_forced=4) is None
    after.t["x_mid"][1, 40] += 1.0
    idx, ins, err = localise(before, after, 3, n_forced=4)
    assert isinstance(ins, AttnO) and (ins.layer, ins.head, ins.row0) == (1, c.n_heads - 1, 32) and err > 1e-2


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_flag_off_is_the_default_cubin(builds, mode):
    assert cubin_sha256(builds(mode, default_tile_flags())) == cubin_sha256(
        builds(mode, default_tile_flags() + ("-DMK_ATTN_O=0",)))


@needs_nvcc
def test_the_flag_build(builds):
    fused = builds(0, default_tile_flags(tiles=ROW))
    assert fused.registers() == 128 and "warning" not in fused.ptxas_log.lower(), fused.ptxas_log
