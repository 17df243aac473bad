"""Row 30 (megakernel/NOTES.md "Ready: row 30"): TileShape(fused_ffn=True), the GateUp tiles apply their split-K
slice of Down and reduce it into x[layer + 1] (MK_FUSED_FFN=1). On the CPU: the DAG (no Down tiles, the next layer
waits on GateUp), the encoding, the transposed Wd, the interpreter's fused path against the unfused one, localisation,
the host's refusals, the timeline, and with nvcc the build (registers, spills, the float4 reductions, the region).
GPU: tests/test_megakernel_fusions_gpu.py -k fused_ffn."""
import dataclasses
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from argus_rt.trace.intervals import INTERVAL_DTYPE
from megakernel import timeline
from megakernel.dag import DagError, TileShape, build_decode_program
from megakernel.instructions import Down, GateUp, Logits, OProj, QkvHead, deserialize
from megakernel.interpreter import Interpreter, localise, relative_error
from megakernel.regions import coordinate, region_tree
from megakernel.runtime import down_slice_range, fused_ffn_check, option_flags, tile_weight_ranges
from megakernel.state import DecodeState, transpose_down
from tinyllama.config import get_config
from tinyllama.weights import random_weights
from toolchain import needs_nvcc

TILES = TileShape(o_rows=16, gate_features=16, down_rows=16, logits_rows=64, attn_split=16)
FUSED = dataclasses.replace(TILES, fused_ffn=True)
FLAG = ("-DMK_FUSED_FFN=1",)


@pytest.fixture(scope="module")
def tiny():
    c = get_config("tiny")
    return c, random_weights(c, seed=7)


def test_no_down_tiles_and_the_next_layer_waits_on_gate_up():
    c = get_config("tinyllama-1.1b")
    prog = build_decode_program(c, TileShape(fused_ffn=True))
    assert not any(isinstance(i, Down) for i in prog.instructions)
    assert not any(n.startswith("down[") for n in prog.counters)
    n_gate = c.ffn // 22
    for ins in prog.instructions:
        if isinstance(ins, QkvHead) and ins.layer > 0 or isinstance(ins, Logits):
            assert prog.counters[ins.wait] == f"gateup[{ins.layer - 1}]" and ins.wait_count == n_gate
    assert {i.fused_down for i in prog.instructions if isinstance(i, GateUp)} == {1}
    assert {i.init_next for i in prog.instructions if isinstance(i, OProj)} == {1}
    default = build_decode_program(c)
    assert len(default.instructions) - len(prog.instructions) == c.n_layers * c.hidden // 16  # the Down tiles
    assert {i.fused_down for i in default.instructions if isinstance(i, GateUp)} == {0}
    assert {i.init_next for i in default.instructions if isinstance(i, OProj)} == {0}


def test_the_new_arguments_round_trip_in_free_words():
    prog = build_decode_program(get_config("tiny"), FUSED)
    words = prog.words()
    assert [deserialize(w) for w in words] == prog.instructions
    gate = [i for i, ins in enumerate(prog.instructions) if isinstance(ins, GateUp)]
    oproj = [i for i, ins in enumerate(prog.instructions) if isinstance(ins, OProj)]
    assert (words[gate, 8] == 1).all() and (words[oproj, 9] == 1).all()  # W_A2 of GateUp, W_A3 of OProj
    # the default's words carry 0 there: as before the fields existed
    plain = build_decode_program(get_config("tiny"), TILES).words()
    assert (plain[:, 8:16][[isinstance(i, GateUp) for i in build_decode_program(get_config("tiny"), TILES)
                            .instructions]] == 0).all()


def test_fused_ffn_must_be_a_bool():
    with pytest.raises(DagError, match="fused_ffn"):
        build_decode_program(get_config("tiny"), dataclasses.replace(TILES, fused_ffn=1))


def test_wd_is_packed_transposed_and_not_kept_twice(tiny):
    c, w = tiny
    fused = DecodeState.create(build_decode_program(c, FUSED), w)
    plain = DecodeState.create(build_decode_program(c, TILES), w)
    assert fused.t["wd"].shape == (c.n_layers, c.ffn, c.hidden) and fused.t["wd"].is_contiguous()
    assert torch.equal(fused.t["wd"][1], plain.t["wd"][1].t())
    assert torch.equal(transpose_down(w.layers[0]["w_down"]), w.layers[0]["w_down"].t())
    assert fused.weight_bytes() == plain.weight_bytes()


