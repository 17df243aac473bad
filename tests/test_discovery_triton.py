"""TTGIR discovery on compiled Triton kernels: exact sites, barriers, phases, stable op IDs, clear errors."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from argus_rt import triton_regions as argus  # noqa: E402
from argus_rt.kinds.triton.discovery import (  # noqa: E402
    DiscoveryError,
    Module,
    TtgirError,
    UnsupportedOpError,
    discover,
    simulate_loop,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "triton"))
import tma_matmul as tm  # noqa: E402

ITERS = tm.ITERATIONS


@pytest.fixture(scope="module")
def ttgir():
    return tm.compile_reference().asm["ttgir"]


@pytest.fixture(scope="module")
def kloop(ttgir):
    return discover(ttgir, "tma_matmul/kloop", iterations=ITERS)


def test_exact_sites_in_the_k_loop(kloop):
    assert [(s.kind, s.label, s.region) for s in kloop.sites] == [
        ("tma_load", "a", "tma_matmul/kloop/load"),
        ("tma_load", "b", "tma_matmul/kloop/load"),
        ("wgmma", "acc", "tma_matmul/kloop/mma"),
    ]
    assert len(kloop.candidates("tma_load")) == 16
    assert len({s.op_id for s in kloop.sites}) == 3


def test_tma_barrier_group_and_pipeline_mapping(kloop):
    a, b = kloop.sites[0], kloop.sites[1]
    for s in (a, b):
        c = s.completion
        assert c.kind == "mbarrier"
        assert c.barrier_slots == 3 and c.expect_bytes == 2 * 128 * 64 * 2 and c.op_bytes == 128 * 64 * 2
        assert c.group_ops == 2
        # num_stages=3: iterations 0 and 1 peeled into the prologue, loop trip t fetches t + 2
        assert [(i.placement, i.iterations) for i in s.instances] == [
            ("prologue", [0]), ("prologue", [1]), ("loop", list(range(2, ITERS)))]
        assert s.instances[-1].trip_offset == 2
        assert c.slot_by_iteration == {i: i % 3 for i in range(ITERS)}
        assert c.phase_by_iteration == {i: (i // 3) & 1 for i in range(ITERS)}
    assert a.completion.barrier_alloc == b.completion.barrier_alloc  # one barrier per stage, shared


def test_wgmma_completion_is_the_dot_wait(kloop):
    w = kloop.sites[2]
    assert w.op_name == "ttng.warp_group_dot"
    assert w.completion.kind == "wgmma_wait" and w.completion.wait_count == 1
    assert w.iterations == list(range(ITERS))


def test_subtree_selection(ttgir):
    assert [s.kind for s in discover(ttgir, "tma_matmul/kloop/load", iterations=ITERS).sites] == ["tma_load"] * 2
    assert [s.kind for s in discover(ttgir, "tma_matmul/kloop/mma", iterations=ITERS).sites] == ["wgmma"]
    assert discover(ttgir, "tma_matmul/epilogue", iterations=ITERS).sites == []
    whole = discover(ttgir, "tma_matmul", iterations=ITERS)
    assert [s.op_id for s in whole.sites] == [s.op_id for s in discover(ttgir, "tma_matmul/kloop", iterations=ITERS).sites]
    with pytest.raises(DiscoveryError, match=r"unknown region 'nope'.*tma_matmul/kloop/load"):
        discover(ttgir, "nope", iterations=ITERS)
    with pytest.raises(DiscoveryError, match=r"iterations must be an int >= 1, got 0"):
        discover(ttgir, "tma_matmul", iterations=0)


def test_op_ids_stable_across_recompiles_and_stage_counts(kloop, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # force a real recompile
    again = discover(tm.compile_reference().asm["ttgir"], "tma_matmul/kloop", iterations=ITERS)
    assert [s.op_id for s in again.sites] == [s.op_id for s in kloop.sites]
    # 4 stages: same logical ops (same IDs), three peeled iterations, four slots
    four = discover(tm.compile_reference(num_stages=4).asm["ttgir"], "tma_matmul/kloop", iterations=ITERS)
    assert [s.op_id for s in four.sites] == [s.op_id for s in kloop.sites]
    a = four.sites[0]
    assert [i.iterations for i in a.instances] == [[0], [1], [2], list(range(3, ITERS))]
    assert a.completion.barrier_slots == 4
    assert a.completion.slot_by_iteration == {i: i % 4 for i in range(ITERS)}
    assert a.completion.phase_by_iteration == {i: (i // 4) & 1 for i in range(ITERS)}


def test_simulated_loop_carries_slot_and_phase(ttgir):
    m = Module(ttgir)
    (loop,) = m.loops.values()
    trace = simulate_loop(m, loop, ITERS)
    assert [env[loop.iv] for env in trace] == [64 * t for t in range(ITERS)]


@triton.jit
def _cp_async_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    argus.begin("mm")
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))
    argus.end("mm")


def test_cp_async_sites_with_commit_and_wait():
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}
    src = triton.compiler.ASTSource(fn=_cp_async_matmul, signature=sig, constexprs={"BM": 64, "BN": 64, "BK": 32},
                                    attrs={(i,): [["tt.divisibility", 16]] for i in range(6)})
    ttgir = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_stages": 3}).asm["ttgir"]
    d = discover(ttgir, "mm", iterations=4)
    assert [s.kind for s in d.sites] == ["cp_async", "cp_async", "wgmma"]
    for s in d.sites[:2]:
        assert s.completion.kind == "cp_async_group"
        assert s.completion.commit_line is not None and s.completion.wait_count == 2
        assert [(i.placement, i.iterations) for i in s.instances] == [("prologue", [0]), ("prologue", [1]),
                                                                         ("loop", [2, 3])]
    assert d.candidates("tma_load") == []


# ---- malformed or unsupported IR ------------------------------------------------------------------
def test_unreadable_line_names_the_line(ttgir):
    bad = ttgir.replace("ttng.wait_barrier", "%%% wait_barrier", 1)
    line = next(k for k, ln in enumerate(bad.splitlines(), 1) if "%%% wait_barrier" in ln)
    with pytest.raises(TtgirError, match=rf"<ttgir>:{line}: MLIR cannot parse this TTGIR: invalid SSA name"):
        discover(bad, "tma_matmul", iterations=ITERS)


def test_ill_typed_barrier_is_rejected_by_mlir_at_its_line(ttgir):
    lines = ttgir.splitlines()
    i = next(k for k, ln in enumerate(lines) if "ttng.async_tma_copy_global_to_local" in ln)
    # make the first TMA load signal a "barrier" that is a pointer argument: MLIR's verifier refuses it
    bar = lines[i].split("] ")[1].split(",")[1].strip()
    lines[i] = lines[i].replace(f", {bar},", ", %a_ptr,", 1)
    with pytest.raises(TtgirError, match=rf"<ttgir>:{i + 1}: MLIR cannot parse this TTGIR: .*%a_ptr"):
        discover("\n".join(lines), "tma_matmul", iterations=ITERS)


def _fresh(ttgir):
    return Module(ttgir)  # not the cached parse: these tests edit the parsed module


def test_barrier_from_a_block_argument_names_the_tma_op(ttgir):
    m = _fresh(ttgir)
    tma = next(o for o in m.ops if o.name == "ttng.async_tma_copy_global_to_local")
    bar = next(n for n, t in zip(tma.operands, tma.operand_types) if "xi64" in t)
    del m.defs[bar]  # as if the barrier were a value carried into the op from outside
    with pytest.raises(TtgirError, match=r"ttng.async_tma_copy_global_to_local \(TTGIR line \d+\).*no defining op"):
        discover(m, "tma_matmul", iterations=ITERS)


def test_barrier_not_from_a_barrier_array_is_unsupported(ttgir):
    m = _fresh(ttgir)
    tma = next(o for o in m.ops if o.name == "ttng.async_tma_copy_global_to_local")
    bar = next(n for n, t in zip(tma.operands, tma.operand_types) if "xi64" in t)
    m.defs[bar].name = "ttg.memdesc_subslice"
    with pytest.raises(UnsupportedOpError, match=rf"ttng.async_tma_copy_global_to_local \(TTGIR line \d+\): its "
                                                  rf"mbarrier {bar} comes from ttg.memdesc_subslice"):
        discover(m, "tma_matmul", iterations=ITERS)


def test_expect_bytes_mismatch_is_reported(ttgir):
    bad = ttgir.replace(", 32768, ", ", 32000, ", 1)
    with pytest.raises(DiscoveryError, match=r"ttng.barrier_expect \(TTGIR line \d+\): expects 32000 B but its loads carry 32768 B"):
        discover(bad, "tma_matmul/kloop", iterations=ITERS)


def test_marker_without_begin_is_reported(ttgir):
    bad = ttgir.replace("argus:begin tma_matmul/epilogue", "argus:xbegin tma_matmul/epilogue")
    with pytest.raises(TtgirError, match=r"not a well-formed Argus marker"):
        discover(bad, "tma_matmul", iterations=ITERS)


def test_unsupported_async_op_is_listed_by_name(ttgir):
    m = _fresh(ttgir)
    [o for o in m.ops if o.name == "ttng.async_tma_copy_global_to_local"][-1].name = "ttng.async_tma_gather"
    d = discover(m, "tma_matmul/kloop", iterations=ITERS)
    assert any("ttng.async_tma_gather" in u and "TMA gather" in u for u in d.unsupported)


def test_wrong_pipeline_mapping_is_an_error(ttgir):
    # the loop's producer slot iter_arg starts at 1 (iteration 2 -> slot 2); start it at 0 instead
    head = next(ln for ln in ttgir.splitlines() if "scf.for" in ln)
    bad_head = head.replace("= %c1_i32,", "= %c0_i32,", 1)
    assert bad_head != head
    with pytest.raises(DiscoveryError, match=r"pipeline mapping unknown"):
        discover(ttgir.replace(head, bad_head), "tma_matmul/kloop", iterations=ITERS)


def test_not_ttgir_is_rejected():
    with pytest.raises(TtgirError, match=r"no tt.func found"):
        Module("module {\n}\n")


def test_wgmma_without_its_wait_names_the_dot(ttgir):
    m = _fresh(ttgir)
    for o in m.ops:
        if o.name == "ttng.warp_group_dot_wait":
            o.name = "ttng.other_wait"
    with pytest.raises(UnsupportedOpError, match=r"ttng.warp_group_dot \(TTGIR line \d+\): no ttng.warp_group_dot_wait"):
        discover(m, "tma_matmul/kloop/mma", iterations=ITERS)
