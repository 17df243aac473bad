"""The Triton kind's checked run of a program's compiled kernel, and its cubin.

A Triton program's launch names a module (``"module": "tma_matmul.py"``) that provides the protocol
of docs/programs.md: ``make_inputs(seed) -> {name: tensor}`` (fresh random, outputs poisoned),
``run(compiled, inputs, probe_out=None) -> output tensor`` (launches ``compiled[grid](*args)``),
``reference(**inputs it names) -> expected output`` (plain PyTorch). Argus compiles the kernel itself,
as the JIT would for the launch (:func:`argus_rt.kinds.triton.program.program_compiled`); the module's
own ``compile_reference``, if any, is not called. Its markers are always the PMTRIG words
(:mod:`argus_rt.kinds.triton.regions`), so the compiled kernel is its marker-only variant; region
tracing of Triton kernels is a TTGIR transform (:mod:`argus_rt.kinds.triton.region_trace`), and the
probe variants are :mod:`argus_rt.kinds.triton.probes`, not variants built here.
"""
from __future__ import annotations

from pathlib import Path

from ...backends.base import BackendUnavailableError
from ..errors import ProgramRunError, ReferenceMismatchError

TRITON_PROTOCOL = ("make_inputs", "run", "reference")
TRITON_VARIANTS = ("base", "marker_only", "trace_free")


def triton_module(program):
    """The example module of a Triton program, checked for :data:`TRITON_PROTOCOL`."""
    from .program import import_module

    if program.kind != "triton":
        raise ProgramRunError(f"program {program.name!r} is of kind {program.kind!r}, not 'triton'")
    mod = import_module(program)
    missing = [f for f in TRITON_PROTOCOL if not callable(getattr(mod, f, None))]
    if missing:
        raise ProgramRunError(f"{program.launch['module']} lacks {missing}; a Triton program module provides "
                              f"{', '.join(TRITON_PROTOCOL)} (docs/programs.md)")
    return mod


def triton_compile(program, variant: str):
    """(kernel module, the CompiledKernel the JIT would run for the program's launch)."""
    from .program import program_compiled

    if variant not in TRITON_VARIANTS:
        raise ProgramRunError(f"variant {variant!r} of a Triton program is not supported here; valid: "
                              f"{', '.join(TRITON_VARIANTS)} (the region-traced variant is built from TTGIR by "
                              "argus_rt.kinds.triton.region_trace)")
    return triton_module(program), program_compiled(program)


def triton_cubin(program, variant: str) -> Path:
    """The cubin Triton builds for ``program`` (no GPU needed), saved in the build cache under its own
    hash (Triton's cache decides when it is rebuilt; this gives it a stable path for the mapping run)."""
    import hashlib

    from ...build_cache import BuildSpec, fetch_or_build

    _, compiled = triton_compile(program, variant)
    data = compiled.asm["cubin"]
    name = f"{program.name}.cubin"
    spec = BuildSpec("triton", params={"cubin_sha256": hashlib.sha256(data).hexdigest(), "name": name})
    return fetch_or_build(spec, (name,), lambda staging: (staging / name).write_bytes(data)).path(name)


def run_triton_once(program, variant: str, *, rtol: float | None = None, check_jit: bool = True) -> dict:
    """Compile, launch once on fresh inputs, compare with the module's plain reference, then check the
    kernel's TTGIR equals the JIT's (:mod:`argus_rt.kinds.triton.jit_equivalence`).

    ``phase_stamps`` ({phase: ``time.time()`` at its end}: ``torch`` (import, CUDA visible), ``compile``
    (module import, specialisation, Triton's cached compile), ``inputs``, ``launch`` (the recorded
    launch: under ncu, its replay), ``reference``, ``jit_check``) split a profiled run's time
    (:class:`argus_rt.backends.pcmap.StepClock`, ``runner_run.<phase>``)."""
    import inspect
    import time

    stamps: dict[str, float] = {}

    def phase(name: str) -> None:
        stamps[name] = time.time()

    import torch

    if not torch.cuda.is_available():
        raise BackendUnavailableError(f"no CUDA GPU visible to torch {torch.__version__}")
    from .jit_equivalence import check_against_jit

    phase("torch")
    mod, compiled = triton_compile(program, variant)
    phase("compile")
    inputs = mod.make_inputs()
    phase("inputs")
    out = mod.run(compiled, inputs)  # the launch a profiler (ncu -c 1) records: Argus's kernel, first
    phase("launch")
    params = inspect.signature(mod.reference).parameters
    want = mod.reference(**{k: v for k, v in inputs.items() if k in params})
    rtol = float(program.launch.get("rtol", 1e-2)) if rtol is None else rtol
    err = ((out.double() - want.double()).norm() / want.double().norm()).item()
    if not err <= rtol:  # NaN fails too
        raise ReferenceMismatchError(f"Triton output differs from the reference: relative error {err:.3g} > {rtol}")
    phase("reference")
    # after the recorded launch, and untimed (a profiler perturbs times): the JIT builds the same TTGIR
    jit = check_against_jit(program, mod, timing=False) if check_jit else None
    phase("jit_check")
    return {"symbol": program.launch.get("kernel"), "max_rel_err": err, "jit_check": jit, "phase_stamps": stamps}