def test_the_tiles_read_every_weight_byte_once():
    """gate/up ranges (tile_weight_ranges) and the Down slices (down_slice_range) cover Wgu and the transposed Wd."""
    c = get_config("tinyllama-1.1b")
    prog = build_decode_program(c, TileShape(fused_ffn=True))
    covered: dict[int, list[tuple[int, int]]] = {}
    for ins, rng in zip(prog.instructions, tile_weight_ranges(prog)):
        if isinstance(ins, GateUp):
            for seg, off, n in (rng, down_slice_range(prog, ins)):
                covered.setdefault(seg, []).append((off, n))
    for seg, pieces in covered.items():
        pieces.sort()
        assert pieces[0][0] == 0 and all(a + n == b for (a, n), (b, _) in zip(pieces, pieces[1:]))
        assert pieces[-1][0] + pieces[-1][1] == 2 * 2 * c.ffn * c.hidden if seg >> 8 == 2 else 2 * c.ffn * c.hidden


@pytest.mark.parametrize("order", ["list", "random"])
def test_the_fused_interpreter_agrees_with_the_unfused_one(tiny, order):
    """40 steps (3 attention splits): every activation within fp32 reordering, the same greedy tokens."""
    c, w = tiny
    a = DecodeState.create(build_decode_program(c, TILES), w)
    b = DecodeState.create(build_decode_program(c, FUSED), w)
    prompt = torch.randint(0, c.vocab, (12,), generator=torch.Generator().manual_seed(5)).tolist()
    for s in (a, b):
        s.set_prompt(prompt)
    ia, ib = Interpreter(a, n_forced=len(prompt)), Interpreter(b, n_forced=len(prompt))
    for step in range(40):
        ia.run_steps(step, 1)
        ib.run_steps(step, 1, order=order, seed=step)
        for name in ("x", "x_mid", "h", "logits"):
            assert relative_error(b.t[name], a.t[name]) < 1e-5, (step, name)
    assert torch.equal(a.t["tokens"][:41], b.t["tokens"][:41])


def test_the_fused_interpreter_agrees_at_tinyllamas_widths():
    """hidden 2048, ffn 5632, 22-feature tiles (the GPU row's slices), 2 layers and a small vocabulary: 3 steps."""
    c = get_config("tinyllama-1.1b", n_layers=2, vocab=512, max_seq=64)
    w = random_weights(c, seed=1)
    states = [DecodeState.create(build_decode_program(c, TileShape(fused_ffn=f)), w) for f in (False, True)]
    for s in states:
        s.set_prompt([1, 2, 3, 4])
    runs = [Interpreter(s, n_forced=4) for s in states]
    for step in range(3):
        for run in runs:
            run.run_steps(step, 1)
        for name in ("x", "logits"):
            assert relative_error(states[1].t[name], states[0].t[name]) < 1e-5, (step, name)


def test_localise_charges_a_wrong_sum_to_the_layers_last_gate_up_tile(tiny):
    c, w = tiny
    state = DecodeState.create(build_decode_program(c, FUSED), w)
    state.set_prompt([3, 4])
    before = state.clone()
    Interpreter(state, n_forced=2).run_steps(0, 1)
    assert localise(before, state, 0, n_forced=2) is None
    state.t["x"][1, 5] += 1.0  # as if one reduction into layer 0's output were lost
    idx, ins, err = localise(before, state, 0, n_forced=2)
    assert isinstance(ins, GateUp) and ins.layer == 0 and ins.f0 + ins.features == c.ffn and err > 1e-3


def test_the_host_sets_the_flag_and_refuses_the_weight_plans():
    assert option_flags(FUSED) == FLAG and option_flags(TILES) == ()
    with pytest.raises(ValueError, match="fused_ffn"):
        option_flags(FUSED, FLAG)  # the tile shape owns the macro
    fused_ffn_check(TILES, stage_bytes=65536, prefetch_own=True)  # not fused: nothing to refuse
    fused_ffn_check(FUSED)
    for kw in ({"stage_bytes": 65536}, {"stage_next": True}, {"prefetch_own": ("gateup",)},
               {"prefetch_window": 0}, {"prefetch_ahead": 4}, {"ring_pages": 2}):
        with pytest.raises(ValueError, match=rf"fused_ffn=True\) cannot run with {next(iter(kw))}"):
            fused_ffn_check(FUSED, **kw)


