"""The Triton region GEMM of overlap/gemm_regions.py: regions, sm_90 build, traced variant, decoding,
input checks and the measure.py hook on the CPU; output and region timings on a GPU (skipped here).

GPU tests open with the plain reference (torch.mm on fp32 copies of fresh random bf16 inputs).
"""
from __future__ import annotations

import difflib

import numpy as np
import pytest

pytest.importorskip("triton")
import torch  # noqa: E402

from argus_rt.kinds.triton import region_trace as RT  # noqa: E402
from argus_rt.kinds.triton.discovery import discover  # noqa: E402
from argus_rt.regions import region_id  # noqa: E402
from argus_rt.triton_regions import kernel_regions  # noqa: E402
from overlap import gemm_regions as G  # noqa: E402
from overlap.config import OverlapConfig, OverlapShapeError  # noqa: E402
from overlap.measure import gemm_region_record, gemm_shapes  # noqa: E402


@pytest.fixture(scope="module")
def gb(tmp_path_factory):
    return G.build(90, tmp_path_factory.mktemp("gemm_regions"))  # GPUTarget("cuda", 90, 32), no GPU needed


# ---- regions and the sm_90 build -------------------------------------------------------------
def test_regions_are_named_and_nested():
    tree = kernel_regions(G.overlap_gemm_kernel)
    assert sorted(tree.names) == sorted(G.REGIONS)
    assert tree["overlap_gemm"].parent is None
    assert sorted(r.name for r in tree.children("overlap_gemm")) == ["overlap_gemm/epilogue", "overlap_gemm/mainloop"]


def test_plain_kernel_compiles_for_sm90_with_markers_wgmma_and_discovered_sites(gb):
    ptx = gb.plain.asm["ptx"]
    assert ptx.count("pmevent.mask") == 3 * 6 and "%globaltimer" not in ptx  # markers only, no trace
    assert "wgmma.mma_async" in ptx and "cp.async" in ptx
    assert gb.plain.metadata.num_warps == G.NUM_WARPS
    assert ptx == G.compile_plain(90).asm["ptx"]  # recompiled from its TTGIR: the same kernel as the JIT source
    ttgir = gb.plain_ttgir
    assert ttgir.count("tt.divisibility = 16") == len(G.DIVISIBLE_ARGS)
    main = discover(ttgir, "overlap_gemm/mainloop", iterations=8)
    assert [(s.kind, s.label) for s in main.sites] == [("cp_async", "a"), ("cp_async", "b"), ("wgmma", "acc")]
    assert discover(ttgir, "overlap_gemm/epilogue", iterations=8).sites == []
    # The mainloop region holds the pipeline's prologue loads and its final WGMMA drain: its begin marker
    # precedes the first async copy, its end marker follows the last warp_group_dot_wait.
    lines = ttgir.splitlines()
    at = {k: next(i for i, t in enumerate(lines) if k in t)
          for k in ("argus:begin overlap_gemm/mainloop", "argus:end overlap_gemm/mainloop", "argus:begin overlap_gemm/epilogue")}
    copies = [i for i, t in enumerate(lines) if "ttg.async_copy_global_to_local" in t]
    waits = [i for i, t in enumerate(lines) if "ttng.warp_group_dot_wait" in t]
    assert at["argus:begin overlap_gemm/mainloop"] < min(copies)
    assert max(waits) < at["argus:end overlap_gemm/mainloop"] < at["argus:begin overlap_gemm/epilogue"]


