"""Row 28 (megakernel/NOTES.md "Ready: row 28"; MegakernelDecoder(stage_next=True), build flag MK_STAGE_NEXT=1,
benchmarks/decode.py mk_stage_next): each worker bulk-copies its next static ticket's whole weight tile into a
shared-memory page one ticket early. On the CPU: the row and its flags, the refusals (no page, the dynamic ticket
counter, the flag by hand), which tiles fit the page at the default shapes, where a launch issues its copies (a model
of the kernel's one-page protocol: never two copies in flight, none left at the launch's end), and with nvcc the
build's registers, spills, shared memory and the SASS sites of its bulk copies. GPU: tests/test_megakernel_fusions_gpu.py
(FUSION_K=stage_next)."""
import re

import numpy as np
import pytest

from benchmarks.decode import variant_rows
from megakernel.dag import TileShape, build_decode_program
from megakernel.instructions import OProj, QkvHead
from megakernel.runtime import (
    STAGE_NEXT_BYTES,
    option_flags,
    stage_next_flags,
    stage_next_schedule,
    stage_next_tiles,
    tile_weight_ranges,
)
from tinyllama.config import get_config
from toolchain import needs_nvcc

FLAG = ("-DMK_STAGE_NEXT=1",)
W = 263  # H200 workers: 2 CTAs x 132 SMs - the scheduler


def test_the_row_and_its_flags():
    assert variant_rows()["mk_stage_next"] == {"stage_bytes": STAGE_NEXT_BYTES, "stage_next": True}
    assert STAGE_NEXT_BYTES == 64 * 1024
    assert stage_next_flags(True, STAGE_NEXT_BYTES) == FLAG
    assert stage_next_flags(False, 0) == () and stage_next_flags(False, 4096) == ()  # the older current-tile staging
    assert stage_next_flags(True, 4096, ("-DMK_SM_SPREAD=0", "-DMK_STATIC_TICKETS=1")) == FLAG  # static, any order
    option_flags(TileShape(), FLAG)  # not a tile option's macro


@pytest.mark.parametrize("args,match", [
    ((True, 0), "needs a stage page"),
    ((True, STAGE_NEXT_BYTES, ("-DMK_STATIC_TICKETS=0",)), "cannot run with -DMK_STATIC_TICKETS=0"),
    ((False, 0, FLAG), "set by MegakernelDecoder"),
    ((True, STAGE_NEXT_BYTES, ("-DMK_STAGE_NEXT=0",)), "set by MegakernelDecoder"),
    ((1, STAGE_NEXT_BYTES), "must be a bool"),
])
def test_bad_settings_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        stage_next_flags(*args)


@pytest.mark.parametrize("kw,match", [
    ({"stage_next": True}, "needs a stage page"),
    ({"stage_next": True, "stage_bytes": STAGE_NEXT_BYTES, "build_flags": ("-DMK_STATIC_TICKETS=0",)},
     "mk_dynamic's ticket counter"),
    ({"stage_next": True, "stage_bytes": STAGE_NEXT_BYTES, "ring_pages": 2}, "ring_pages must be"),
    ({"stage_bytes": STAGE_NEXT_BYTES, "build_flags": FLAG}, "set by MegakernelDecoder"),
])
def test_the_decoder_refuses_before_any_gpu_work(kw, match, monkeypatch):
    from megakernel import runtime
    from tinyllama.weights import random_weights

    monkeypatch.setattr(runtime, "build", lambda *a, **k: pytest.fail("built despite bad settings"))
    weights = random_weights(get_config("tiny"), seed=0, device="cpu")
    with pytest.raises(ValueError, match=match):
        runtime.MegakernelDecoder(weights, **kw)