def test_the_benchmark_rows():
    from benchmarks.decode import variant_rows

    rows = variant_rows()
    assert rows["mk_fused_ffn"] == {"tiles": TileShape(fused_ffn=True)}
    assert rows["mk_fused_ffn_b8"] == {"tiles": TileShape(fused_ffn=True), "build_flags": ("-DMK_FFN_DOWN_BATCH=8",)}
    option_flags(rows["mk_fused_ffn_b8"]["tiles"], rows["mk_fused_ffn_b8"]["build_flags"])  # not a tile option's macro


def test_a_fused_tile_is_a_gate_up_ticket_and_the_table_has_no_down_phase():
    ids = {1: "decode/core_loop", 2: "decode/gemm", 3: "decode/norm", 4: "decode/gemm/down_weights"}
    spec = [(1, 0, 100), (3, 100, 200), (2, 200, 1000), (4, 700, 990)]  # (region, start, end), CTA 1, warp 0
    rows = np.zeros(len(spec), dtype=INTERVAL_DTYPE)
    for i, (rid, start, end) in enumerate(spec):
        rows[i]["cta"], rows[i]["region_id"], rows[i]["coord"] = 1, rid, coordinate(7, 3)
        rows[i]["depth"] = ids[rid].count("/") - 1
        rows[i]["start"], rows[i]["end"], rows[i]["duration"] = start, end, end - start
    (t,) = timeline.tickets(rows, ids, n_layers=22)
    assert t["op"] == "gateup" and t["regions"] == {"norm": 100, "gemm": 800, "gemm/down_weights": 290}
    phases = timeline.phase_table([t])
    assert [p["op"] for p in phases] == ["gateup"]
    assert "gemm/down_weights 0.29" in timeline.format_summary(timeline.summary(phases))


def _spills(log: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores", log)}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    from megakernel.build import build

    out = {}

    def get(fused: bool, mode: int = 0):
        if (fused, mode) not in out:
            out[fused, mode] = build(mode, build_dir=tmp_path_factory.mktemp(f"f{int(fused)}m{mode}"),
                                     extra_flags=FLAG if fused else ())
        return out[fused, mode]

    return get


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_variant_compiles_within_128_registers(builds, mode):
    """nvcc 13.0, 2026-12-02: ffn_down_slice 0 spills; the worker's spill stores no more than the default's (36 / 24 B
    in modes 0 / 2; spill loads 88 vs 76 B in mode 0, 512 vs 468 in mode 2)."""
    fused, base = builds(True, mode), builds(False, mode)
    assert fused.registers() is not None and fused.registers() <= 128
    got, ref = _spills(fused.ptxas_log), _spills(base.ptxas_log)
    assert set(got) - set(ref) == {"_ZN2mk14ffn_down_sliceEPK13__nv_bfloat16iiPKfPf"}
    assert got["_ZN2mk14ffn_down_sliceEPK13__nv_bfloat16iiPKfPf"] == 0
    assert all(got[fn] <= ref[fn] for fn in ref), fused.ptxas_log


@needs_nvcc
def test_the_reductions_are_float4_and_only_in_the_fused_build(builds):
    from argus_rt.tools import tool_or_none
    from megakernel import sass_diff

    if tool_or_none("nvdisasm") is None:
        pytest.skip("needs nvdisasm")
    fused = sass_diff.functions(sass_diff.disassembly(builds(True).cubin))
    default = sass_diff.functions(sass_diff.disassembly(builds(False).cubin))
    reds = [line for line in fused["_ZN2mk14ffn_down_sliceEPK13__nv_bfloat16iiPKfPf"] if line.startswith("REDG")]
    assert len(reds) == 2 and all("F32x4" in line for line in reds), reds
    assert "_ZN2mk14ffn_down_sliceEPK13__nv_bfloat16iiPKfPf" not in default
    assert not any("F32x4" in line for body in default.values() for line in body)


@needs_nvcc
def test_only_the_fused_trace_build_records_the_down_slice_region(builds):
    """gemm/down_weights (a detail region of Down tiles) around the Down slice in the fused row's plain trace build."""
    (rid,) = [struct.pack("<I", r.id) for r in region_tree() if r.name == "decode/gemm/down_weights"]
    assert rid in Path(builds(True, 2).cubin).read_bytes()
    assert rid not in Path(builds(False, 2).cubin).read_bytes()
