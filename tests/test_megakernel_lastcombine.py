"""Row 26 (megakernel/NOTES.md "Ready: row 26"; opt-in TileShape(last_combine=True), build flag MK_LAST_COMBINE=1):
each AttnPartial tile arrives on its (layer, KV head) counter and the group's last arrival combines the group's
splits into attn_out, which O-proj loads. On the CPU: the DAG's arrival counters and their check, the buffer
layout the kernel computes, the runtime's build flag, the interpreter's semantics (one combine per group and step,
by the last arrival, in list and random order; the default's values), localisation of a wrong combine and of a
wrong tile, and (with nvcc) that the variant compiles in modes 0 and 2 without spills in its new functions while
the default build has none of them. GPU: tests/test_megakernel_fusions_gpu.py (FUSION_K=lastcombine)."""
import dataclasses
import re

import pytest
import torch

from benchmarks.decode import variant_rows
from megakernel.dag import DagError, TileShape, build_decode_program
from megakernel.instructions import NO_COUNTER, AttnPartial, Down, OProj
from megakernel.interpreter import Interpreter, localise, relative_error
from megakernel.runtime import option_flags
from megakernel.state import DecodeState, fusion_layout
from test_megakernel_interpreter import TILES, _prompt, replay_step, tiny  # noqa: F401  (the tiny model fixture)
from tinyllama.model import Transformer
from toolchain import needs_nvcc

LAST = dataclasses.replace(TILES, last_combine=True)


def _tiles_per_group(c, tiles) -> int:
    return tiles.n_splits(c) * tiles.head_parts(c)


def test_last_combine_is_opt_in_and_a_tile_option(tiny):
    assert not TileShape().last_combine
    assert option_flags(TileShape()) == ()
    assert option_flags(TileShape(last_combine=True)) == ("-DMK_LAST_COMBINE=1",)
    assert option_flags(TileShape(last_combine=True, fused_sample=False)) == ("-DMK_FUSED_SAMPLE=0",
                                                                              "-DMK_LAST_COMBINE=1")
    with pytest.raises(ValueError, match="not by hand"):
        option_flags(TileShape(), ("-DMK_LAST_COMBINE=1",))
    rows = variant_rows()
    assert rows["mk_lastcombine"] == {"tiles": TileShape(last_combine=True, down_rows=8)}  # row 36's Down tiles
    assert rows["mk_oproj_combine"] == {"tiles": TileShape(last_combine=False, down_rows=8)}
    with pytest.raises(DagError, match="last_combine must be a bool"):
        TileShape(last_combine=1).check(tiny[0])


def test_program_has_one_arrival_counter_per_group(tiny):
    c, _ = tiny
    base, last = build_decode_program(c, TILES), build_decode_program(c, LAST)
    assert len(last.counters) == len(base.counters) + c.n_layers * c.n_kv_heads
    assert all(ins.arrive == NO_COUNTER for ins in base.instructions if isinstance(ins, AttnPartial))
    groups = {}
    for ins in last.instructions:
        if isinstance(ins, AttnPartial):
            assert last.counters[ins.arrive] == f"attn_arrive[{ins.layer}][{ins.kv_head}]"
            groups.setdefault(ins.arrive, set()).add((ins.split, ins.head_part))
    assert len(groups) == c.n_layers * c.n_kv_heads
    assert all(len(g) == _tiles_per_group(c, LAST) for g in groups.values())
    # nothing else changes: same ops, same waits (O-proj still waits for every AttnPartial tile's signal)
    names = {i: n for i, n in enumerate(last.counters)}
    base_names = {i: n for i, n in enumerate(base.counters)}
    assert len(base.instructions) == len(last.instructions)
    for a, b in zip(base.instructions, last.instructions):
        assert type(a) is type(b) and names[b.signal] == base_names[a.signal]
        assert a.wait == NO_COUNTER and b.wait == NO_COUNTER or names[b.wait] == base_names[a.wait]
        assert (a.wait_count, a.wait_delta) == (b.wait_count, b.wait_delta)
    oproj = [ins for ins in last.instructions if isinstance(ins, OProj)]
    assert all(ins.wait_count == c.n_kv_heads * _tiles_per_group(c, LAST) for ins in oproj)