def test_traced_variant_differs_from_plain_only_by_the_trace_stores(gb):
    v = gb.variant
    assert [(s.kind, s.name) for s in v.sites] == [
        ("begin", "overlap_gemm"), ("begin", "overlap_gemm/mainloop"), ("end", "overlap_gemm/mainloop"),
        ("begin", "overlap_gemm/epilogue"), ("end", "overlap_gemm/epilogue"), ("end", "overlap_gemm")]
    assert all(s.loop_line is None and s.slots == 1 for s in v.sites)
    assert v.words_per_cta == 1 + 2 * 6
    plain = gb.plain_ttgir.splitlines()
    traced = v.ttgir.splitlines()
    removed = [t for t in difflib.ndiff(plain, traced) if t.startswith("- ")]
    added = [t[2:] for t in difflib.ndiff(plain, traced) if t.startswith("+ ")]
    # one changed line (the signature gains the buffer), every other added line is trace code
    assert len(removed) == 1 and "tt.func public @overlap_gemm_kernel" in removed[0]
    sig = [t for t in added if "tt.func public" in t]
    assert len(sig) == 1 and sig[0] == removed[0][2:].replace(") attributes", f", {RT.REGION_ARG}: !tt.ptr<i64>) attributes", 1)
    assert all("%argus_rt" in t for t in added if t not in sig)
    assert sum("tt.store" in t for t in added) == 1 + 2 * 6  # SM header + (tag, ns) per marker
    ptx = gb.traced.asm["ptx"]
    assert ptx.count("%globaltimer") == 6 and ptx.count("pmevent.mask") == 18
    assert "overlap_gemm_kernel_param_6" in ptx  # the extra int64 buffer argument
    assert gb.traced.metadata.shared == gb.plain.metadata.shared  # same pipeline, same shared memory


# ---- decoding and statistics on a buffer written the way the traced kernel writes it -----------
def _buffer(sites, n_ctas: int, launch_t0: int, main_ns, epi_ns) -> np.ndarray:
    """int64 words per CTA: SM id + 1, then (tag, ns) per marker in slot order (independent of the decoder)."""
    buf = np.zeros((n_ctas, 1 + 2 * len(sites)), dtype=np.int64)
    for c in range(n_ctas):
        t0 = launch_t0 + 100 * c
        t = {"begin overlap_gemm": t0, "begin overlap_gemm/mainloop": t0 + 50,
             "end overlap_gemm/mainloop": t0 + 50 + main_ns[c],
             "begin overlap_gemm/epilogue": t0 + 60 + main_ns[c],
             "end overlap_gemm/epilogue": t0 + 60 + main_ns[c] + epi_ns[c],
             "end overlap_gemm": t0 + 70 + main_ns[c] + epi_ns[c]}
        buf[c, 0] = 7 + c + 1
        for s in sites:
            buf[c, 1 + 2 * s.first_slot] = (1 if s.kind == "begin" else 2) << 32 | region_id(s.name)
            buf[c, 2 + 2 * s.first_slot] = t[f"{s.kind} {s.name}"]
    return buf.ravel()


def test_decode_and_summarize_a_hand_made_buffer(gb):
    sites, n = gb.variant.sites, 4
    main = [10_000, 11_000, 12_000, 13_000]
    epi = [1_000, 1_200, 1_400, 1_600]
    cols = {}
    for lau, t0 in enumerate((10**12, 10**12 + 10**6)):
        for k, v in RT.decode_region_buffer(_buffer(sites, n, t0, main, epi), n, sites, launch=lau).items():
            cols.setdefault(k, []).extend(v)
    d = G.region_durations(cols, sites)
    assert sorted(d["overlap_gemm/mainloop"]) == sorted(main * 2)
    assert sorted(d["overlap_gemm/epilogue"]) == sorted(epi * 2)
    spans = G.launch_span_ns(cols, region_id("overlap_gemm"))
    assert spans == [300 + 70 + main[-1] + epi[-1]] * 2  # first CTA's begin to last CTA's end
    rec = G.summarize(d, spans, traced_ms=[0.030, 0.031, 0.032], plain_ms=[0.025, 0.026, 0.027], n_ctas=n, sm_count=132)
    r = rec["regions"]
    assert r["overlap_gemm/mainloop"]["mean_ns"] == pytest.approx(np.mean(main))
    assert r["overlap_gemm/epilogue"]["p50_ns"] == pytest.approx(np.median(epi))
    assert r["overlap_gemm/mainloop"]["count"] == 2 * n
    assert {v["qualification"] for v in r.values()} == {"observed"}
    assert rec["epilogue_share"]["value"] == pytest.approx(np.mean(epi) / (np.mean(main) + np.mean(epi)))
    assert rec["trace_cost_ms"]["value"] == pytest.approx(0.031 - 0.026)
    assert rec["kernel"].startswith("triton") and "not cuBLAS" in rec["kernel"]
    assert rec["waves"] == pytest.approx(n / 132)
    rec |= {"shape": [512, 4096, 256], "check": {"rel_err": 2.1e-3}}
    table = G.format_table([rec]).splitlines()
    assert len(table) == 2 and table[0].split()[0] == "M,K,N"
    assert table[1].split()[:4] == ["512,4096,256", "4", "0.03", f"{np.mean(main) / 1e3:.2f}"]


