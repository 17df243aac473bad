"""Chain rows of benchmarks/decode.py (megakernel/NOTES.md "Ready for the next device run"): the batched GEMV
only in the QKV and/or O-proj tiles (mk_batch_qkv, mk_batch_o, mk_batch_chain), the codegen control
mk_chain_ctl, and two pollers per dependency wait (mk_poll2). On the CPU: each row is build flags only
(the default instruction stream, so the interpreter's reference is the default one), and with nvcc that
each compiles within the register cap without op spills, that the default build contains none of their
code, and (with nvdisasm) that the batched function issues its whole block of weight loads before using
any while the plain loop keeps 2 in flight. The ticket rows: the default's SM-spread rank (row 23) is in no
build without it (mk_nospread, mk_dynamic). GPU: tests/test_megakernel_fusions_gpu.py (FUSION_K=chain, spread)."""
import re

import pytest

from benchmarks.decode import BATCH_O, BATCH_QKV, DOWN_PLAIN, NO_SPREAD, POLL2, variant_rows
from megakernel.dag import TileShape, build_decode_program
from megakernel.runtime import kernel_limits, option_flags, sm_spread, spread_words
from tinyllama.config import get_config
from toolchain import needs_nvcc

ROWS = {
    "mk_batch_qkv": BATCH_QKV,
    "mk_batch_o": BATCH_O,
    "mk_batch_chain": BATCH_QKV + BATCH_O,
    "mk_chain_ctl": BATCH_QKV + BATCH_O + ("-DMK_BATCH_PLAIN=1",),
    "mk_poll2": POLL2,
}
# Calls of the two GEMV functions from the worker loop: (gemv_tile, gemv_tile_batch); each op calls its GEMV
# twice (the staged remainder and the plain path). Ops: QKV, O-proj, gate/up, logits; Down streams its pieces inline
# since row 36 (MK_DOWN_PIECES=1, the default: tests/test_megakernel_down_pieces.py; the flag at 0 adds Down's 2).
CALLS = {"default": (8, 0), "mk_batch_qkv": (6, 2), "mk_batch_o": (6, 2), "mk_batch_chain": (4, 4),
         "mk_chain_ctl": (4, 4), "mk_poll2": (8, 0)}
VARIANT_FUNCTIONS = ("gemv_tile_batch", "wait_counter_pair", "poll_helper")
DYNAMIC = ("-DMK_STATIC_TICKETS=0",)
TICKET_ROWS = {"mk_nospread": NO_SPREAD + DOWN_PLAIN, "mk_dynamic": DYNAMIC}  # builds without the default's SM-spread rank


def test_rows_are_build_flags_on_the_default_program():
    from benchmarks.decode import EARLY_CONFLICTS
    from megakernel.dag import NOEARLY_TILES

    rows = variant_rows()
    for name, flags in ROWS.items():
        # flags the early build refuses (MK_BATCH_*, MK_POLL2): on the default before row 48 (NOEARLY_TILES)
        want = {"tiles": NOEARLY_TILES, "build_flags": flags} if name in EARLY_CONFLICTS else {"build_flags": flags}
        assert rows[name] == want, name
        option_flags(TileShape(), flags)  # none of them is a flag the tile shape owns
    c = get_config("tiny")
    # no tile change: the kernel runs the default instruction stream, which the interpreter checks
    assert build_decode_program(c, TileShape()).instructions == build_decode_program(c, TileShape()).instructions


def test_the_default_spreads_and_the_ticket_rows_do_not():
    """Row 23 (NOTES.md): the default orders its static tickets by the SM-spread rank, so the host zeroes a
    registration area before each launch; mk_nospread (the default before, 32-feature gate/up tiles) and
    mk_dynamic (the counter: megakernel.cu's MK_SM_SPREAD follows MK_STATIC_TICKETS) have none."""
    rows = variant_rows()
    # mk_nospread keeps the Down of its time (16-row tiles, gemv_tile: -DMK_DOWN_PIECES=0), mk_g32 the default's (row 36)
    assert rows["mk_nospread"] == {"tiles": TileShape(gate_features=32), "build_flags": NO_SPREAD + DOWN_PLAIN}
    assert rows["mk_g32"] == {"tiles": TileShape(gate_features=32, down_rows=8)}  # the spread alone, 32-feature tiles
    from megakernel.dag import NOEARLY_TILES

    assert rows["mk_dynamic"] == {"tiles": NOEARLY_TILES, "build_flags": DYNAMIC}  # the early tiles need static tickets
    assert TileShape().gate_features == 22 and get_config("tinyllama-1.1b").ffn // 22 == 256
    assert sm_spread(()) and sm_spread(("-DMK_STATIC_TICKETS=1",)) and sm_spread(("-DMK_SM_SPREAD",))
    assert not sm_spread(NO_SPREAD) and not sm_spread(DYNAMIC)
    assert spread_words((), 264) == 1 + kernel_limits()["SPREAD_SMS"] + 263
    assert spread_words(NO_SPREAD, 264) == spread_words(DYNAMIC, 264) == 0


