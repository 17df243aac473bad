"""Row 29 (megakernel/NOTES.md "Ready: row 29"; MegakernelDecoder(stage_next="rows"), build flag MK_STAGE_NEXT=2,
benchmarks/decode.py mk_stage_next_rows): row 28's next-ticket staging, plus the leading whole rows (an even count) of
the tiles larger than the page; tile_gemv streams their other rows from global first. Row 29b (stage_next="rows_nodown",
MK_STAGE_NEXT=3, mk_stage_next_rows_nodown): the same without Down's prefixes. On the CPU: the row and its
flags, the refusals, what the page holds at the default shapes and at the GPU tests' tiny pages, where a launch issues
its copies (row 28's ticket-by-ticket protocol simulation, tests/test_megakernel_stage_next.py: _protocol), and with
nvcc the build's registers, spills, shared memory and the SASS sites of its bulk copies. GPU:
tests/test_megakernel_fusions_gpu.py (FUSION_K=stage_rows)."""
from collections import Counter

import pytest

from benchmarks.decode import variant_rows
from megakernel.dag import TileShape, build_decode_program
from megakernel.instructions import Down, GateUp, Logits, OProj, QkvHead
from megakernel.runtime import (
    STAGE_NEXT_BYTES,
    option_flags,
    stage_next_flags,
    stage_next_mode,
    stage_next_schedule,
    stage_next_tiles,
    tile_weight_ranges,
)
from test_megakernel_fusions_gpu import STAGE_HALF, STAGE_SMALL, TINY_TILES
from test_megakernel_stage_next import _protocol, _smem, _spills
from tinyllama.config import get_config
from toolchain import needs_nvcc

FLAG = ("-DMK_STAGE_NEXT=2",)
NODOWN = ("-DMK_STAGE_NEXT=3",)
W = 263  # H200 workers: 2 CTAs x 132 SMs - the scheduler
LAYERS = 22


def _tinyllama():
    return build_decode_program(get_config("tinyllama-1.1b"), TileShape())


def test_the_row_and_its_flags():
    assert variant_rows()["mk_stage_next_rows"] == {"stage_bytes": STAGE_NEXT_BYTES, "stage_next": "rows"}
    assert variant_rows()["mk_stage_next_rows_nodown"] == {"stage_bytes": STAGE_NEXT_BYTES, "stage_next": "rows_nodown"}
    assert [stage_next_mode(m) for m in (False, True, "rows", "rows_nodown")] == [0, 1, 2, 3]
    assert stage_next_flags("rows", STAGE_NEXT_BYTES) == FLAG
    assert stage_next_flags("rows_nodown", STAGE_NEXT_BYTES) == NODOWN
    assert stage_next_flags(True, STAGE_NEXT_BYTES) == ("-DMK_STAGE_NEXT=1",)  # row 28 unchanged
    assert stage_next_flags("rows", 4096, ("-DMK_SM_SPREAD=0", "-DMK_STATIC_TICKETS=1")) == FLAG
    option_flags(TileShape(), FLAG)  # not a tile option's macro
    option_flags(TileShape(), NODOWN)


@pytest.mark.parametrize("args,match", [
    (("rows", 0), "needs a stage page"),
    (("rows", STAGE_NEXT_BYTES, ("-DMK_STATIC_TICKETS=0",)), "cannot run with -DMK_STATIC_TICKETS=0"),
    ((False, 0, FLAG), "set by MegakernelDecoder"),
    (("rows", STAGE_NEXT_BYTES, ("-DMK_STAGE_NEXT=1",)), "set by MegakernelDecoder"),
    (("rows_nodown", 0), "needs a stage page"),
    (("rows_nodown", STAGE_NEXT_BYTES, ("-DMK_STATIC_TICKETS=0",)), "cannot run with -DMK_STATIC_TICKETS=0"),
    ((2, STAGE_NEXT_BYTES), "must be a bool, 'rows' or 'rows_nodown'"),
    (("row", STAGE_NEXT_BYTES), "must be a bool, 'rows' or 'rows_nodown'"),
])
def test_bad_settings_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        stage_next_flags(*args)