def test_summarize_refuses_a_missing_region():
    with pytest.raises(G.GemmRegionError, match=r"no intervals for region\(s\) \['overlap_gemm/epilogue'\]"):
        G.summarize({"overlap_gemm": [5], "overlap_gemm/mainloop": [3]}, [5], [0.1], [0.1], 1, 132)


# ---- input checks (CPU tensors are enough to reach every check) --------------------------------
def _bf(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


@pytest.mark.parametrize("a, b, match", [
    (lambda: _bf(256, 512), lambda: _bf(256, 128), r"inner dimensions differ: A is \[256, 512\], B is \[256, 128\]"),
    (lambda: torch.randn(256, 512, dtype=torch.float16), lambda: _bf(512, 128), r"A has dtype torch.float16"),
    (lambda: _bf(256, 512), lambda: torch.randn(512, 128), r"B has dtype torch.float32"),
    (lambda: _bf(256, 100), lambda: _bf(100, 128), r"K=100 must be a multiple of the K tile 64.*nearest valid: 64"),
    (lambda: _bf(256, 512), lambda: _bf(512, 100), r"N=100 must be a multiple of 16.*nearest valid: 96"),
    (lambda: _bf(512), lambda: _bf(512, 128), r"A must be 2-D, got shape \(512,\)"),
    (lambda: _bf(512, 256).t(), lambda: _bf(512, 128), r"A must be contiguous"),
    (lambda: [[1.0]], lambda: _bf(512, 128), r"A must be a torch.Tensor, got list"),
])
def test_bad_inputs_raise_clear_errors(a, b, match):
    with pytest.raises(G.GemmRegionError, match=match):
        G.check_inputs(a(), b())


def test_bad_out_and_run_arguments():
    a, b = _bf(256, 512), _bf(512, 128)
    assert G.check_inputs(a, b) == (256, 512, 128)
    with pytest.raises(G.GemmRegionError, match=r"out has shape \(128, 128\), expected \(256, 128\)"):
        G.check_inputs(a, b, _bf(128, 128))
    big = torch.empty(2**16, 2**15, dtype=torch.bfloat16, device="meta")  # 2**31 elements, no storage
    with pytest.raises(G.GemmRegionError, match=r"A has 2147483648 elements; .*int32"):
        G.check_inputs(big, _bf(2**15, 16))
    with pytest.raises(G.GemmRegionError, match="runs on CUDA tensors, got device cpu"):
        G.measure_gemm_regions(a, b)
    with pytest.raises(G.GemmRegionError, match="repeats must be an int >= 1, got 0"):
        G.measure_gemm_regions(a, b, repeats=0)
    with pytest.raises(G.GemmRegionError, match="plain_iters must be an int >= 1, got -1"):
        G.measure_gemm_regions(a, b, plain_iters=-1)


def test_measure_control_flow_with_a_cpu_stand_in_for_the_device(gb, monkeypatch):
    """measure_gemm_regions end to end on the CPU: the real build and decoder, a stand-in 'kernel'
    (torch.mm + a trace buffer written like the traced kernel writes it) and stand-in CUDA timing."""
    n_main, n_epi = 9_000, 700
    times = iter(np.linspace(0.05, 0.08, 200).tolist())
    launches = {"plain": 0, "traced": 0}

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            pass

        def elapsed_time(self, other):
            return next(times)

    def fake_launch(compiled, a, b, out, region_out=None):
        out.copy_(torch.mm(a.float(), b.float()).to(torch.bfloat16))
        if region_out is not None:
            assert compiled is gb.traced and region_out.numel() == G.grid(*out.shape)[0] * gb.variant.words_per_cta
            nc = G.grid(*out.shape)[0]
            region_out.copy_(torch.from_numpy(_buffer(gb.variant.sites, nc, 10**12, [n_main] * nc, [n_epi] * nc)))
        launches["traced" if region_out is not None else "plain"] += 1

    class Props:
        multi_processor_count = 132

    monkeypatch.setattr(G, "require_cuda", lambda t: None)
    monkeypatch.setattr(G, "cached_build", lambda cap: gb)
    monkeypatch.setattr(G, "launch", fake_launch)
    for name, value in (("Event", Event), ("synchronize", lambda *a: None), ("_sleep", lambda c: None),
                        ("get_device_capability", lambda d: (9, 0)), ("get_device_properties", lambda d: Props),
                        ("get_device_name", lambda d: "stand-in")):
        monkeypatch.setattr(torch.cuda, name, value, raising=False)
    calls = []
    a, b = _bf(300, 128), _bf(128, 256)
    rec = G.measure_gemm_regions(a, b, repeats=3, plain_iters=5, concurrent=lambda: calls.append(1))
    n_ctas = G.grid(300, 256)[0]
    assert n_ctas == 3 * 2
    assert launches == {"plain": 1 + 1 + 5, "traced": 1 + 3}  # check, untimed pair, timed
    assert len(calls) == (1 + 3) + (1 + 5)  # before every timed-or-warm-up launch, same count on every rank
    assert rec["regions"]["overlap_gemm/mainloop"]["mean_ns"] == n_main
    assert rec["regions"]["overlap_gemm/epilogue"]["count"] == 3 * n_ctas
    assert rec["traced_event_ms"]["launches"] == 3 and rec["plain_event_ms"]["launches"] == 5
    assert rec["shape"] == [300, 128, 256] and rec["check"]["rel_err"] <= G.REL_TOL and rec["concurrent"]
    assert rec["launch_hidden_by_spin"] is True


# ---- the measure.py hook -----------------------------------------------------------------------
def test_gemm_shapes_of_a_configuration():
    assert gemm_shapes(2048, 8192, 8192, OverlapConfig(8, 16, 2)) == {"local": (2048, 8192, 8192),
                                                                      "step": (512, 8192, 8192)}
    assert gemm_shapes(1024, 64, 32, OverlapConfig(1, 0, 1))["step"] == (1024, 64, 32)
    with pytest.raises(OverlapShapeError, match="M_shard=1000 rows cannot be split into S=16"):
        gemm_shapes(1000, 64, 32, OverlapConfig(16, 0, 1))


def test_hook_says_why_it_did_not_measure_on_cpu():
    rec = gemm_region_record(_bf(256, 512), _bf(512, 128), OverlapConfig(2, 0, 1))
    assert rec["available"] is False and "needs CUDA tensors, got device cpu" in rec["reason"]
    assert "not the cuBLAS" in rec["kernel"]
    with pytest.raises(OverlapShapeError, match="dtype mismatch"):
        gemm_region_record(_bf(256, 512), torch.randn(512, 128), OverlapConfig(2, 0, 1))


def test_cli_without_a_gpu_says_so(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the CLI would measure")
    assert G.main(["--shape", "256,512,128"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        G.main(["--shape", "256,512"])
    assert "--shape must be M,K,N (three integers), got '256,512'" in capsys.readouterr().err


def test_hook_measures_each_shape_with_fresh_random_rows():
    seen = []

    def fake_measure(a, b, repeats, plain_iters, concurrent):
        assert a.dtype == torch.bfloat16 and a.abs().sum() > 0  # fresh random rows, never zeros
        seen.append((tuple(a.shape), tuple(b.shape), repeats, plain_iters, concurrent))
        return {"shape": [a.shape[0], a.shape[1], b.shape[1]]}

    a, b = _bf(256, 512), _bf(512, 128)
    rec = gemm_region_record(a, b, OverlapConfig(4, 8, 2), repeats=2, plain_iters=3, measure=fake_measure)
    assert seen == [((256, 512), (512, 128), 2, 3, None), ((128, 512), (512, 128), 2, 3, None)]
    assert rec["available"] and rec["config"] == "S4_R8_P2" and rec["concurrent"] == "none (GEMM alone)"
    assert rec["shapes"] == {"local": {"shape": [256, 512, 128]}, "step": {"shape": [128, 512, 128]}}


def test_tune_cli_has_the_flag_off_by_default():
    import inspect

    from overlap import tune

    src = inspect.getsource(tune.main)
    assert '"--gemm-regions", action="store_true"' in src and "if args.gemm_regions:" in src


# ---- GPU ---------------------------------------------------------------------------------------
def _rand(m, k, n, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, generator=g, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, generator=g, device="cuda").to(torch.bfloat16)
    return a, b


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("m, k, n", [(1000, 512, 384), (512, 4096, 4096), (2048, 1024, 1040)])
def test_gpu_output_matches_torch_mm(m, k, n):
    a, b = _rand(m, k, n, seed=m + k + n)
    ref = torch.mm(a.float(), b.float())  # the plain reference first
    gb = G.cached_build(90)
    y = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    G.launch(gb.plain, a, b, y)
    torch.cuda.synchronize()
    assert not torch.isnan(y).any()
    rel = float((y.float() - ref).norm() / ref.norm())
    assert rel <= G.REL_TOL, f"rel err {rel:.2e} > {G.REL_TOL}"  # bf16 output rounding: ~2e-3
    assert G.check_output(y, a, b)["rel_err"] == pytest.approx(rel)


@pytest.mark.gpu
@pytest.mark.hopper
def test_gpu_regions_positive_and_below_the_event_time():
    m, k, n = 2048, 8192, 8192
    a, b = _rand(m, k, n, seed=3)
    ref = torch.mm(a.float(), b.float())
    rec = G.measure_gemm_regions(a, b, repeats=3, plain_iters=10)  # checks against torch.mm inside
    assert rec["check"]["rel_err"] <= G.REL_TOL
    y = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    G.launch(G.cached_build(90).plain, a, b, y)
    assert float((y.float() - ref).norm() / ref.norm()) <= G.REL_TOL
    n_ctas = G.grid(m, n)[0]
    event_ns = rec["traced_event_ms"]["median"] * 1e6
    main, epi = (rec["regions"][f"overlap_gemm/{r}"] for r in ("mainloop", "epilogue"))
    for r in (main, epi):
        assert r["count"] == n_ctas * 3
        assert 0 < r["mean_ns"] < event_ns
    assert main["mean_ns"] + epi["mean_ns"] < event_ns
    assert rec["regions"]["overlap_gemm"]["mean_ns"] >= main["mean_ns"] + epi["mean_ns"]
    assert 0 < rec["traced_span_ms"]["median"] <= rec["traced_event_ms"]["median"]
    assert rec["plain_event_ms"]["median"] > 0


# ---- 2 GPUs: the hook with an all-gather running on the R-CTA group meanwhile ------------------
def _hook_worker(rank, world, port, q):
    import os
    import traceback

    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                          LOCAL_RANK=str(rank))
        from overlap.safety import init_distributed

        init_distributed("nccl", timeout_s=60)
        import torch.distributed as dist

        from overlap.groups import CommGroupPool

        dev = torch.device("cuda", rank)
        m_shard, k, n = 1024, 2048, 1024
        g = torch.Generator(device=dev).manual_seed(rank + 1)
        a = torch.randn(m_shard, k, generator=g, device=dev).to(torch.bfloat16)
        b = torch.randn(k, n, generator=torch.Generator(device=dev).manual_seed(9), device=dev).to(torch.bfloat16)
        pool = CommGroupPool((0, 8))
        cfg = OverlapConfig(4, 8, 2)
        rec = gemm_region_record(a, b, cfg, group=pool.parent, comm_group=pool.group(8), repeats=2, plain_iters=4)
        q.put((rank, "ok", rec))
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        q.put((rank, "error", traceback.format_exc()))


@pytest.mark.gpu2
@pytest.mark.hopper
def test_gpu2_hook_records_both_shapes_while_an_all_gather_runs():
    from tests.rank_procs import run_ranks

    out = run_ranks(_hook_worker, 2, wait_s=240, join_s=20)
    for rank in range(2):
        status, rec = out[rank]
        assert status == "ok", rec
        assert rec["available"] and rec["concurrent"].startswith("nccl all_gather")
        assert set(rec["shapes"]) == {"local", "step"}
        assert rec["shapes"]["step"]["shape"] == [1024 * 2 // 4, 2048, 1024]
        for r in rec["shapes"].values():
            assert r["check"]["rel_err"] <= G.REL_TOL and r["concurrent"]
            assert r["regions"]["overlap_gemm/mainloop"]["mean_ns"] > 0
            slow = r["slowest_rank"]
            assert slow["regions/overlap_gemm/mainloop/mean_ns"] >= r["regions"]["overlap_gemm/mainloop"]["mean_ns"]
