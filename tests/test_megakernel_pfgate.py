"""Row 45 on the CPU (megakernel/NOTES.md "Ready: row 45"; MegakernelDecoder(prefetch_gate=...) -> MK_PF_GATE=1,
benchmarks/decode.py mk_pfgate_*): the words of the gated prefetch plan (runtime.gate_plan) for every split program of
the default tiles, the refusals, and (with nvcc) the builds: the flag at 0 the same cubin as without it, the flag
build's registers and spills no worse than the default's, and its SASS (gate_then_prefetch: a counter wait, then L2 bulk
prefetches). GPU: tests/test_megakernel_pfgate_gpu.py."""
import re

import numpy as np
import pytest

import megakernel.instructions as I
from benchmarks.decode import variant_rows
from megakernel.dag import NOEARLY_TILES, build_decode_program, default_tiles
from megakernel.runtime import check_gates, prefetch_plan, tile_weight_ranges
from tinyllama.config import get_config
from toolchain import (  # noqa: F401  (megakernel_builds: the fixture)
    cubin_sha256,
    main_spills,
    megakernel_builds,
    needs_nvcc,
    noearly_tile_flags,
    skip_without_tools,
)

GATE = (("oproj", "qkv", None), ("gateup", "attn", 64 << 10))


def _programs():
    c = get_config("tinyllama-1.1b", max_seq=1152)
    prog = build_decode_program(c, default_tiles(c))
    return prog.split_programs or {None: prog}


def test_the_rows():
    rows = variant_rows()
    assert rows["mk_pfgate_o"] == {"tiles": NOEARLY_TILES, "prefetch_gate": (("oproj", "qkv", None),)}
    assert rows["mk_pfgate_og"]["prefetch_gate"] == GATE
    assert rows["mk_pfgate_oga"]["prefetch_gate"] == (("oproj", "qkv", None), ("gateup", "attn", None))
    gated = [name for name, row in rows.items() if "prefetch_gate" in row]
    assert {"mk_pfgate_o_kv", "mk_pfgate_o_pieces", "mk_pfgate_o_kv_pieces"} < set(gated)
    for name in gated:
        check_gates(rows[name]["prefetch_gate"])
    # row 45b's pieces rows: 8-row O-proj tiles with no ticket-time head prefetch, so the gate covers the whole tile
    for name in ("mk_pfgate_o_pieces", "mk_pfgate_o_kv_pieces"):
        assert rows[name]["tiles"].o_rows == 8 and "oproj" not in rows[name]["prefetch_own"]
        assert "-DMK_O_PIECES=1" in rows[name]["build_flags"]


@pytest.mark.parametrize("key", sorted(_programs(), key=str))
def test_gate_words_name_the_layer_counter_and_its_count(key):
    """Every O-proj tile's gate is qkv[its layer] with the QKV tiles per layer as count; every gate/up tile's is
    attn[its layer] with the count O-proj waits for in this program (it differs between split programs); the
    gated lengths are the tile's bytes (None) or 64 KiB; no other word changes."""
    prog = _programs()[key]
    plain, gated = prefetch_plan(prog, None, True), prefetch_plan(prog, None, True, GATE)
    ops, layers = gated[:, I.W_OPCODE], gated[:, I.W_LAYER]
    qkv_per_layer = int(np.sum((ops == I.QkvHead.OPCODE) & (layers == 0)))
    o_wait = {int(l): int(w) for l, w in zip(layers[ops == I.OProj.OPCODE], gated[ops == I.OProj.OPCODE, I.W_WAIT_COUNT])}
    ranges = tile_weight_ranges(prog)
    for i in range(len(gated)):
        word, flags = int(gated[i, I.W_PF_GATE]), int(gated[i, I.W_PF_FLAGS])
        ctr, count = word >> I.PF_GATE_COUNT_BITS, word & ((1 << I.PF_GATE_COUNT_BITS) - 1)
        length = (flags >> I.PF_GATE_LEN_SHIFT) * 16
        assert flags & 0xFF == plain[i, I.W_PF_FLAGS]
        if ops[i] == I.OProj.OPCODE:
            assert (prog.counters[ctr], count, length) == (f"qkv[{layers[i]}]", qkv_per_layer, ranges[i][2])
        elif ops[i] == I.GateUp.OPCODE:
            assert (prog.counters[ctr], count, length) == (f"attn[{layers[i]}]", o_wait[int(layers[i])], 64 << 10)
        else:
            assert word == 0 and flags == plain[i, I.W_PF_FLAGS]
    assert np.array_equal(np.delete(gated, [I.W_PF_GATE, I.W_PF_FLAGS], axis=1),
                          np.delete(plain, [I.W_PF_GATE, I.W_PF_FLAGS], axis=1))
    assert not plain[:, I.W_PF_GATE].any()


@pytest.mark.parametrize("gate, match", [
    ((("qkv", "qkv", None),), "op 'qkv' is unknown"),
    ((("oproj", "qkv", None), ("oproj", "qkv", None)), "repeated"),
    ((("oproj", "attn", None),), r"before oproj's dependency \(attn\); valid: \['qkv'\]"),
    ((("gateup", "oproj", None),), r"valid: \['qkv', 'attn'\]"),
    ((("down", "down", None),), "valid: \\['qkv', 'attn', 'oproj'\\]"),
    ((("oproj", "qkv", 24),), "positive multiple of 16"),
    ((("oproj", "qkv", 0),), "positive multiple of 16"),
    ((("oproj", "qkv"),), "entries are"),
])
def test_bad_gates_are_refused(gate, match):
    with pytest.raises(ValueError, match=match):
        check_gates(gate)


