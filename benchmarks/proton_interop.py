#!/usr/bin/env python3
"""Host cost per launch: the plain kernel, Argus's region trace of it, and Proton's instrumentation mode.

Kernel: examples/triton_proton, a row softmax (512 rows x 1000 fp16 columns, one CTA of 4 warps per
row) with six nested regions. Two sources of the same kernel: softmax_scopes.py carries Proton scopes
(triton.profiler.language; with Proton off they compile to nothing, so it is also the plain kernel),
softmax_markers.py carries Argus markers on the same lines (argus_program.markers.json). Each output
is checked against the PyTorch reference on fresh random inputs before anything is timed.

Measured per launch, host wall clock (time.perf_counter), each launch synchronised, in one process:
  plain            the module's run(): poison y, launch, synchronise, NaN check (Proton off)
  argus_trace      what Argus's Triton region trace does per launch (kernel_check.timed_variant_columns):
                   zeroed record buffer, run() of the region-traced TTGIR variant, output compared with
                   the plain kernel's, buffer copied to the host, decoded into occurrences
                   (per CTA, one %globaltimer read per marker)
  proton_launch    run() of the Proton-instrumented kernel inside a Proton session (backend
                   "instrumentation", data "trace"), Proton's launch hooks included: they copy the
                   profile buffer to the host and parse it
  proton_finalize  proton.finalize (Chrome-trace file written) plus Argus reading it into occurrences
                   (argus_rt.backends.proton), divided by the launches of the session
  proton_total     proton_launch + proton_finalize: Proton's host cost per launch as Argus uses it
                   (per warp, one clock read per scope record)
Each measurement is repeated --repeats times (one session of --launches launches each for Proton); a
row's value is the median over repeats of each repeat's median (or per-launch share), with the spread.

Usage: python benchmarks/proton_interop.py [--launches 10] [--repeats 5]   (needs a CUDA GPU and Proton)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.record import gpu_name, record, spread  # noqa: E402

EXAMPLE = ROOT / "examples" / "triton_proton"


def _require_gpu() -> None:
    """Exit 2 with one line unless a CUDA GPU and Proton are here (this benchmark never runs in CI)."""
    try:
        import torch
    except ImportError:
        print("proton_interop: needs torch with CUDA; torch is not installed", file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        print(f"proton_interop: needs a CUDA GPU; torch {torch.__version__} sees none", file=sys.stderr)
        sys.exit(2)
    try:
        import triton.profiler  # noqa: F401
    except ImportError as exc:
        print(f"proton_interop: needs Proton (triton.profiler): {exc}", file=sys.stderr)
        sys.exit(2)


def _timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def plain_ms(program, launches: int) -> tuple[list[float], float]:
    """Per-launch host ms of the plain kernel (Proton off), after a checked warm-up launch."""
    from argus_rt.kinds.triton.kernel_check import check_module_reference
    from argus_rt.kinds.triton.program import load_kernel, target_of
    from argus_rt.kinds.triton.specialization import jit_compile

    mod, fn, args, kwargs = load_kernel(program)
    kernel = jit_compile(fn, args, kwargs, target_of(program))
    inputs = mod.make_inputs()
    rel = check_module_reference(mod, inputs, mod.run(kernel, inputs))
    return _timed(lambda: mod.run(kernel, inputs), launches), rel


def argus_trace_ms(markers, launches: int, workdir: Path) -> tuple[list[float], int]:
    """Per-launch host ms of Argus's region trace of the marker twin (module docstring), and the
    occurrences one launch decodes."""
    import torch

    from argus_rt.kinds.triton.kernel_check import check_module_reference, launched_ctas, program_variant
    from argus_rt.kinds.triton.program import import_module, program_compiled, program_ttgir
    from argus_rt.kinds.triton.region_trace import decode_region_buffer, make_region_trace

    mod = import_module(markers)
    ttgir, iterations = program_ttgir(markers)
    variant = make_region_trace(ttgir, iterations)
    ref = program_compiled(markers)
    traced = program_variant(markers, variant.ttgir, workdir, "region_traced")
    inputs = mod.make_inputs()
    expected = mod.run(ref, inputs).clone()
    check_module_reference(mod, inputs, expected)
    n_ctas = launched_ctas(ref, "the marker twin")
    rows = []

    def one():
        out = torch.zeros(n_ctas * variant.words_per_cta, dtype=torch.int64, device="cuda")
        got = mod.run(traced, inputs, out)
        torch.cuda.synchronize()
        if not torch.equal(got, expected):
            raise RuntimeError("the region-traced variant changed the kernel's output")
        rows.append(len(decode_region_buffer(out.cpu().numpy(), n_ctas, variant.sites)["region_id"]))

    one()  # loads the module: not timed
    return _timed(one, launches), rows[-1]


def proton_ms(program, launches: int, workdir: Path) -> dict:
    """One Proton session of ``launches`` launches: per-launch ms, and finalize + conversion ms per launch."""
    from argus_rt.backends.proton import proton_occurrences, read_proton_trace
    from argus_rt.backends.proton_run import proton_session
    from argus_rt.kinds.proton.scopes import region_of_scope

    phases: dict[str, list[float]] = {}
    result = proton_session(program, workdir, launches, timer=lambda phase, s: phases.setdefault(phase, []).append(s * 1e3))
    t0 = time.perf_counter()
    occ = proton_occurrences(read_proton_trace(workdir / result["trace_file"]),
                             {s: (r.name, r.id) for s, r in region_of_scope(program).items()},
                             kernel=result["kernel"], launches=launches, ctas=result["ctas"],
                             num_warps=result["num_warps"], launch_scope=result["launch_scope"],
                             warmup_launches=result["warmup_launches"])
    convert = (time.perf_counter() - t0) * 1e3
    if occ["problems"]:
        raise RuntimeError(f"Proton's trace: {occ['problems']}")
    return {"launch": phases["launch"], "finalize_per_launch": (phases["finalize"][0] + convert) / launches,
            "start": phases["start"][0], "occurrences": len(occ["columns"]["region_id"]) // launches,
            "trace_bytes": (workdir / result["trace_file"]).stat().st_size, "triton": result["triton"],
            "mode": result["mode"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=10, help="timed launches per repeat (default 10)")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of each measurement (default 5)")
    args = ap.parse_args(argv)
    _require_gpu()
    from argus_rt.program import load_program

    program = load_program(EXAMPLE)
    markers = load_program(EXAMPLE / "argus_program.markers.json")
    per: dict[str, list[float]] = {k: [] for k in ("plain", "argus_trace", "proton_launch", "proton_finalize",
                                                    "proton_total")}
    facts: dict = {}
    with tempfile.TemporaryDirectory(prefix="argus_proton_interop_") as tmp:
        for r in range(args.repeats):
            plain, rel = plain_ms(program, args.launches)
            argus, argus_rows = argus_trace_ms(markers, args.launches, Path(tmp) / "argus")
            prot = proton_ms(program, args.launches, Path(tmp) / f"proton{r}")
            per["plain"].append(statistics.median(plain))
            per["argus_trace"].append(statistics.median(argus))
            per["proton_launch"].append(statistics.median(prot["launch"]))
            per["proton_finalize"].append(prot["finalize_per_launch"])
            per["proton_total"].append(statistics.median(prot["launch"]) + prot["finalize_per_launch"])
            facts = {"rel_err": rel, "argus_rows": argus_rows, **{k: prot[k] for k in ("occurrences", "trace_bytes",
                                                                                       "triton", "mode", "start")}}
    plain_median = statistics.median(per["plain"])
    what = {"plain": "plain kernel (Proton off)",
            "argus_trace": f"Argus region trace, marker twin ({facts['argus_rows']} occurrences/launch, per CTA)",
            "proton_launch": "Proton instrumentation: launch incl. Proton's hooks",
            "proton_finalize": "Proton instrumentation: finalize + Argus reading the trace, per launch",
            "proton_total": f"Proton instrumentation: total ({facts['occurrences']} occurrences/launch, per warp)"}
    rows = []
    for key, values in per.items():
        ms = statistics.median(values)
        rows.append({"path": what[key], "host_ms_per_launch": round(ms, 4),
                     "x_plain": round(ms / plain_median, 1) if key != "plain" else 1.0,
                     "spread": {"host_ms_per_launch": spread(values)}})
    print(f"{'path':<78} {'host ms/launch':>15} {'x plain':>8}")
    for row in rows:
        print(f"{row['path']:<78} {row['host_ms_per_launch']:>15.4f} {row['x_plain']:>8.1f}")
    notes = (f"GPU {gpu_name()}; Triton {facts['triton']} with Proton, mode {facts['mode']!r}; "
             f"{args.launches} launches x {args.repeats} repeats, medians over repeats of per-repeat medians. "
             f"Kernel: examples/triton_proton (row softmax, 512 CTAs x 4 warps, 6 nested regions), checked against "
             f"its PyTorch reference (rel. err {facts['rel_err']:.2e}) before timing. Proton's Chrome trace of one "
             f"{args.launches}-launch session: {facts['trace_bytes'] / 1e6:.1f} MB; proton.start took "
             f"{facts['start']:.1f} ms (not in the rows). Argus records per CTA (%globaltimer, ns), Proton per "
             "warp (clock cycles): Proton's session writes 4x the records of Argus's here.")
    record("proton_interop", rows, title="Host cost per launch: plain vs Argus region trace vs Proton instrumentation",
           notes=notes, columns=["path", "host_ms_per_launch", "x_plain"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