@pytest.mark.parametrize("kw,match", [
    ({"stage_next": "rows"}, "needs a stage page"),
    ({"stage_next": "rows", "stage_bytes": STAGE_NEXT_BYTES, "build_flags": ("-DMK_STATIC_TICKETS=0",)},
     "mk_dynamic's ticket counter"),
    ({"stage_next": "rows", "stage_bytes": STAGE_NEXT_BYTES, "ring_pages": 2}, "ring_pages must be"),
    ({"stage_bytes": STAGE_NEXT_BYTES, "build_flags": FLAG}, "set by MegakernelDecoder"),
    ({"stage_next": "Rows", "stage_bytes": STAGE_NEXT_BYTES}, "must be a bool, 'rows' or 'rows_nodown'"),
])
def test_the_decoder_refuses_before_any_gpu_work(kw, match, monkeypatch):
    from megakernel import runtime
    from tinyllama.weights import random_weights

    monkeypatch.setattr(runtime, "build", lambda *a, **k: pytest.fail("built despite bad settings"))
    weights = random_weights(get_config("tiny"), seed=0, device="cpu")
    with pytest.raises(ValueError, match=match):
        runtime.MegakernelDecoder(weights, **kw)


def _staged_rows(prog, stage: int, mode: str = "rows") -> Counter:
    """(op, tile rows, staged rows) -> instructions, under the rule of ``mode``."""
    c = prog.config
    fit = stage_next_tiles(prog, stage, mode)
    out = Counter()
    for ins, (_, _, n), f in zip(prog.instructions, tile_weight_ranges(prog), fit):
        if n:
            row = 2 * (c.ffn if isinstance(ins, Down) else c.hidden)
            assert n % row == 0 and f % row == 0 and f % 16 == 0
            out[type(ins), n // row, int(f) // row] += 1
    return out


def test_at_the_default_shapes_the_page_holds_whole_tiles_or_their_leading_rows():
    """TinyLlama, 64 KiB: QKV parts and O-proj tiles whole (as row 28), gate/up 16 of 44 rows (36%), down 4 of 16
    (25%: five 11 KiB rows fit, an even count is kept), logits 16 of 64; 944 MB of the step's 2.07 GB (row 28: 415)."""
    prog = _tinyllama()
    assert _staged_rows(prog, STAGE_NEXT_BYTES) == {
        (QkvHead, 16, 16): LAYERS * 160, (OProj, 16, 16): LAYERS * 128, (GateUp, 44, 16): LAYERS * 256,
        (Down, 16, 4): LAYERS * 128, (Logits, 64, 16): 500}
    whole, rows = stage_next_tiles(prog, STAGE_NEXT_BYTES), stage_next_tiles(prog, STAGE_NEXT_BYTES, stage_next="rows")
    assert (rows[whole > 0] == whole[whole > 0]).all()  # row 28's tiles are staged the same way
    assert rows.sum() == LAYERS * (288 * 65536 + 256 * 65536 + 128 * 4 * 11264) + 500 * 65536
    nodown = _staged_rows(prog, STAGE_NEXT_BYTES, "rows_nodown")  # 29b: Down keeps the register loads (817 MB)
    assert nodown == {(QkvHead, 16, 16): LAYERS * 160, (OProj, 16, 16): LAYERS * 128, (GateUp, 44, 16): LAYERS * 256,
                      (Down, 16, 0): LAYERS * 128, (Logits, 64, 16): 500}
    # a Down tile that fits the page whole is still staged (row 28's rule)
    assert (stage_next_tiles(prog, 180224, "rows_nodown") == stage_next_tiles(prog, 180224, "rows")).all()


@pytest.mark.parametrize("stage,want", [
    (STAGE_SMALL, {(QkvHead, 8, 8): 64, (OProj, 16, 16): 16, (GateUp, 32, 16): 44, (Down, 16, 4): 16,
                   (Logits, 64, 16): 8}),
    (STAGE_HALF, {(QkvHead, 8, 8): 64, (OProj, 16, 8): 16, (GateUp, 32, 8): 44, (Down, 16, 2): 16,
                  (Logits, 64, 8): 8}),
])
def test_the_gpu_tests_tiny_pages_stage_leading_rows_of_every_larger_kind(stage, want):
    """The tiny model's pages of the FUSION_K=stage_rows tests: 4 KiB as TinyLlama's 64 KiB (whole QKV / O-proj,
    the leading rows of gate/up, down and logits), 2 KiB with O-proj partial too."""
    tiny = build_decode_program(get_config("tiny"), TINY_TILES)
    assert _staged_rows(tiny, stage) == want
    assert _staged_rows(tiny, stage, "rows_nodown") == {k if k[0] is not Down else (Down, 16, 0): v
                                                         for k, v in want.items()}


@pytest.mark.parametrize("mode", ["rows", "rows_nodown"])
@pytest.mark.parametrize("workers,steps", [(W, 3), (37, 2), (7, 1), (5000, 1)])
def test_where_a_launch_issues_its_copies(workers, steps, mode):
    prog = _tinyllama()
    want = _protocol(stage_next_tiles(prog, STAGE_NEXT_BYTES, mode), workers, steps)
    got = stage_next_schedule(prog, STAGE_NEXT_BYTES, workers, steps, mode)
    assert got == want
    assert got["early"] + got["deferred"] == got["staged"]
    assert (got["staged"] > 0) == (workers < len(prog.instructions))


def test_at_263_workers_most_copies_are_deferred_behind_a_staged_gemv():
    """Per step (a middle step of a 3-step launch, by the staged tile's op and where its copy starts): every QKV copy
    is now deferred (after a gate/up or down GEMV, and layer 0's after a logits GEMV; row 28: before the wait), the
    O-proj ones as in row 28, gate/up 135 per layer before an attention tile's wait and 121 after an O-proj GEMV, down
    and logits all after a GEMV. 5632 copies (369 MB) start before a wait, 9652 (575 MB) after a GEMV."""
    prog = _tinyllama()
    n, fit = len(prog.instructions), stage_next_tiles(prog, STAGE_NEXT_BYTES, stage_next="rows")
    log: list = []
    _protocol(fit, W, 3, log)
    mid = [(t, how) for _, t, how in log if n <= t < 2 * n]
    got = Counter((type(prog.instructions[t % n]).__name__, how) for t, how in mid)
    assert got == {("QkvHead", "deferred"): LAYERS * 160, ("OProj", "early"): LAYERS * 121,
                   ("OProj", "deferred"): LAYERS * 7, ("GateUp", "early"): LAYERS * 135,
                   ("GateUp", "deferred"): LAYERS * 121, ("Down", "deferred"): LAYERS * 128,
                   ("Logits", "deferred"): 500}
    issuers = Counter((type(prog.instructions[i % n]).__name__, type(prog.instructions[t % n]).__name__)
                      for i, t, _ in log if n <= t < 2 * n)
    # QKV parts 0-134 of layers 1-21 after a gate/up GEMV (~a down phase before use), 135-159 after a down GEMV (only
    # the QKV norm before use), layer 0's after a logits GEMV of the step before
    assert issuers["GateUp", "QkvHead"] == 21 * 135 and issuers["Down", "QkvHead"] == 21 * 25
    assert issuers["Logits", "QkvHead"] == 160
    early = sum(int(fit[t % n]) for t, how in mid if how == "early")
    assert len([1 for _, how in mid if how == "early"]) == 5632 and early == 369_098_752
    s = stage_next_schedule(prog, STAGE_NEXT_BYTES, W, steps=64, stage_next="rows")
    assert s["first_unstaged"] == 160 and 0.36 < s["early"] / s["staged"] < 0.38


def _copies_by_op(prog, mode: str) -> tuple[Counter, Counter]:
    """A middle step of a 3-step launch at 263 workers: copies by (staged op, where) and by (issuing op, staged op)."""
    n, fit = len(prog.instructions), stage_next_tiles(prog, STAGE_NEXT_BYTES, mode)
    log: list = []
    _protocol(fit, W, 3, log)
    mid = [(i, t, how) for i, t, how in log if n <= t < 2 * n]
    kind = [type(ins).__name__ for ins in prog.instructions]
    return Counter((kind[t % n], how) for _, t, how in mid), Counter((kind[i % n], kind[t % n]) for i, t, _ in mid)


def test_without_downs_prefixes_the_down_tickets_issue_before_their_wait():
    """Row 29b: Down tickets no longer read the page, so the 25 QKV parts per layer that follow a down ticket and the
    128 logits tiles that follow the last layer's down tiles are copied before the down ticket's wait again (as in
    row 28), and the gate/up tickets' deferred down copies are gone: per step 6285 copies (412 MB) early, 6183 (405 MB)
    deferred."""
    by_where, by_issuer = _copies_by_op(_tinyllama(), "rows_nodown")
    assert by_where == {("QkvHead", "early"): 21 * 25, ("QkvHead", "deferred"): 21 * 135 + 160,
                        ("OProj", "early"): LAYERS * 121, ("OProj", "deferred"): LAYERS * 7,
                        ("GateUp", "early"): LAYERS * 135, ("GateUp", "deferred"): LAYERS * 121,
                        ("Logits", "early"): 128, ("Logits", "deferred"): 372}
    assert by_issuer["Down", "QkvHead"] == 21 * 25 and by_issuer["Down", "Logits"] == 128
    assert not any(staged == "Down" for _, staged in by_issuer)


@needs_nvcc
def test_the_source_accepts_modes_0_to_3_only(tmp_path):
    from megakernel.build import BuildError, build

    with pytest.raises(BuildError, match="MK_STAGE_NEXT is 0 \\(off\\), 1"):
        build(0, build_dir=tmp_path, extra_flags=("-DMK_STAGE_NEXT=4",))


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    from megakernel.build import build

    out = {}
    flags = {"default": (), "stage_next": ("-DMK_STAGE_NEXT=1",), "stage_rows": FLAG, "stage_rows_nodown": NODOWN}

    def get(name: str, mode: int = 0):
        if (name, mode) not in out:
            out[name, mode] = build(mode, build_dir=tmp_path_factory.mktemp(f"{name}{mode}"), extra_flags=flags[name])
        return out[name, mode]

    return get


@needs_nvcc
@pytest.mark.parametrize("name", ["stage_rows", "stage_rows_nodown"])
@pytest.mark.parametrize("mode", [0, 2])
def test_the_variant_compiles_with_no_new_spill(builds, mode, name):
    """128 registers; no function spills more than in row 28's build (nvcc 13.0, 2026-12-02: the same bytes in every
    function, the worker 32 B of stores in mode 0, 20 in mode 2) or the default's; the same static shared memory as row
    28, so two CTAs with the 64 KiB page fit an SM's 228 KiB."""
    rows, sn, base = builds(name, mode), builds("stage_next", mode), builds("default", mode)
    assert rows.registers() is not None and rows.registers() <= 128
    got = _spills(rows.ptxas_log)
    for ref in (_spills(sn.ptxas_log), _spills(base.ptxas_log)):
        assert set(got) == set(ref), (set(got) ^ set(ref))
        assert all(got[fn] <= ref[fn] for fn in got), rows.ptxas_log
    assert _smem(rows.ptxas_log) == _smem(sn.ptxas_log)
    assert 2 * (_smem(rows.ptxas_log) + STAGE_NEXT_BYTES + 1024) <= 228 * 1024  # 1 KiB reserved per CTA


@needs_nvcc
@pytest.mark.parametrize("name", ["stage_rows", "stage_rows_nodown"])
def test_the_bulk_copies_start_where_row_28s_do(builds, name):
    """SASS: 6 UBLKCP in the worker loop, as in row 28: one at the plan, between the registration wait and the
    dependency wait, and one after each of the 5 GEMV ops' gemv_tile_staged calls behind a CTA barrier; none elsewhere."""
    from argus_rt.tools import tool_or_none
    from megakernel import sass_diff

    if tool_or_none("nvdisasm") is None:
        pytest.skip("needs nvdisasm")
    fns = sass_diff.functions(sass_diff.disassembly(builds(name).cubin))
    loop = fns["argus_megakernel"]
    copies = [i for i, line in enumerate(loop) if line.startswith("UBLKCP")]
    assert len(copies) == 6
    assert all("UBLKCP" not in line for fn, body in fns.items() if fn != "argus_megakernel" for line in body)
    waits = [i for i, line in enumerate(loop) if line.startswith("CALL") and "12wait_counter" in line]
    staged = [i for i, line in enumerate(loop) if line.startswith("CALL") and "16gemv_tile_stagedE" in line]
    assert len(waits) == 3 and len(staged) == 5
    assert waits[0] < copies[0] < waits[1]
    after = [c for c in copies[1:] if any(s < c < s + 60 and any(x.startswith("BAR.SYNC") for x in loop[s:c])
                                          for s in staged)]
    assert len(after) == 5, (copies, staged)
