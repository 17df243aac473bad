"""Forced-wait probe transform: TTGIR edits, compilation, clear errors, evidence parsing and the join."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

triton = pytest.importorskip("triton")

from argus_rt.kinds.triton.discovery import TtgirError, UnsupportedOpError, discover  # noqa: E402
from argus_rt.kinds.triton.probes import (  # noqa: E402
    PROBE_ARG,
    WORDS_PER_CTA,
    ProbeError,
    compile_ttgir,
    iteration_waits,
    join_probes,
    make_forced_wait_probe,
    make_iteration_trace,
    probe_latencies,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "triton"))
import tma_matmul as tm  # noqa: E402


@pytest.fixture(scope="module")
def ttgir():
    return tm.compile_reference().asm["ttgir"]


@pytest.fixture(scope="module")
def disc(ttgir):
    return discover(ttgir, "tma_matmul/kloop", iterations=tm.ITERATIONS)


def _wait_lines(text):
    return [ln for ln in text.splitlines() if "ttng.wait_barrier" in ln]


def test_prologue_probe_edits(ttgir, disc):
    a = disc.sites[0]
    p = make_forced_wait_probe(ttgir, disc, a.op_id, 1)
    assert p.key == f"0x{a.op_id:08x}@1" and p.origin_hash != p.variant_hash
    assert set(p.effects) == {"forces_completion", "perturbs_timing"}
    # exactly one new wait, on the private barrier with phase 0, right after the retargeted copy
    new_waits = [ln for ln in _wait_lines(p.ttgir) if "%argus_pbar" in ln]
    assert len(new_waits) == 1 and "%argus_c0, %argus_sel_pred" in new_waits[0]
    lines = p.ttgir.splitlines()
    k = next(i for i, ln in enumerate(lines) if "async_tma_copy_global_to_local" in ln and "%argus_pbar" in ln)
    assert "ttng.wait_barrier %argus_pbar" in lines[k + 1]
    # the stage barrier of iteration 1 now expects only the other load's bytes
    assert len(re.findall(r"barrier_expect %acc_\w+, 16384,", p.ttgir)) == 1
    assert p.ttgir.count("async_tma_copy_global_to_local") == ttgir.count("async_tma_copy_global_to_local")
    assert f"{PROBE_ARG}: !tt.ptr<i64>" in lines[next(i for i, ln in enumerate(lines) if "tt.func" in ln)]


def test_loop_probe_is_selected_by_trip(ttgir, disc):
    b = disc.sites[1]
    p = make_forced_wait_probe(ttgir, disc, "b", 5)
    # iteration 5 is issued in loop trip 5 - 2 = 3, i.e. induction variable 3 * 64
    assert "%argus_trip_iv = arith.constant 192 : i32" in p.ttgir
    assert "%argus_e_iv = arith.constant 192 : i32" in p.ttgir
    # in the loop: original copy predicated on "not selected", a clone on the private barrier
    assert re.search(r"async_tma_copy_global_to_local %b_desc\w*\[.*\] %\w+, %acc_\w+, %argus_nsel_pred", p.ttgir)
    assert re.search(r"async_tma_copy_global_to_local %b_desc\w*\[.*\] %\w+, %argus_pbar, %argus_sel_pred", p.ttgir)
    assert re.search(r"barrier_expect %acc_\w+, 32768, %argus_e_nsel", p.ttgir)
    assert re.search(r"barrier_expect %acc_\w+, 16384, %argus_e_sel", p.ttgir)
    assert p.op_id == b.op_id and p.iteration == 5


def test_every_candidate_makes_a_distinct_probe(ttgir, disc):
    # every probed family: the two TMA loads and the WGMMA dot, 8 iterations each
    assert len(disc.candidates("tma_load")) == 16 and len(disc.candidates("wgmma")) == 8
    variants = {make_forced_wait_probe(ttgir, disc, s.op_id, i).variant_hash for s, i in disc.candidates()}
    assert len(variants) == 24


def test_probes_compile_to_runnable_variants(ttgir, disc, tmp_path):
    for op, it in (("a", 0), ("b", 7)):
        p = make_forced_wait_probe(ttgir, disc, op, it)
        k = compile_ttgir(p.ttgir, tmp_path, f"probe_{op}{it}")
        assert list(k.src.signature.values()) == ["*f16", "*f16", "*f16", "i32", "i32", "i32", "*i64"]
        assert k.metadata.shared > 0 and len(k.asm["cubin"]) > 0
        assert "%globaltimer" in k.asm["ptx"] and "%smid" in k.asm["ptx"] and "mbarrier.try_wait" in k.asm["ptx"]


def test_traced_reference_compiles(ttgir, disc, tmp_path):
    traced = make_iteration_trace(ttgir, disc)
    assert traced.count("%globaltimer") == 4  # the TMA consumer's wait_barrier and the dot's wait
    assert make_iteration_trace(ttgir, disc, kinds=("tma_load",)).count("%globaltimer") == 2
    k = compile_ttgir(traced, tmp_path, "traced")
    assert list(k.src.signature.values())[-1] == "*i64"


def test_probe_errors_name_the_op_and_choices(ttgir, disc):
    sync = ttgir.replace("isAsync = true", "isAsync = false")  # a dot that completes before the next op
    with pytest.raises(UnsupportedOpError, match=r"ttng.warp_group_dot \(TTGIR line \d+\) \(site 0x\w+, acc\) is "
                                                 r"not asynchronous"):
        make_forced_wait_probe(sync, discover(sync, "tma_matmul/kloop", iterations=tm.ITERATIONS), "acc", 0)
    with pytest.raises(ProbeError, match=r"iteration 8 is not served.*valid iterations: \[0, 1, 2, 3, 4, 5, 6, 7\]"):
        make_forced_wait_probe(ttgir, disc, "a", 8)
    with pytest.raises(Exception, match=r"no site 'zz'.*valid: 0x"):
        make_forced_wait_probe(ttgir, disc, "zz", 0)
    other = ttgir.replace("@tma_matmul_kernel", "@other_kernel")
    with pytest.raises(ProbeError, match=r"TTGIR is for kernel 'other_kernel'"):
        make_forced_wait_probe(other, disc, "a", 0)


def test_compile_error_carries_the_mlir_diagnostic(ttgir, tmp_path):
    bad = ttgir.replace("ttng.wait_barrier %acc_", "ttng.wait_barrier %undefined_", 1)
    with pytest.raises(TtgirError, match=r"(?s)could not compile.*(undeclared SSA value|use of undeclared)"):
        compile_ttgir(bad, tmp_path, "bad")


def test_probe_latencies_and_join(disc):
    n = 3
    buf = np.zeros(n * WORDS_PER_CTA, dtype=np.int64).reshape(n, WORDS_PER_CTA)
    buf[:, 0] = [1000, 2000, 3000]
    buf[:, 1] = [1600, 2500, 3700]  # 600, 500, 700 ns
    buf[:, 2] = 10
    buf[:, 3] = [1010, 910, 1210]
    lat = probe_latencies(buf.ravel(), n)
    assert lat["latency_ns_median"] == 600 and lat["latency_ns_min"] == 500 and lat["latency_cycles_median"] == 1000
    part = buf.copy()
    part[1] = 0  # CTA 1 does not run this iteration (a per-CTA trip count): the median is over the other two
    lat2 = probe_latencies(part.ravel(), n)
    assert lat2["recorded"] == 2 and lat2["ctas"] == 3 and lat2["latency_ns_median"] == 650
    with pytest.raises(ProbeError, match=r"none of 3 CTAs recorded the probe"):
        probe_latencies(np.zeros_like(buf).ravel(), n)
    torn = buf.copy()
    torn[1, 0] = 0  # a completion without its issue: not what the probe writes
    with pytest.raises(ProbeError, match=r"CTA\(s\) wrote part of a probe record.*first: CTA 1"):
        probe_latencies(torn.ravel(), n)
    waits = np.zeros((n, tm.ITERATIONS, 2), dtype=np.int64)
    waits[:, :, 0] = 100
    waits[:, :, 1] = 100 + np.arange(tm.ITERATIONS) * 32
    per_it = iteration_waits(waits.ravel(), n, tm.ITERATIONS)
    assert per_it[3] == 96
    a, b = disc.sites[0], disc.sites[1]
    rows = join_probes(disc, {(a.op_id, 3): lat, (b.op_id, 0): lat}, per_it)
    assert [(r["label"], r["iteration"], r["reference_wait_ns"]) for r in rows] == [("b", 0, 0.0), ("a", 3, 96.0)]
    assert all(r["qualification"] == "derived" and r["reference_qualification"] == "observed" for r in rows)
    assert rows[1]["slot"] == 0 and rows[1]["phase"] == 1