def _spills(log: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores", log)}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    from megakernel.build import build

    out = {}

    def get(name: str):
        if name not in out:
            flags = (ROWS | TICKET_ROWS).get(name, ())
            out[name] = build(0, build_dir=tmp_path_factory.mktemp(name), extra_flags=flags)
        return out[name]

    return get


@needs_nvcc
@pytest.mark.parametrize("name", ["default", *ROWS])
def test_row_compiles_without_op_spills(builds, name):
    r = builds(name)
    spills = _spills(r.ptxas_log)
    assert spills and r.registers() is not None and r.registers() <= 128
    # Only the worker entry and the (unused at 2 heads per tile) 8-head attention instance may spill; and with rows
    # 58-59's combine, mk_poll2's load_attention_combined, 8 B (nvcc 13.0, 2026-12-04: 0 with row 58 alone).
    allowed = {"load_attention_combined": 8} if name == "mk_poll2" else {}
    assert all(n <= next((b for f, b in allowed.items() if f in fn), 0) for fn, n in spills.items()
               if "argus_megakernel" not in fn and "ILi8E" not in fn), r.ptxas_log
    assert sum(spills.values()) <= 96, r.ptxas_log
    present = {f for f in VARIANT_FUNCTIONS if any(f"{len(f)}{f}E" in fn for fn in spills)}
    want = {"default": set(), "mk_poll2": {"wait_counter_pair", "poll_helper"}}.get(name, {"gemv_tile_batch"})
    assert present == want, f"{name}: variant functions compiled in: {present}"


@needs_nvcc
@pytest.mark.parametrize("name", ["default", *ROWS])
def test_gemv_loads_in_flight(builds, name):
    """The property the rows test on the GPU: the batched function issues (nearly) all 16 weight loads of a
    block before its first FP use, the plain loop 2 (SASS of 2026-12-01 12:47, NOTES.md row 12)."""
    from argus_rt.tools import tool_or_none
    from megakernel import sass_diff

    if tool_or_none("nvdisasm") is None:
        pytest.skip("needs nvdisasm")

    fns = sass_diff.functions(sass_diff.disassembly(builds(name).cubin))
    loop = fns["argus_megakernel"]
    assert (sass_diff.calls(loop, "gemv_tile"), sass_diff.calls(loop, "gemv_tile_batch")) == CALLS[name]
    _, plain = sass_diff.find_function(fns, "gemv_tile")
    assert sass_diff.loads_before_first_use(plain)[0] <= 2
    if CALLS[name][1]:
        _, batch = sass_diff.find_function(fns, "gemv_tile_batch")
        before, total = sass_diff.loads_before_first_use(batch)
        if name == "mk_chain_ctl":  # the control: the plain loop in the second function
            assert before <= 2
        else:
            assert before >= 14 and total == 16, (before, total)


@needs_nvcc
@pytest.mark.parametrize("name", ["default", *TICKET_ROWS])
def test_only_the_default_reads_its_sm_id(builds, name):
    """spread_rank's %smid (SASS: S2R SR_VIRTUALSMID) is in the default build only; mk_dynamic compiles (the
    #error for MK_SM_SPREAD without static tickets does not fire) and has none."""
    from argus_rt.tools import tool_or_none
    from megakernel import sass_diff

    if tool_or_none("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    reads = sass_diff.sass_text(builds(name).cubin).count("SR_VIRTUALSMID")
    assert reads == (1 if name == "default" else 0), (name, reads)
