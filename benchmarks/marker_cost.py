#!/usr/bin/env python3
"""What one region marker costs, split into a fixed part and a per-marker part.

The reference-execution compute kernel (examples/cuda/reference_execution.cu; 128 CTAs x 256
threads, a chain of 4,096 dependent FMAs per thread) is built with 16, 64 and 256 region
occurrences per thread (the FMAs split evenly among them), trace-free and traced. One row per marker
path (PATHS): the shared-cursor markers (no ARGUS_WARP_STATE(); csrc/argus/argus_shared_cursor.cuh,
docs/marker_cost_anatomy.md) in the kernel's body, inside a __noinline__ helper and under divergence (half of each
warp in one region, half in another: each half records its own pairs with lane-group records), the register cursor
(ARGUS_WARP_STATE()) in the body, and the register cursor in helpers
(register_helper_inline and register_helper in a __forceinline__ and a __noinline__ helper taking ARGUS_STATE_PARAM,
register_helper_value in the __noinline__ helper taking it by value and returning its count) and under divergence
(register_divergent: the register cursor refuses that ring, so the row's check expects the decoder's refusal and the
row is not timed); the register_apart* rows are the body, by-value helper and divergent kernels built with the opt-in
-DARGUS_REG_APART=1 (lane groups recorded: register_apart_divergent is checked per lane group like shared_divergent),
and the register_lanes* rows the same three and the __forceinline__ helper with the opt-in -DARGUS_REG_LANES=1
(per-lane sub-rings: each lane group writes into its lowest lane's sub-ring; register_lanes_divergent checked per lane
group).
Row names before issue 20's default change (records up to the 2026-12-02 14:00 run):
shared / shared_helper measured a58e52b's shared-cursor markers (removed), lean_shared / lean_shared_helper /
lean_shared_divergent the -DARGUS_LEAN_MARKERS=1 build that is now the shared cursor, so today's shared,
shared_helper and shared_divergent continue the lean_* rows. Each path is compared with the trace-free build of
its own kernel. Each build runs armed (every warp records) and disarmed (tracing off: markers run, nothing is
claimed or stored).
shared_clock64 arms the shared row's build with clock="clock64", which sends every shared-cursor marker to the
slow path (a converged warp's cost there; armed only, as disarmed it is the shared row). The straight* rows are the
same four paths built with the opt-in -DARGUS_SHARED_STRAIGHT=1 (no vote and no branch between the cursor load and
the record store; a clock64 arm stays on the fast path); straight_vote is the body row with =2 (the slow-path
branch made uniform by a vote after the stores).
A least-squares line through added time vs. markers per warp gives the per-marker cost (slope)
and the fixed cost per launch (intercept: first-marker claim, scope exit, store drain).

Outputs are checked against a float64 NumPy model (rel. error < 1e-4) and armed rings are decoded and
paired (every warp: exactly the expected occurrences, per lane group for the divergent path) before
anything is timed. A path whose check fails is not timed: its rows say why (column `check`, the rest
unmeasured), the other paths are timed, and the exit status is 1 if any path failed. Timing: CUDA
events around each launch, queued behind a GPU busy-wait (so the events time the kernel, not Python's launch), median
over many launches, builds interleaved.

Usage: python benchmarks/marker_cost.py [--reps N] [--paths register,register_helper,...]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.event_timing import interleaved_event_times, median_us  # noqa: E402
from benchmarks.record import gpu_name, record, spread  # noqa: E402
from benchmarks.trace_overhead import fma_chain_reference  # noqa: E402

CTAS, THREADS, FMAS_PER_THREAD = 128, 256, 4096
OCCURRENCES = [16, 64, 256]
REG = {"REFEXEC_WARP_STATE": "1"}
# the register cursor's opt-in apart build (-DARGUS_REG_APART=1): divergent markers recorded per lane group
APART = {**REG, "ARGUS_REG_APART": "1"}
# the register cursor's opt-in lanes build (-DARGUS_REG_LANES=1): per-lane sub-rings, each lane group's records in its
# lowest lane's sub-ring (no shared memory, atomic or branch)
LANES = {**REG, "ARGUS_REG_LANES": "1"}
STRAIGHT = {"ARGUS_SHARED_STRAIGHT": "1"}  # opt-in shared-cursor fast path with no branch before the record store
# path -> (kernel, defines of the traced build)
PATHS = {
    # the shared-cursor markers (the lean_* rows of records before issue 20's default change)
    "shared": ("refexec_compute", {}),
    "shared_helper": ("refexec_compute_helper", {}),
    "shared_divergent": ("refexec_compute_divergent", {}),
    "shared_clock64": ("refexec_compute", {}),  # armed with clock64 (CLOCK): every marker takes the slow path
    # the opt-in straight-line shared cursor (-DARGUS_SHARED_STRAIGHT=1, docs/marker_cost_anatomy.md): the same four
    # rows; straight_clock64 stays on its fast path (the default's clock64 arm takes the slow path)
    "straight": ("refexec_compute", STRAIGHT),
    "straight_helper": ("refexec_compute_helper", STRAIGHT),
    "straight_divergent": ("refexec_compute_divergent", STRAIGHT),
    "straight_clock64": ("refexec_compute", STRAIGHT),
    # the same in the kernel body with the vote tail (=2: VOTE.ALL after the stores instead of BSSY/BSYNC)
    "straight_vote": ("refexec_compute", {"ARGUS_SHARED_STRAIGHT": "2"}),
    "register": ("refexec_compute", REG),
    # the register cursor in a __forceinline__ and a __noinline__ helper (ARGUS_STATE_PARAM: by reference; _value: by
    # value in, count returned, ARGUS_STATE_VALUE_PARAM), and under divergence (refused: REFUSED)
    "register_helper_inline": ("refexec_compute_helper_inline", REG),
    "register_helper": ("refexec_compute_helper", REG),
    "register_helper_value": ("refexec_compute_helper_value", REG),
    "register_divergent": ("refexec_compute_divergent", REG),
    # the apart build (APART): the body, the __noinline__ by-value helper, and half-warps in different regions (recorded
    # per lane group, not refused: the check verifies every warp's occurrences per lane group)
    "register_apart": ("refexec_compute", APART),
    "register_apart_helper_value": ("refexec_compute_helper_value", APART),
    "register_apart_divergent": ("refexec_compute_divergent", APART),
    # the lanes build (LANES): the same three kernels; the divergent one is checked per lane group, as above
    "register_lanes": ("refexec_compute", LANES),
    "register_lanes_helper_value": ("refexec_compute_helper_value", LANES),
    "register_lanes_helper_inline": ("refexec_compute_helper_inline", LANES),  # the helper path that can meet 20 ns
    "register_lanes_divergent": ("refexec_compute_divergent", LANES),
}
# paths armed with another clock than %globaltimer; armed only (disarmed, the build is its globaltimer row's)
CLOCK = {"shared_clock64": "clock64", "straight_clock64": "clock64"}
# paths whose rings the decoder must refuse (the check expects the refusal; the row reports it and is not timed)
REFUSED = ("register_divergent",)
REGION_OCCURRENCE, REGION_REFEXEC = 0xEAF59E52, 0x08F8A352  # examples/cuda/reference_execution_regions.h
SOURCE = ROOT / "examples" / "cuda" / "reference_execution.cu"


def inner_for(occ: int) -> int:
    return FMAS_PER_THREAD // (8 * occ)


def build(mode: int, occ: int, defines: dict):
    from argus_rt.kinds.cuda.build import CudaBuildSpec
    from argus_rt.kinds.cuda.build import build as cuda_build
    from argus_rt.launch import CubinModule

    name = f"markercost.m{mode}.o{occ}." + (".".join(f"{k}{v}" for k, v in sorted(defines.items())) or "default")
    spec = CudaBuildSpec(name, [SOURCE], argus_mode=mode, defines={**defines, "OCCURRENCES": str(occ)})
    return CubinModule.load(cuda_build(spec).cubin)


def check_output(torch, mod, occ, gen, kernel="refexec_compute") -> None:
    n = CTAS * THREADS
    a0, b, c = (gen.uniform(lo, hi, n) for lo, hi in ((0.1, 1.0), (0.9, 0.99), (0.01, 0.1)))
    dev = [torch.from_numpy(x.astype(np.float32)).cuda() for x in (a0, b, c)]
    out = torch.full((n,), float("nan"), device="cuda")
    mod.launch(kernel, grid=CTAS, block=THREADS, args=[out, *dev, np.int32(inner_for(occ))])
    torch.cuda.synchronize()
    ref = fma_chain_reference(*(x.cpu().double().numpy() for x in dev), FMAS_PER_THREAD)
    err = np.abs(out.cpu().numpy() - ref).max() / np.abs(ref).max()
    assert err < 1e-4, f"occurrences={occ}: rel. error {err:.2e} against the float64 model"


def expected_occurrences(path: str, occ: int) -> dict:
    """(region ID, coordinate, lanes) -> occurrences per warp that the path's kernel records."""
    from argus_rt.trace.decode import LANES_WHOLE_WARP

    if PATHS[path][0] == "refexec_compute_divergent":
        return {**{(REGION_OCCURRENCE, c, 0x0000FFFF): 1 for c in range(occ)},
                **{(REGION_REFEXEC, c, 0xFFFF0000): 1 for c in range(occ)}}
    return {(REGION_OCCURRENCE, c, LANES_WHOLE_WARP): 1 for c in range(occ)}


