"""One Proton instrumentation session of a proton program, in a process of its own.

``python -m argus_rt.backends.proton_run --program P --outdir D --launches N [--mode M]`` (what
:class:`argus_rt.backends.proton.ProtonScopeTrace` runs): Proton's hooks, knobs and allocator are
process-wide and stay set after a session, so a session never runs in a long-lived worker.

The process

1. compiles the kernel as the JIT does for the launch, with Proton off (the scopes compile to
   nothing), runs it on fresh random inputs and checks it against the module's PyTorch reference;
2. starts a Proton session (``backend="instrumentation"``, ``data="trace"``), compiles the kernel
   again (the JIT's compile key now carries Proton's instrumentation mode, as a JIT launch under
   Proton would), and launches it ``1 + N`` times on fresh inputs, each launch inside a host scope
   ``argus_launch_<k>`` so Proton's trace says which launch each record belongs to (launch 0 loads
   the module and is not evidence); every output is checked against the reference;
3. finalizes the session to Proton's Chrome-trace file and writes ``result.json`` beside it.

A failure writes ``error.json`` (``{"error": "unavailable"|"reference"|"run", "message"}``) and exits 1.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

LAUNCH_SCOPE = "argus_launch_"  # host scope around launch k: the next-to-last frame of its records' call stack
SESSION_NAME = "proton"  # Proton writes <outdir>/proton.chrome_trace


class SessionError(RuntimeError):
    """A failure with its category (``unavailable``, ``reference`` or ``run``) for the parent."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


def _check_protocol(mod, module: str) -> None:
    missing = [f for f in ("make_inputs", "run", "reference") if not callable(getattr(mod, f, None))]
    if missing:
        raise SessionError("run", f"{module} lacks {missing}; a Triton kernel module provides make_inputs, run, "
                                  "reference (docs/programs.md)")


def _checked(mod, inputs: dict, out, what: str) -> float:
    from ..kinds.triton.kernel_check import ProbeError, check_module_reference

    try:
        return check_module_reference(mod, inputs, out)
    except ProbeError as exc:
        raise SessionError("reference", f"{what}: {exc}") from None


def proton_session(program, outdir: Path, launches: int, mode: str | None = None, *, timer=None) -> dict:
    """Steps 1-3 of the module docstring in this process; returns what ``result.json`` holds.
    ``timer``, when given, is called as ``timer(phase, seconds)`` for each instrumented launch
    (``"launch"``), the session start (``"start"``) and finalize (``"finalize"``): the host cost
    ``benchmarks/proton_interop.py`` reports."""
    import torch

    if not torch.cuda.is_available():
        raise SessionError("unavailable", f"no CUDA GPU visible to torch {torch.__version__}")
    try:
        import triton
        import triton.profiler as proton
        import triton.profiler.language as pl
    except ImportError as exc:
        raise SessionError("unavailable", f"Proton (triton.profiler) cannot be imported: {exc}") from None
    from ..kinds.triton.kernel_check import launched_ctas
    from ..kinds.triton.program import load_kernel, target_of
    from ..kinds.triton.specialization import jit_compile

    if launches < 1:
        raise SessionError("run", f"launches must be >= 1, got {launches!r}")
    mod, fn, args, kwargs = load_kernel(program)
    _check_protocol(mod, program.launch["module"])
    target = target_of(program)
    plain = jit_compile(fn, args, kwargs, target)
    inputs = mod.make_inputs()
    plain_err = _checked(mod, inputs, mod.run(plain, inputs), "the kernel with Proton off")

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    pl.enable_semantic("triton")  # Proton instruments Gluon kernels only unless told (triton.profiler.language)
    t0 = time.perf_counter()
    session = proton.start(str(outdir / SESSION_NAME), backend="instrumentation", mode=mode, data="trace")
    if timer:
        timer("start", time.perf_counter() - t0)
    if session is None:
        raise SessionError("unavailable", "proton.start() returned no session: Proton is disabled "
                                          "(TRITON_PROTON_DISABLE) or runs from its own command line")
    errors = []
    try:
        mode_str = triton.knobs.compilation.instrumentation_mode  # what the JIT's compile key now carries
        instrumented = jit_compile(fn, args, kwargs, target)
        for k in range(1 + launches):
            inputs = mod.make_inputs()
            t0 = time.perf_counter()
            with proton.scope(f"{LAUNCH_SCOPE}{k}"):
                out = mod.run(instrumented, inputs)
            if timer and k:
                timer("launch", time.perf_counter() - t0)
            errors.append(_checked(mod, inputs, out, f"instrumented launch {k}"))
        ctas = launched_ctas(instrumented, "the instrumented kernel")
    finally:
        t0 = time.perf_counter()
        proton.finalize(session, "chrome_trace")
        if timer:
            timer("finalize", time.perf_counter() - t0)
    traces = sorted(p.name for p in outdir.glob(f"{SESSION_NAME}*.chrome_trace"))
    if len(traces) != 1:
        raise SessionError("run", f"Proton wrote {len(traces)} Chrome-trace files ({traces}) in {outdir}, not one")
    return {"triton": triton.__version__, "mode": mode_str, "trace_file": traces[0], "format": "chrome_trace",
            "launches": launches, "warmup_launches": 1, "launch_scope": LAUNCH_SCOPE,
            "kernel": instrumented.name, "ctas": ctas, "num_warps": int(instrumented.metadata.num_warps),
            "plain_rel_err": plain_err, "max_rel_err": max(errors[1:])}


def main(argv: list[str] | None = None) -> int:
    from ..fsutil import atomic_write_text
    from ..program import ProgramVersion

    ap = argparse.ArgumentParser(prog="python -m argus_rt.backends.proton_run")
    ap.add_argument("--program", required=True, help="ProgramVersion JSON (ProgramVersion.to_dict())")
    ap.add_argument("--outdir", required=True)
    ap.add_argument("--launches", type=int, default=1, help="timed launches (after one warm-up launch)")
    ap.add_argument("--mode", default=None, help="Proton instrumentation mode string (default: Proton's default)")
    args = ap.parse_args(argv)
    outdir = Path(args.outdir)
    try:
        program = ProgramVersion.from_dict(json.loads(Path(args.program).read_text(encoding="utf-8")))
        result = proton_session(program, outdir, args.launches, args.mode)
    except SessionError as exc:
        atomic_write_text(outdir / "error.json", json.dumps({"error": exc.category, "message": str(exc)}))
        return 1
    except Exception as exc:  # the user's module or Proton: one line for the parent, the traceback on stderr
        import traceback

        traceback.print_exc()
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        atomic_write_text(outdir / "error.json", json.dumps({"error": "run", "message": f"{type(exc).__name__}: {first}"}))
        return 1
    atomic_write_text(outdir / "result.json", json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