def test_check_rejects_wrong_arrival_counters(tiny):
    c, _ = tiny
    prog = build_decode_program(c, LAST)
    attn = [k for k, ins in enumerate(prog.instructions) if isinstance(ins, AttnPartial)]
    other = prog.instructions[attn[-1]].arrive
    i = attn[0]  # a tile of (layer 0, KV head 0) counted on another group's counter
    prog.instructions[i] = dataclasses.replace(prog.instructions[i], arrive=other)
    with pytest.raises(DagError, match="arrival counter"):
        prog.check()
    prog = build_decode_program(c, LAST)
    prog.instructions[i] = dataclasses.replace(prog.instructions[i], arrive=prog.instructions[i].signal)
    with pytest.raises(DagError, match="arrival counter"):  # a dependency counter is no arrival counter
        prog.check()
    prog = build_decode_program(c, TILES)
    prog.instructions[i] = dataclasses.replace(prog.instructions[i], arrive=0)
    with pytest.raises(DagError, match="last_combine=False"):
        prog.check()


def test_attn_out_lies_where_the_kernel_computes_it(tiny):
    """megakernel.cu attn_out_of: attn_part + n_layers * n_heads * n_splits * (head_dim + 2) floats, then the
    sample pairs after n_layers * hidden more; the default layout has no attn_out."""
    c, w = tiny
    t = DecodeState.create(build_decode_program(c, LAST), w).t
    attn = c.n_layers * c.n_heads * LAST.n_splits(c) * (c.head_dim + 2)
    assert t["attn_out"].shape == (c.n_layers, c.hidden)
    assert t["attn_out"].data_ptr() == t["attn_part"].data_ptr() + 4 * attn
    assert t["sample_val"].data_ptr() == t["attn_out"].data_ptr() + 4 * c.n_layers * c.hidden
    assert torch.isnan(t["attn_out"]).all()  # poisoned until a combine writes it
    assert fusion_layout(c, LAST)["total"] == fusion_layout(c, TILES)["total"] + c.n_layers * c.hidden
    assert "attn_out" not in DecodeState.create(build_decode_program(c, TILES), w).t


