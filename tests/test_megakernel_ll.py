"""Row 37 (megakernel/NOTES.md "Ready: row 37"): MK_LL_HANDOFF, flag-in-data hand-offs of x, x_mid and h
(csrc/megakernel/ll.cuh). On the CPU: the flag math (a launch's flags never equal any flag of an earlier launch, the
wrap bound), the LL buffer layout and the stuck report's element decoding, the instruction-word bit on exactly the
converted consumers, the row mk_ll, the default cubin unchanged with the flag at 0 (modes 0 and 2), the SASS holding
the 64-bit LL stores and 16-byte LL loads only under the flag, 128 registers and no more spill stores than
mk_down_pieces. GPU: tests/test_megakernel_fusions_gpu.py, the tests named *llhandoff* (FUSION_K=llhandoff)."""
import collections
import dataclasses
import re

import numpy as np
import pytest
import torch

from benchmarks.decode import DOWN_PIECES, LL_GATE, LL_HANDOFF, LL_SLEEP, variant_rows
from megakernel import instructions as I
from megakernel import runtime as R
from megakernel.dag import COMBINE_TILES, TileShape, build_decode_program
from megakernel.params import LL_PARAM_FIELDS, PARAM_BYTES, PARAM_FIELDS, pack_params, params_header
from tinyllama.config import get_config
from toolchain import cubin_sha256, megakernel_builds, needs_nvcc, skip_without_tools  # noqa: F401 (builds fixture)

LL_CUH = R.CSRC / "megakernel" / "ll.cuh"


def test_row_is_mk_down_pieces_plus_the_flag():
    rows = variant_rows()
    assert LL_HANDOFF == ("-DMK_LL_HANDOFF=1",)
    assert rows["mk_ll"] == {"tiles": TileShape(down_rows=8, attn_split_long=256), "build_flags": DOWN_PIECES + LL_HANDOFF}
    assert rows["mk_ll"]["tiles"] == rows["mk_down_pieces"]["tiles"] == dataclasses.replace(COMBINE_TILES, down_rows=8)
    assert rows["mk_ll"]["build_flags"][: len(rows["mk_down_pieces"]["build_flags"])] == rows["mk_down_pieces"]["build_flags"]
    assert R.ll_handoff(LL_HANDOFF) and not R.ll_handoff(()) and not R.ll_handoff(("-DMK_LL_HANDOFF=0",))
    assert R.ll_handoff(("-DMK_LL_HANDOFF",))


def _launch_flags(launches: list[int], start: int = 1):
    """Every (launch, flag) the host hands out for launches of the given step counts, and the resets."""
    base, out, resets = start, [], []
    for n in launches:
        first, reset, base = R.ll_launch_base(base, n)
        resets.append(reset)
        out.append(list(range(first, first + n)))
    return out, resets


def test_flags_never_repeat_across_launches_steps_and_positions():
    """A launch's flags (base + step - step_begin) are above every earlier launch's: re-run KV positions (a new
    generation, the benchmark's repeats), one-step launches and long ones alike; zero is never a flag."""
    launches = [1, 1, 64, 64, 3, 1, 257, 64]
    flags, resets = _launch_flags(launches)
    seen = set()
    for fl in flags:
        assert min(fl) >= 1 and not seen & set(fl)
        seen |= set(fl)
    assert not any(resets)
    assert [f[0] for f in flags] == list(np.cumsum([1] + launches[:-1]))
    # Within a launch each step has its own flag, and every layer of a step expects that step's: a stale element of
    # layer L (same step flag) cannot exist since each step writes each element once and the next step's flag differs.
    assert all(len(set(f)) == len(f) for f in flags)


def test_flags_wrap_by_zeroing_the_buffer():
    """The 32-bit flags run out after 2^32 - 1 steps in all: the launch that would pass the bound zeroes the buffer
    and starts at 1 (then every element is 0 = stale, never a flag of the new launch)."""
    top = R.LL_FLAG_MAX
    assert R.ll_launch_base(top, 1) == (top, False, top + 1)  # the last flag is still valid
    assert R.ll_launch_base(top + 1, 1) == (1, True, 2)
    assert R.ll_launch_base(top - 62, 64) == (1, True, 65)  # would end at top + 1
    assert R.ll_launch_base(top - 63, 64) == (top - 63, False, top + 1)
    flags, resets = _launch_flags([64, 64, 64], start=top - 100)
    assert resets == [False, True, False] and flags[1][0] == 1 and max(flags[0]) <= top
    with pytest.raises(ValueError):
        R.ll_launch_base(1, 0)