def check_refused(sess, path: str) -> str:
    """A REFUSED path: the decoder refuses the trace as divergent (one line, naming the warp); returns that line."""
    from argus_rt.trace.errors import DivergentMarkersError

    try:
        sess.decode()
    except DivergentMarkersError as e:
        assert "\n" not in str(e), str(e)
        return str(e)
    raise AssertionError(f"{path}: the divergent register-cursor trace decoded; it must be refused")


def check_trace(sess, path: str, occ: int) -> str | None:
    """Every warp's ring decodes, pairs, and holds exactly the occurrences the kernel ran (a REFUSED path: the
    decoder refuses it, and the refusal is returned)."""
    from collections import Counter

    from argus_rt.trace import pair_intervals

    if path in REFUSED:
        return check_refused(sess, path)
    t = sess.decode()
    assert not t.incomplete, t.problems[:3]
    assert len(t.rings) == CTAS * THREADS // 32, f"{path}: {len(t.rings)} rings"
    iv = pair_intervals(t).rows
    want = expected_occurrences(path, occ)
    for ring in np.unique(t.rings["ring"]):
        rows = iv[iv["ring"] == ring]
        got = Counter(zip(rows["region_id"].tolist(), rows["coord"].tolist(), rows["lanes"].tolist()))
        assert got == want, (f"{path}, ring {int(ring)}: missing {sorted(set(want) - set(got))[:4]}, "
                             f"unexpected {sorted(set(got) - set(want))[:4]}, "
                             f"miscounted {sorted(k for k in set(got) & set(want) if got[k] != want[k])[:4]}")
    return None