class CountingInterpreter(Interpreter):
    """Records which tile combined which group, and how many tiles of the group had run before it."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.ran, self.combines = {}, []

    def _attn(self, ins, step):
        key = (step, ins.layer, ins.kv_head)
        self.ran[key] = self.ran.get(key, 0) + 1
        self.current = (key, self.ran[key])
        super()._attn(ins, step)

    def _combine(self, layer, step, heads=slice(None)):
        if heads != slice(None):
            self.combines.append(self.current)
        return super()._combine(layer, step, heads)


@pytest.mark.parametrize("order", ["list", "random"])
def test_the_last_arrival_combines_once_per_group_and_step(tiny, order):
    c, w = tiny
    prog = build_decode_program(c, LAST)
    state = DecodeState.create(prog, w)
    prompt = _prompt(c, 40, seed=21)
    state.set_prompt(prompt)
    interp = CountingInterpreter(state, n_forced=len(prompt))
    interp.run_steps(0, 40, order=order, seed=4)  # positions 0..39: 3 of the 16 splits used at the end
    per_group = _tiles_per_group(c, LAST)
    assert len(interp.combines) == 40 * c.n_layers * c.n_kv_heads
    assert {n for _, n in interp.combines} == {per_group}  # always the group's last tile, empty splits counted
    assert len({key for key, _ in interp.combines}) == len(interp.combines)
    arrive = [i for i, n in enumerate(prog.counters) if n.startswith("attn_arrive")]
    assert (state.t["counters"][arrive] == 40 * per_group).all()


def test_last_combine_interpreter_gives_the_default_values(tiny):
    """Same partials, the same combine per head: the default interpreter's logits (and the fp32 model's)."""
    c, w = tiny
    ref = Transformer(w, dtype=torch.float32)
    prompt = _prompt(c, 40, seed=11)
    states = {}
    for name, tiles in (("default", TILES), ("last", LAST)):
        states[name] = DecodeState.create(build_decode_program(c, tiles), w)
        states[name].set_prompt(prompt)
    interp = {n: Interpreter(s, n_forced=len(prompt)) for n, s in states.items()}
    for step in range(40):
        interp["default"].run_steps(step, 1)
        interp["last"].run_steps(step, 1, order="random", seed=step)
        with torch.no_grad():
            want = ref(torch.tensor([[prompt[step]]]), torch.tensor([step]))[0, -1]
        got, base = states["last"].t["logits"], states["default"].t["logits"]
        assert relative_error(got, want) < 2e-3, step
        assert relative_error(got, base) < 1e-6, step
    attn = states["last"].t["attn_out"]
    for layer in range(c.n_layers):
        assert relative_error(attn[layer], Interpreter(states["default"])._combine(layer, 39)) < 1e-6


def _replayed(c, w, tiles, wrong: type[Interpreter]):
    return replay_step(c, w, tiles, 2, 36, wrong)  # step 36..: 3 splits


def test_localise_names_a_wrong_combine_at_its_group(tiny):
    """The combine's output is charged to the group's last tile in stream order (the device's last arrival is
    any of them): a wrong combine is named there, before O-proj; a right run localises nothing."""
    c, w = tiny

    class WrongCombine(Interpreter):
        def _combine(self, layer, step, heads=slice(None)):
            out = super()._combine(layer, step, heads)
            if layer == 1 and heads.start == c.group:  # KV head 1's group
                out = out.clone()
                out[3] += 0.5
            return out

    before, after = _replayed(c, w, LAST, WrongCombine)
    found = localise(before, after, step=36, n_forced=40)
    assert found is not None
    _, ins, err = found
    assert isinstance(ins, AttnPartial) and (ins.layer, ins.kv_head) == (1, 1) and err > 1e-2
    assert (ins.split, ins.head_part) == (LAST.n_splits(c) - 1, LAST.head_parts(c) - 1)
    before, good = _replayed(c, w, LAST, Interpreter)
    assert localise(before, good, step=36, n_forced=40) is None


def test_localise_still_names_a_wrong_tile(tiny):
    c, w = tiny

    class WrongDownTile(Interpreter):
        def _down(self, ins, step):
            super()._down(ins, step)
            if ins.layer == 1 and ins.row0 == 32:
                self.s.t["x"][2, 40] += 0.5

    before, after = _replayed(c, w, LAST, WrongDownTile)
    _, ins, err = localise(before, after, step=36, n_forced=40)
    assert isinstance(ins, Down) and ins.layer == 1 and ins.row0 == 32 and err > 1e-2


def _spills(log: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores", log)}


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_variant_compiles_and_the_default_has_none_of_it(tmp_path, mode):
    from megakernel.build import build

    last = build(mode, build_dir=tmp_path / "last", extra_flags=option_flags(TileShape(last_combine=True)))
    base = build(mode, build_dir=tmp_path / "base")
    spills = {n: _spills(r.ptxas_log) for n, r in (("last", last), ("base", base))}
    assert last.registers() is not None and last.registers() <= 128
    combine = {fn: n for fn, n in spills["last"].items() if "combine_group" in fn}
    assert len(combine) == 4 and all(n == 0 for n in combine.values()), last.ptxas_log  # PER = 1, 2, 4, 8
    assert not any("combine_group" in fn for fn in spills["base"])
    if mode == 0:  # the timed binary; the trace build's spills move with the marker headers (8 -> 24 B, 01:20)
        assert sum(spills["last"].values()) <= sum(spills["base"].values()), last.ptxas_log