def test_layout_and_element_decoding():
    c = get_config("tinyllama-1.1b")
    lay = R.ll_layout(c)
    assert lay == {"x": (0, 23, 2048), "x_mid": (23 * 2048, 22, 2048), "h": (45 * 2048, 22, 5632)}
    assert R.ll_elements(c) * 8 == 1_728_512  # ~1.7 MB
    assert R.ll_element(c, 0) == ("x", 0, 0)
    assert R.ll_element(c, 23 * 2048 + 2048 + 5) == ("x_mid", 1, 5)
    assert R.ll_element(c, 45 * 2048 + 21 * 5632 + 5631) == ("h", 21, 5631)
    with pytest.raises(ValueError):
        R.ll_element(c, R.ll_elements(c))
    # ll.cuh computes the same offsets (ll_x, ll_xmid, ll_h) and every 16-byte pair it loads is aligned
    text = LL_CUH.read_text()
    assert "p.ll + (size_t)(p.n_layers + 1 + layer) * p.hidden" in text
    assert "p.ll + (size_t)(2 * p.n_layers + 1) * p.hidden + (size_t)layer * p.ffn" in text
    assert all(first % 2 == 0 and cols % 2 == 0 for first, _, cols in lay.values())


def test_the_constants_agree_with_ll_cuh():
    text = LL_CUH.read_text()
    assert int(re.search(r"constexpr int PF_LL_INPUT = (\d+);", text).group(1)) == R.PF_LL_INPUT
    assert int(re.search(r"constexpr int LL_COUNTER_BASE = (-?\d+);", text).group(1)) == R.LL_COUNTER_BASE
    assert R.PF_LL_INPUT & I.PF_SKIP_OWN == 0  # a bit of its own in W_PF_FLAGS