def test_at_the_default_shapes_qkv_parts_and_oproj_tiles_fill_the_page():
    """TinyLlama: a QKV part (64 / 4 rows) and an O-proj tile (16 rows) are 64 KiB of K = 2048 bf16 each; gate/up
    (44 rows), down (16 x 5632) and logits (64 rows) do not fit and keep the register loads."""
    prog = build_decode_program(get_config("tinyllama-1.1b"), TileShape())
    fit = stage_next_tiles(prog, STAGE_NEXT_BYTES)
    staged = {type(prog.instructions[i]) for i in np.nonzero(fit)[0]}
    assert staged == {QkvHead, OProj} and set(fit[fit > 0]) == {STAGE_NEXT_BYTES}
    every = {type(ins) for ins, (_, _, n) in zip(prog.instructions, tile_weight_ranges(prog)) if n}
    assert all(isinstance(ins, (QkvHead, OProj)) == (f > 0) for ins, f in zip(prog.instructions, fit)
               if type(ins) in every)
    assert fit.sum() == 22 * (160 + 128) * STAGE_NEXT_BYTES  # 415 MB of the step's 2.07 GB
    assert not stage_next_tiles(prog, STAGE_NEXT_BYTES - 16).any()  # whole tiles only


def _protocol(fit: np.ndarray, workers: int, steps: int, log: list | None = None) -> dict[str, int]:
    """The kernel's per-worker page protocol (megakernel.cu: stage_next_plan, stage_next_deferred, the ticket end),
    ticket by ticket: returns the same counts as stage_next_schedule and checks one copy in flight at most. ``log``
    (tests/test_megakernel_stage_rows.py): gets (issuing ticket, staged ticket, "early" / "deferred") per copy."""
    n, end = len(fit), steps * len(fit)
    out = {"staged": 0, "early": 0, "deferred": 0, "bytes": 0, "first_unstaged": 0}
    for r in range(min(workers, end)):
        staged, in_flight = 0, 0
        for t in range(r, end, workers):
            nxt = t + workers
            nb = int(fit[nxt % n]) if nxt < end else 0
            if staged:  # the GEMV waits for this tile's copy, then (if planned) issues the next one
                out["staged"] += 1
                out["bytes"] += staged
                assert in_flight == 1
                in_flight = 0
                if nb:
                    out["deferred"] += 1
                    in_flight += 1
                    if log is not None:
                        log.append((t, nxt, "deferred"))
            else:
                out["first_unstaged"] += bool(fit[t % n]) and t < workers
                if nb:  # before this ticket's dependency wait
                    out["early"] += 1
                    in_flight += 1
                    if log is not None:
                        log.append((t, nxt, "early"))
            assert in_flight <= 1
            staged = nb
        assert in_flight == 0, f"worker {r}: a copy in flight at the launch's end"
    return out


@pytest.mark.parametrize("workers,steps", [(W, 3), (37, 2), (7, 1), (5000, 1)])
def test_where_a_launch_issues_its_copies(workers, steps):
    prog = build_decode_program(get_config("tinyllama-1.1b"), TileShape())
    want = _protocol(stage_next_tiles(prog, STAGE_NEXT_BYTES), workers, steps)
    got = stage_next_schedule(prog, STAGE_NEXT_BYTES, workers, steps)
    assert got == want
    assert got["early"] + got["deferred"] == got["staged"]
    if workers < len(prog.instructions):
        assert got["staged"] > 0
    else:  # one ticket per worker: nothing to stage
        assert got["staged"] == 0


def test_at_263_workers_almost_every_copy_starts_before_a_dependency_wait():
    """A QKV tile's copy starts at a gate/up, down or logits ticket, an O-proj tile's at an attention ticket (7 per
    layer at a QKV ticket: after its GEMV); per step 6336 tiles (415 MB) read from shared memory."""
    prog = build_decode_program(get_config("tinyllama-1.1b"), TileShape())
    s = stage_next_schedule(prog, STAGE_NEXT_BYTES, W, steps=64)
    assert s["first_unstaged"] == 160  # the launch's first layer-0 QKV tiles (first W tickets)
    assert s["staged"] == 64 * 22 * (160 + 128) - 160
    assert s["deferred"] == 64 * 22 * 7 - 7  # O-proj tiles 0..6 follow QKV tiles 153..159 (t + 263)
    assert s["early"] / s["staged"] > 0.97