def test_gates_with_staging_are_refused_before_any_gpu_work(monkeypatch):
    from megakernel import runtime
    from tinyllama.weights import random_weights

    monkeypatch.setattr(runtime, "build", lambda *a, **k: pytest.fail("built despite bad settings"))
    weights = random_weights(get_config("tiny"), seed=0, device="cpu")
    with pytest.raises(ValueError, match="prefetch_gate prefetches into L2 from the tile's start"):
        runtime.MegakernelDecoder(weights, prefetch_gate=GATE, stage_bytes=4096, build_flags=("-DMK_DOWN_PIECES=0",))
    with pytest.raises(ValueError, match="op 'logits' is unknown"):
        runtime.MegakernelDecoder(weights, prefetch_gate=(("logits", "qkv", None),))


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_flag_off_is_the_same_cubin(builds, mode):
    assert cubin_sha256(builds(mode, noearly_tile_flags())) == cubin_sha256(builds(mode, noearly_tile_flags(("-DMK_PF_GATE=0",))))


@needs_nvcc
@pytest.mark.parametrize("gate", [1, 2], ids=["l2", "stage"])
@pytest.mark.parametrize("mode", [0, 2])
def test_the_flag_build_spills_no_more(builds, mode, gate):
    """ptxas 2026-12-03: 128 registers and the default build's spills (mode 0: 20 B stores, 44 B loads; mode 2:
    28 / 264), with gate_then_prefetch out of line; MK_PF_GATE=1 (row 45) and 2 (row 46)."""
    gated, plain = builds(mode, noearly_tile_flags((f"-DMK_PF_GATE={gate}",))), builds(mode, noearly_tile_flags())
    assert gated.registers() == 128 and "warning" not in gated.ptxas_log.lower(), gated.ptxas_log
    assert main_spills(gated.ptxas_log) == main_spills(plain.ptxas_log)


@needs_nvcc
@pytest.mark.parametrize("gate, issues, never", [(1, "UBLKPF", None), (2, "UBLKCP", "UBLKPF")], ids=["l2", "stage"])
def test_the_gate_waits_then_moves_the_bytes(builds, gate, issues, never):
    """gate_then_prefetch calls the counter wait, then MK_PF_GATE=1 issues the L2 bulk prefetch (UBLKPF), 2 the bulk
    copy into shared memory (UBLKCP) and no prefetch; the default build has no such function."""
    skip_without_tools("nvdisasm")
    from megakernel.sass_diff import disassembly, functions

    fns = functions(disassembly(builds(0, noearly_tile_flags((f"-DMK_PF_GATE={gate}",))).cubin))
    body = next(v for k, v in fns.items() if "gate_then_prefetch" in k)
    assert any(i.startswith(issues) for i in body)
    assert never is None or not any(i.startswith(never) for i in body)
    assert any(i.startswith("CALL") for i in body)  # the counter wait (wait_counter, out of line)
    assert not any("gate_then_prefetch" in k for k in functions(disassembly(builds(0, noearly_tile_flags()).cubin)))


@needs_nvcc
def test_a_bad_value_does_not_compile(builds):
    from megakernel.build import BuildError

    with pytest.raises(BuildError, match="MK_PF_GATE is 0 .off., 1"):
        builds(0, noearly_tile_flags(("-DMK_PF_GATE=3",)))


# ---- row 46: the gated bytes staged in shared memory (gate_stage_bytes -> MK_PF_GATE=2) ----

def test_the_stage_rows():
    rows = variant_rows()
    for name in ("mk_stgate_o", "mk_stgate_o_kv", "mk_stgate_og_kv"):
        row = rows[name]
        assert row["gate_stage_bytes"] == 64 << 10 and "oproj" not in row["prefetch_own"]
        assert row["prefetch_gate"][0] == ("oproj", "qkv", None)
        check_gates(row["prefetch_gate"])
    assert rows["mk_stgate_og_kv"]["prefetch_gate"][1] == ("gateup", "attn", 64 << 10)


@pytest.mark.parametrize("kw, match", [
    ({"gate_stage_bytes": 65536}, "with a prefetch_gate"),
    ({"gate_stage_bytes": 1000, "prefetch_gate": (("oproj", "qkv", None),)}, "multiple of 4096"),
    ({"gate_stage_bytes": 65536, "prefetch_gate": (("down", "qkv", None),)}, "cannot stage Down tiles"),
])
def test_bad_stage_gates_are_refused_before_any_gpu_work(kw, match, monkeypatch):
    from megakernel import runtime
    from tinyllama.weights import random_weights

    monkeypatch.setattr(runtime, "build", lambda *a, **k: pytest.fail("built despite bad settings"))
    weights = random_weights(get_config("tiny"), seed=0, device="cpu")
    with pytest.raises(ValueError, match=match):
        runtime.MegakernelDecoder(weights, **kw)


@needs_nvcc
def test_the_stage_gate_refuses_the_other_stage_users(builds):
    from megakernel.build import BuildError

    with pytest.raises(BuildError, match="MK_PF_GATE=2 stages into the stage buffer"):
        builds(0, noearly_tile_flags(("-DMK_PF_GATE=2", "-DMK_RING=2", "-DMK_DOWN_PIECES=0")))


def test_gate_constants_agree_with_the_kernel():
    from megakernel.build import CSRC

    text = (CSRC / "megakernel" / "opcodes.cuh").read_text()
    assert int(re.search(r"#define PF_GATE_LEN_SHIFT (\d+)", text).group(1)) == I.PF_GATE_LEN_SHIFT
    assert int(re.search(r"#define PF_GATE_COUNT_BITS (\d+)", text).group(1)) == I.PF_GATE_COUNT_BITS