def test_the_bit_marks_exactly_the_converted_consumers():
    """QKV, gate/up, Down and Logits skip their counter wait (and poll the LL copy); Embed, attention, O-proj and
    Sample keep theirs; the prefetch plan's bits are untouched."""
    c = get_config("tinyllama-1.1b")
    prog = build_decode_program(c, TileShape(down_rows=8))
    words = R.prefetch_plan(prog, None, True)
    words[::3, I.W_PF_FLAGS] |= I.PF_SKIP_OWN
    out = R.ll_words(words)
    marked = collections.Counter(type(ins).__name__ for ins, w in zip(prog.instructions, out)
                                 if w[I.W_PF_FLAGS] & R.PF_LL_INPUT)
    L = c.n_layers
    assert marked == {"QkvHead": L * (c.n_heads + 2 * c.n_kv_heads) * 4, "GateUp": L * c.ffn // 22,
                      "Down": L * c.hidden // 8, "Logits": c.vocab // 64}
    assert (out[:, I.W_PF_FLAGS] & ~R.PF_LL_INPUT == words[:, I.W_PF_FLAGS]).all()
    assert (np.delete(out, I.W_PF_FLAGS, axis=1) == np.delete(words, I.W_PF_FLAGS, axis=1)).all()


def test_params_carry_the_ll_fields_only_in_ll_builds():
    text = params_header()
    body = text[text.index("struct Params {"): text.index("};")]
    assert body.index("#if defined(MK_LL_HANDOFF) && MK_LL_HANDOFF") > body.index(f" {PARAM_FIELDS[-1][0]};")
    assert f"sizeof(Params) == {PARAM_BYTES + 16}" in text and f"sizeof(Params) == {PARAM_BYTES}" in text
    values = {name: (1.5 if ctype == "double" else 8 * i) for i, (name, ctype) in enumerate(PARAM_FIELDS + LL_PARAM_FIELDS)}
    blob = pack_params(values, PARAM_FIELDS + LL_PARAM_FIELDS)
    assert len(blob) == PARAM_BYTES + 16 and int.from_bytes(blob[-8:], "little") == values["ll_base"]
    assert pack_params({k: v for k, v in values.items() if k not in ("ll", "ll_base")}) == blob[:PARAM_BYTES]


def _stub_decoder(tiles, flags):
    """A MegakernelDecoder on CPU tensors with a stub module (as tests/test_megakernel_split_auto.py builds one)."""
    from megakernel.interpreter import SamplingParams
    from megakernel.runtime import LaunchInfo, MegakernelDecoder
    from megakernel.state import DecodeState
    from tinyllama.weights import random_weights

    c = get_config("tiny")
    prog = build_decode_program(c, tiles)
    dec = object.__new__(MegakernelDecoder)
    dec.config, dec.tiles, dec.program, dec.launched, dec.device = c, tiles, prog, prog, torch.device("cpu")
    dec.prefetch_window, dec.prefetch_own = None, True
    dec.ll_on = R.ll_handoff(flags)
    dec.state = DecodeState.create(prog, random_weights(c, seed=0))
    dec.forms = dec._instruction_words(prog)
    dec.params = torch.zeros(PARAM_BYTES + (16 if dec.ll_on else 0), dtype=torch.uint8)
    if dec.ll_on:
        dec.ll = torch.zeros(R.ll_elements(c), dtype=torch.int64)
    dec.ticket, dec.spread_words = torch.zeros(1, dtype=torch.int32), 0
    dec.error, dec.stuck = torch.zeros(10, dtype=torch.int32), torch.full((2, 8), -1, dtype=torch.int32)
    dec.step_ns = torch.zeros(4, dtype=torch.int64)
    dec.n_forced, dec.timeout_ns, dec.prefetch_ahead, dec.stage_bytes = 1, 10**9, 0, 0
    dec.sampling, dec.dynamic_smem = SamplingParams(), 0
    dec.launch_info = LaunchInfo(grid=2, workers=1, threads=256, sms=1, blocks_per_sm=1)
    dec.module = type("Stub", (), {"launch": lambda self, *a, **kw: None})()
    return dec


def test_the_runtime_hands_each_launch_its_base_and_names_a_stuck_element():
    tiles = TileShape(o_rows=16, gate_features=16, down_rows=16, logits_rows=64, attn_split=16)
    dec = _stub_decoder(tiles, LL_HANDOFF)
    base_at = 8 * len(PARAM_FIELDS) + 8
    bases = []
    for first, n in ((0, 5), (5, 1), (0, 3)):  # the last one re-runs positions 0..2 (a new generation)
        dec.launch(first, n)
        bases.append(int(dec.params[base_at: base_at + 8].view(torch.int64)))
    assert bases == [1, 6, 7] and dec.ll_next_base == 10
    assert int(dec.params[base_at - 8: base_at].view(torch.int64)) == dec.ll.data_ptr()
    assert all((w[:, I.W_PF_FLAGS] & R.PF_LL_INPUT).any() for w in dec.forms.values())
    # a stuck LL wait: QKV tile 3 of layer 1 on element 5 of x[1]
    from megakernel.instructions import QkvHead
    from megakernel.runtime import MegakernelError

    idx = [i for i, ins in enumerate(dec.program.instructions) if isinstance(ins, QkvHead) and ins.layer == 1][3]
    element = R.ll_layout(dec.config)["x"][0] + dec.config.hidden + 5
    row = [40, 2, idx, QkvHead.OPCODE, 1, R.LL_COUNTER_BASE - element, 3, 2]
    dec.error[:] = torch.tensor([1, *row[:6], 3, 2, 1], dtype=torch.int32)
    dec.stuck[1] = torch.tensor(row, dtype=torch.int32)
    with pytest.raises(MegakernelError, match=rf"instruction {idx} QkvHead\(layer=1.*flag-in-data copy of x\[1\]\[5\] "
                                              r"\(the edge of counter 'down\[0\]'\) for flag 3, it held 2"):
        dec.check_error()
    # without the flag: no LL fields, no bit, the default's words
    plain = _stub_decoder(tiles, ())
    plain.launch(0, 2)
    assert plain.ll is None and not any((w[:, I.W_PF_FLAGS] & R.PF_LL_INPUT).any() for w in plain.forms.values())


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_default_cubin_is_the_flag_at_0(builds, mode):
    assert cubin_sha256(builds(mode, ("-DMK_LL_HANDOFF=0",))) == cubin_sha256(builds(mode))
    assert cubin_sha256(builds(mode, DOWN_PIECES + ("-DMK_LL_HANDOFF=0",))) == cubin_sha256(builds(mode, DOWN_PIECES))
    assert cubin_sha256(builds(mode, DOWN_PIECES + LL_HANDOFF)) != cubin_sha256(builds(mode, DOWN_PIECES))


def _kernel_spills(log: str) -> tuple[int, int]:
    m = re.search(r"Function properties for argus_megakernel\n\s+\d+ bytes stack frame, (\d+) bytes spill stores, "
                  r"(\d+) bytes spill loads", log)
    return int(m.group(1)), int(m.group(2))


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_registers_and_spills(builds, mode):
    """128 registers in the timed and the trace build; the kernel's spill stores no more than mk_down_pieces' (nvcc
    13.0, 2026-12-02: mode 0 24 B both, spill loads 44 -> 192 B; mode 2 32 -> 20 B, loads 264 -> 224 B); the LL
    helpers spill nothing."""
    base, r = builds(mode, DOWN_PIECES), builds(mode, DOWN_PIECES + LL_HANDOFF)
    assert r.registers() == base.registers() == 128
    assert _kernel_spills(r.ptxas_log)[0] <= _kernel_spills(base.ptxas_log)[0], r.ptxas_log
    helpers = ("ll_give_up", "ll_wait", "ll_residual", "load_rmsnorm_ll", "load_vector_ll")
    ll_fns = {m.group(1): tuple(map(int, m.groups()[1:])) for m in re.finditer(
        r"Function properties for (\S+)\n\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
        r"loads", r.ptxas_log) if any(h in m.group(1) for h in helpers)}
    assert len(ll_fns) == len(helpers) and all(v == (0, 0, 0) for v in ll_fns.values()), ll_fns


def _ops(fn: list[str]) -> collections.Counter:
    return collections.Counter(m.group(0) for line in fn for m in [re.search(r"\b(LDG|STG)\.E\.(64|128)\.STRONG\.GPU\b", line)] if m)


@needs_nvcc
def test_the_sass_has_the_ll_accesses_only_under_the_flag(builds):
    """Default (mk_down_pieces): no 64-bit strong store anywhere, the plain readers load_rmsnorm / load_vector. With
    the flag: Embed's LL pairs (16-byte strong stores) and gate/up's h (64-bit) in the kernel, the residual's 64-bit
    LL load and store, the readers' 16-byte LL loads (4 per chunk, 12 pairs in flight in load_vector_ll), and the plain
    readers gone (every reader of x, x_mid and h reads LL)."""
    from megakernel import sass_diff

    skip_without_tools("nvdisasm")
    base = sass_diff.functions(sass_diff.disassembly(builds(0, DOWN_PIECES).cubin))
    ll = sass_diff.functions(sass_diff.disassembly(builds(0, DOWN_PIECES + LL_HANDOFF).cubin))
    assert not any(_ops(fn)["STG.E.64.STRONG.GPU"] or _ops(fn)["STG.E.128.STRONG.GPU"] for fn in base.values())
    assert sass_diff.find_function(base, "load_rmsnorm")[0] and sass_diff.find_function(base, "load_vector")[0]
    names = {n for n in ll}
    assert not any("load_rmsnorm" in n and "_ll" not in n for n in names)
    assert not any("load_vector" in n and "_ll" not in n for n in names)
    kernel = _ops(ll["argus_megakernel"])
    assert kernel["STG.E.128.STRONG.GPU"] >= 4 and kernel["STG.E.64.STRONG.GPU"] >= 1
    _, residual = sass_diff.find_function(ll, "ll_residual")
    assert _ops(residual)["LDG.E.64.STRONG.GPU"] >= 1 and _ops(residual)["STG.E.64.STRONG.GPU"] >= 1
    _, norm = sass_diff.find_function(ll, "load_rmsnorm_ll")
    _, vec = sass_diff.find_function(ll, "load_vector_ll")
    assert _ops(norm)["LDG.E.128.STRONG.GPU"] >= 4 and _ops(vec)["LDG.E.128.STRONG.GPU"] >= 12
    # the LL readers never call the counter wait: their only poll is their data (ll_wait, on a stale pair)
    for fn in (norm, vec, residual):
        assert sass_diff.calls(fn, "wait_counter") == 0 and sass_diff.calls(fn, "ll_wait") >= 1
    assert not any(re.search(r"\bRED\b", line) for fn in (norm, vec, residual) for line in fn)


# Rows 37b-c (megakernel/NOTES.md "Row 37 measured ..., and rows 37b-c prepared"): mk_ll_sleep (MK_LL_SPIN_NS=256) and
# mk_ll_gate (MK_LL_HANDOFF=2), and the trace fix (ll.cuh "ll_wait_converged"). GPU: the *llhandoff* tests run every
# LL row (tests/test_megakernel_fusions_gpu.py: LL_ROWS).
LL_ROWS = ("mk_ll", "mk_ll_sleep", "mk_ll_gate")


def test_rows_37b_c_are_mk_ll_with_one_change():
    rows = variant_rows()
    assert LL_SLEEP == ("-DMK_LL_SPIN_NS=256",) and LL_GATE == ("-DMK_LL_HANDOFF=2",)
    assert rows["mk_ll_sleep"] == {"tiles": rows["mk_ll"]["tiles"], "build_flags": rows["mk_ll"]["build_flags"] + LL_SLEEP}
    assert rows["mk_ll_gate"] == {"tiles": rows["mk_ll"]["tiles"], "build_flags": DOWN_PIECES + LL_GATE}
    assert R.ll_handoff(LL_GATE) and R.ll_handoff(LL_HANDOFF + LL_SLEEP) and not R.ll_handoff(LL_SLEEP)


def test_the_gate_element_is_the_last_producer_tile_in_ticket_order():
    """ll.cuh ll_gate_element polls the last element of the input vector: for every producer phase of x, x_mid and
    h, the tile that writes it is the phase's last instruction (the host lays the tiles out in ascending rows), on the
    full model with the rows' tiles and on the tiny model."""
    from megakernel.instructions import Down, GateUp, OProj

    for name, tiles in (("tinyllama-1.1b", variant_rows()["mk_ll_gate"]["tiles"]), ("tiny", TileShape(down_rows=8))):
        c = get_config(name)
        prog = build_decode_program(c, tiles)
        for cls, first, count, n in ((Down, "row0", "rows", c.hidden), (OProj, "row0", "rows", c.hidden),
                                     (GateUp, "f0", "features", c.ffn)):
            for layer in range(c.n_layers):
                tiles_l = [(i, ins) for i, ins in enumerate(prog.instructions) if isinstance(ins, cls) and ins.layer == layer]
                last = [i for i, ins in tiles_l if getattr(ins, first) + getattr(ins, count) == n]
                assert last == [tiles_l[-1][0]], (name, cls.__name__, layer)


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_rows_37b_c_cubins(builds, mode):
    """The sleep at 0 is mk_ll's cubin byte for byte; the sleep and the gate are other cubins; none builds the default."""
    ll = cubin_sha256(builds(mode, DOWN_PIECES + LL_HANDOFF))
    assert cubin_sha256(builds(mode, DOWN_PIECES + LL_HANDOFF + ("-DMK_LL_SPIN_NS=0",))) == ll
    sleep, gate = cubin_sha256(builds(mode, DOWN_PIECES + LL_HANDOFF + LL_SLEEP)), cubin_sha256(builds(mode, DOWN_PIECES + LL_GATE))
    assert len({ll, sleep, gate, cubin_sha256(builds(mode, DOWN_PIECES))}) == 4


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
@pytest.mark.parametrize("row", LL_ROWS[1:])
def test_rows_37b_c_registers_and_spills(builds, mode, row):
    """As test_registers_and_spills for mk_ll (nvcc 13.0, 2026-12-02: both rows mode 0 24 B stores / 192 B loads,
    mode 2 20 / 224 B, mk_ll's): 128 registers, no more spill stores than mk_down_pieces, the LL helpers spill-free."""
    base, r = builds(mode, DOWN_PIECES), builds(mode, variant_rows()[row]["build_flags"])
    assert r.registers() == base.registers() == 128
    assert _kernel_spills(r.ptxas_log)[0] <= _kernel_spills(base.ptxas_log)[0], r.ptxas_log
    helpers = ("ll_give_up", "ll_wait", "ll_residual", "load_rmsnorm_ll", "load_vector_ll")
    for h in helpers:
        m = re.search(rf"Function properties for (\S*{len(h)}{h}E\S*)\n\s+(\d+) bytes stack frame, (\d+) bytes spill "
                      r"stores, (\d+) bytes spill loads", r.ptxas_log)
        assert m and m.groups()[1:] == ("0", "0", "0"), (h, m and m.groups())


def _sass(builds, mode, flags):
    from megakernel import sass_diff

    skip_without_tools("nvdisasm")
    return sass_diff, sass_diff.functions(sass_diff.disassembly(builds(mode, flags).cubin))


@needs_nvcc
def test_the_sleep_is_in_the_ll_wait_only_and_the_gate_in_the_worker(builds):
    """mk_ll_sleep: a NANOSLEEP in ll_wait, mk_ll's ll_wait has none, and the counter wait spins in both (no
    NANOSLEEP outside ll_wait). mk_ll_gate: the kernel itself calls ll_wait (thread 0's gate), mk_ll's kernel does
    not (its LL polls are in the helpers)."""
    sd, ll = _sass(builds, 0, DOWN_PIECES + LL_HANDOFF)
    _, sleep = _sass(builds, 0, DOWN_PIECES + LL_HANDOFF + LL_SLEEP)
    _, gate = _sass(builds, 0, DOWN_PIECES + LL_GATE)

    def sleeps(fns, where):
        return sum("NANOSLEEP" in line for n, fn in fns.items() if where(n) for line in fn)

    is_wait = lambda n: "7ll_waitE" in n  # noqa: E731
    assert sleeps(sleep, is_wait) >= 1 and sleeps(ll, is_wait) == 0
    assert sleeps(sleep, lambda n: not is_wait(n)) == sleeps(ll, lambda n: not is_wait(n))
    assert sd.calls(gate["argus_megakernel"], "ll_wait") >= 1 and sd.calls(ll["argus_megakernel"], "ll_wait") == 0


@needs_nvcc
@pytest.mark.parametrize("mode", [2])
@pytest.mark.parametrize("flags", [LL_HANDOFF, LL_GATE], ids=["mk_ll", "mk_ll_gate"])
def test_the_warp_is_converged_after_every_ll_wait(builds, mode, flags):
    """The trace fix (trace builds only: ll.cuh MK_LL_CONVERGE; the timed mk_ll is the cubin measured at 18:26), as
    far as the SASS shows it: in each LL helper every CALL to ll_wait is followed, before any
    other CALL, by a BSYNC (the compiler's reconvergence of the divergent `if (!ll_ready) v = ll_wait(...)`), and the
    helper's last ll_wait call by a full-mask __syncwarp (WARPSYNC.ALL, or ptxas' BRA.CONV test of 0xffffffff with
    its WARPSYNC.COLLECTIVE path). Whether the hardware then runs the warp as one group at the caller's next marker
    is not a property of the instruction stream: only the GPU's trace decode shows it."""
    sd, fns = _sass(builds, mode, DOWN_PIECES + flags)
    for h in ("ll_residual", "load_rmsnorm_ll", "load_vector_ll"):
        _, fn = sd.find_function(fns, h)
        at = [i for i, line in enumerate(fn) if line.startswith("CALL") and "7ll_waitE" in line]
        assert at, h
        for i in at:
            nxt = next((j for j in range(i + 1, len(fn)) if fn[j].startswith(("CALL", "BSYNC", "RET"))), None)
            assert nxt is not None and fn[nxt].startswith("BSYNC"), (h, i, fn[i: i + 4])
        tail = fn[at[-1]:]
        full = any(line.startswith("WARPSYNC.ALL") for line in tail) or any(
            line.startswith("WARPSYNC.COLLECTIVE") for line in tail) and any("0xffffffff" in line for line in tail)
        assert full, (h, tail[-20:])