def _spills(log: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores", log)}


def _smem(log: str) -> int:
    return int(re.search(r"Used \d+ registers, .* (\d+) bytes smem", log).group(1))


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    from megakernel.build import build

    out = {}

    def get(name: str, mode: int = 0):
        if (name, mode) not in out:
            flags = FLAG if name == "stage_next" else ()
            out[name, mode] = build(mode, build_dir=tmp_path_factory.mktemp(f"{name}{mode}"), extra_flags=flags)
        return out[name, mode]

    return get


@needs_nvcc
@pytest.mark.parametrize("mode", [0, 2])
def test_the_variant_compiles_with_no_new_spill(builds, mode):
    """128 registers; no function spills more than in the default build (nvcc 13.0, 2026-12-02: the worker 32 B of
    stores against 36 in mode 0, 20 against 24 in mode 2); two CTAs with the page fit an SM's 228 KiB."""
    sn, base = builds("stage_next", mode), builds("default", mode)
    assert sn.registers() is not None and sn.registers() <= 128
    got, ref = _spills(sn.ptxas_log), _spills(base.ptxas_log)
    assert set(got) == set(ref), (set(got) ^ set(ref))
    assert all(got[fn] <= ref[fn] for fn in got), sn.ptxas_log
    assert 2 * (_smem(sn.ptxas_log) + STAGE_NEXT_BYTES + 1024) <= 228 * 1024  # 1 KiB reserved per CTA


@needs_nvcc
def test_the_bulk_copies_start_at_the_plan_and_after_each_staged_gemv(builds):
    """SASS: the default has one UBLKCP (the current tile's copy at ticket time: stage_bytes > 0 without stage_next);
    the variant has it at the plan site, before the worker's dependency wait, and once after each of the 5 GEMV ops'
    gemv_tile_staged calls, behind a CTA barrier (the page is free). Neither has a bulk copy in another function."""
    from argus_rt.tools import tool_or_none
    from megakernel import sass_diff

    if tool_or_none("nvdisasm") is None:
        pytest.skip("needs nvdisasm")
    for name, n_copies in (("default", 1), ("stage_next", 6)):
        fns = sass_diff.functions(sass_diff.disassembly(builds(name).cubin))
        loop = fns["argus_megakernel"]
        copies = [i for i, line in enumerate(loop) if line.startswith("UBLKCP")]
        assert len(copies) == n_copies, name
        assert all("UBLKCP" not in line for fn, body in fns.items() if fn != "argus_megakernel" for line in body)
        waits = [i for i, line in enumerate(loop) if line.startswith("CALL") and "12wait_counter" in line]
        staged = [i for i, line in enumerate(loop) if line.startswith("CALL") and "16gemv_tile_stagedE" in line]
        assert len(waits) == 3 and len(staged) == 5  # the registration round's, the dependency's, the scheduler's
        assert waits[0] < copies[0] < waits[1]
        after = [c for c in copies[1:] if any(s < c < s + 60 and any(l.startswith("BAR.SYNC") for l in loop[s:c])
                                              for s in staged)]
        assert len(after) == n_copies - 1, (name, copies, staged)


@needs_nvcc
@pytest.mark.parametrize("flags,match", [(("-DMK_STATIC_TICKETS=0",), "needs MK_STATIC_TICKETS=1"),
                                         (("-DMK_RING=2",), "MK_STAGE_NEXT and MK_RING")])
def test_the_kernel_refuses_what_the_host_refuses(tmp_path, flags, match):
    """Behind the host's checks, the source itself: no stage_next build with the ticket counter or the page ring."""
    from megakernel.build import BuildError, build

    with pytest.raises(BuildError, match=match):
        build(0, build_dir=tmp_path, extra_flags=FLAG + flags)