def check_failure(check) -> str | None:
    """None when ``check()`` passes; else why it failed, in one line. Only a check's own failures are caught
    (a wrong output or trace: the path's rows are then unmeasured and the run goes on)."""
    from argus_rt.trace.errors import CorruptTraceError, MismatchedMarkersError

    try:
        check()
    except (AssertionError, CorruptTraceError, MismatchedMarkersError) as e:
        text = " ".join(str(e).split()) or "assertion failed"
        return f"{type(e).__name__}: {text}"[:400].replace("|", "/")
    return None


def unmeasured_row(path: str, state: str, kernel: str, why: str, check: str = "failed") -> dict:
    """The row of a path whose check failed (or of a REFUSED path, ``check="refused"``): the same columns as a timed
    row, each unmeasured (None)."""
    row = {"cursor": path, "state": state, "kernel": kernel, "check": f"{check}: {why}"}
    row.update({f"added_us_occ{o}": None for o in OCCURRENCES})
    row.update({"per_marker_ns": None, "fixed_us": None, "spread": {}})
    return row


def fit(xs, ys) -> tuple[float, float]:
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(intercept)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=150, help="timed launches per build and state")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="comma-separated PATHS to check and time (default: all; the record then holds only these)")
    args = parser.parse_args()
    paths = {p: PATHS[p] for p in args.paths.split(",")}  # an unknown name is a KeyError
    import torch

    if not torch.cuda.is_available():
        print("marker_cost: needs a CUDA GPU; nothing was measured")
        return 2
    from argus_rt.trace import TraceConfig, TraceSession

    gen = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    runs = {}  # key -> (module, kernel, session or None, armed?)
    failed = {}  # path -> why its check failed (its rows are unmeasured)
    refused = {}  # REFUSED path -> the decoder's refusal (its rows report it, untimed)
    for occ in OCCURRENCES:
        free = build(0, occ, {})
        for kernel in sorted({"refexec_compute", *(k for k, _ in paths.values())}):  # the notes quote its time
            check_output(torch, free, occ, gen, kernel)
            runs[("free", kernel, occ)] = (free, kernel, None, False)
        for path, (kernel, defines) in paths.items():
            if path in failed:
                continue
            mod = build(2, occ, defines)
            # the divergent kernel's two half-warps each record every marker: 2048 records per warp at 256
            # occurrences (H200 2026-12-02: a 1024-record ring wrapped and the row went unmeasured)
            capacity = 2048 if kernel == "refexec_compute_divergent" else 1024
            if defines.get("ARGUS_REG_LANES") == "1":
                # the lanes build splits the ring into 32 per-lane sub-rings; a writer lane (lane 0, or each half's
                # lowest lane) needs 512 records and its end record at 256 occurrences: sub-rings of 1024 (512 KiB
                # per warp, 512 MiB for the 1024 warps)
                capacity = 32 * 1024
            sess = TraceSession(mod, TraceConfig(ctas=CTAS, threads_per_cta=THREADS, capacity=capacity,
                                                 clock=CLOCK.get(path, "globaltimer")))

            def check(sess=sess, mod=mod, kernel=kernel, path=path):
                sess.arm()
                check_output(torch, mod, occ, gen, kernel)
                refusal = check_trace(sess, path, occ)
                if refusal is not None:
                    refused[path] = refusal

            why = check_failure(check)
            if why is not None:
                failed[path] = f"occurrences={occ}: {why}"
                print(f"{path}: check FAILED, not timed: {failed[path]}", flush=True)
                continue
            if path in REFUSED:
                print(f"{path}: refused by the decoder, as expected (not timed): {refused[path]}", flush=True)
                continue
            runs[(path, "armed", occ)] = (mod, kernel, sess, True)
            if path not in CLOCK:
                runs[(path, "disarmed", occ)] = (mod, kernel, sess, False)
    runs = {key: run for key, run in runs.items() if key[0] not in failed}  # a later occurrence count failed

    n = CTAS * THREADS
    inputs = [torch.rand(n, device="cuda") * 0.09 + lo for lo in (0.5, 0.9, 0.01)]
    out = torch.empty(n, device="cuda")

    def timed(key):
        mod, kernel, sess, armed = runs[key]
        prepare = None if sess is None else (sess.arm if armed else sess.disarm)
        launch_args = [out, *inputs, np.int32(inner_for(key[-1]))]
        return prepare, lambda: mod.launch(kernel, grid=CTAS, block=THREADS, args=launch_args)

    times = interleaved_event_times({key: timed(key) for key in runs}, args.reps, sync_every=8)
    us = {key: median_us(samples) for key, samples in times.items()}

    rows = []
    for path, (kernel, _) in paths.items():
        for state in ("armed",) if path in CLOCK else ("armed", "disarmed"):
            if path in failed:
                rows.append(unmeasured_row(path, state, kernel, failed[path]))
                print(f"{path:22s} {state:8s} unmeasured: check failed", flush=True)
                continue
            if path in REFUSED:
                rows.append(unmeasured_row(path, state, kernel, refused[path], check="refused"))
                print(f"{path:22s} {state:8s} refused (as expected), not timed", flush=True)
                continue
            added = [us[(path, state, o)] - us[("free", kernel, o)] for o in OCCURRENCES]
            slope, intercept = fit([2 * o for o in OCCURRENCES], added)
            # Still keyed "cursor" (the earlier rows' column): a PATHS name.
            row = {"cursor": path, "state": state, "kernel": kernel, "check": "passed"}
            for o, a in zip(OCCURRENCES, added):
                row[f"added_us_occ{o}"] = a
            row.update({"per_marker_ns": slope * 1e3, "fixed_us": intercept})
            # added_us_occN is a difference of two builds' medians: the spread is that of each build's launches
            timed_builds = {f"us_occ{o}": (path, state, o) for o in OCCURRENCES}
            timed_builds.update({f"trace_free_us_occ{o}": ("free", kernel, o) for o in OCCURRENCES})
            row["spread"] = {name: spread(us for us, _ in times[key]) for name, key in timed_builds.items()}
            rows.append(row)
            print(f"{path:22s} {state:8s} " + "  ".join(f"occ={o}: +{a:6.2f} us" for o, a in zip(OCCURRENCES, added))
                  + f"  -> {slope * 1e3:6.1f} ns/marker, fixed {intercept:5.2f} us", flush=True)
    free = ", ".join(f"{o} occ: {us[('free', 'refexec_compute', o)]:.2f} us" for o in OCCURRENCES)
    notes = (f"Reference-execution compute kernel, {CTAS} CTAs x {THREADS} threads, {FMAS_PER_THREAD} dependent FMAs "
             f"per thread split over 16/64/256 occurrences (32/128/512 markers per warp). Trace-free: {free}. "
             "`added_us_occN` = median event time minus the trace-free build of the same kernel with the same "
             "occurrences (rows: shared = shared-cursor markers (no ARGUS_WARP_STATE()) in the kernel body, "
             "shared_helper = inside a __noinline__ helper, shared_divergent = half-warps in different regions, per "
             "marker of each half-warp (records before issue 20's default change name these lean_shared, "
             "lean_shared_helper, lean_shared_divergent; their shared / shared_helper rows measured a58e52b's "
             "markers, since removed), shared_clock64 = the shared row's build armed with clock64 (every marker on "
             "the slow path; armed only); straight / straight_helper / straight_divergent / straight_clock64 = the same four "
             "with -DARGUS_SHARED_STRAIGHT=1 (opt-in; straight_clock64 stays on the fast path), straight_vote = "
             "-DARGUS_SHARED_STRAIGHT=2 in the kernel body (a vote after the stores instead of BSSY/BSYNC); "
             "register = ARGUS_WARP_STATE(); "
             "register_helper_inline / register_helper = ARGUS_WARP_STATE() in a __forceinline__ / __noinline__ helper "
             "taking ARGUS_STATE_PARAM (by reference), register_helper_value = the __noinline__ helper taking it by "
             "value and returning its count (ARGUS_STATE_VALUE_PARAM), register_divergent = half-warps on the register "
             "cursor, whose trace the decoder must refuse (check `refused`, not timed); register_apart / "
             "register_apart_helper_value / register_apart_divergent = the body, the by-value helper and the half-warps "
             "with the opt-in -DARGUS_REG_APART=1 build, whose divergent markers are recorded per lane group, per "
             "marker of each half-warp); register_lanes / register_lanes_helper_value / register_lanes_helper_inline / "
             "register_lanes_divergent = the same three and the __forceinline__ helper with the opt-in "
             "-DARGUS_REG_LANES=1 build (per-lane sub-rings: a lane group's records go "
             "to its lowest lane's sub-ring, no shared memory or atomic), the divergent one checked per lane group; "
             "`check` = the path's output and decoded-trace check (a failed path is not timed); "
             "`per_marker_ns` / `fixed_us` = least-squares slope / intercept against markers per warp. "
             "Armed: every warp records (globaltimer, clock64 for shared_clock64); disarmed: tracing off.")
    not_recorded = {f"rows of {p}": f"its check failed, so it was not timed: {why}" for p, why in failed.items()}
    record("marker_cost", rows, title="Cost of one marker (fixed + per-marker fit)", notes=notes, gpu=gpu_name(),
           not_recorded=not_recorded or None)
    print(notes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
