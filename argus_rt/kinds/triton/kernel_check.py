"""Building and checking a Triton kernel module, shared by every Triton collector (region trace,
forced-wait probes, traced reference): compile TTGIR text, load the program's kernel module with its
protocol checked, and check a compiled kernel's output against the module's plain reference.

Below :mod:`.probes` and :mod:`.triton_region_trace`, which both use it (it was in ``probes``, which
made the two import each other).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .ttgir_module import TtgirError


class ProbeError(ValueError):
    """A probe that cannot be built; the message names the op, iteration and valid choices."""


def compile_ttgir(ttgir: str, workdir: str | Path, name: str, *, capability: int = 90):
    """Compile TTGIR text with Triton (works without a GPU); returns the ``CompiledKernel`` wrapped to
    launch like the JIT's kernel (:class:`argus_rt.kinds.triton.specialization.RuntimeArgsKernel`).

    The text is written atomically to ``workdir/name.ttgir`` because Triton compiles from a path.
    """
    import triton
    from triton.backends.compiler import GPUTarget

    from ...fsutil import atomic_write_text
    from .specialization import RuntimeArgsKernel

    path = Path(workdir) / f"{name}.ttgir"
    atomic_write_text(path, ttgir)
    # MLIR prints its diagnostics (which op, which line) on fd 2, not in the exception: capture them.
    with tempfile.TemporaryFile() as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            return RuntimeArgsKernel(triton.compile(str(path), target=GPUTarget("cuda", capability, 32)))
        except Exception as exc:  # Triton raises a plain RuntimeError
            os.dup2(saved, 2)
            err.seek(0)
            diag = err.read().decode(errors="replace").strip()
            raise TtgirError(f"Triton could not compile {path}: {exc}\n{diag[-3000:]}") from exc
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def program_variant(program, ttgir: str, workdir, name: str):
    """A variant of the program's kernel compiled from ``ttgir`` (its TTGIR, edited: markers, probes),
    launched as the JIT's kernel is (same grid meta-parameters; constexprs are compiled in)."""
    from .program import program_compiled

    reference = program_compiled(program)
    return reference.variant(compile_ttgir(ttgir, workdir, name, capability=int(program.launch.get("capability", 90))))


def _kernel_module(program):
    """The program's kernel module, checked for the protocol the GPU collectors call (docs/programs.md)."""
    from .program import import_module

    mod = import_module(program)
    missing = [f for f in ("make_inputs", "run", "reference") if not callable(getattr(mod, f, None))]
    if missing:
        raise ProbeError(f"{program.launch['module']} lacks {missing} of the kernel module protocol (make_inputs, run, "
                         "reference; docs/programs.md)")
    return mod


# Relative Frobenius error allowed between the compiled reference and the module's plain PyTorch
# reference (both accumulate in fp32 and round to fp16, so they differ by rounding only; a skipped or
# misplaced tile gives errors of order 0.1 to 1).
REFERENCE_REL_TOL = 1e-2


def check_module_reference(mod, inputs: dict, got) -> float:
    """Relative error of ``got`` against the module's plain ``reference``, called with the inputs its
    parameters name (``reference(x, w, b)`` gets ``inputs["x"]`` ...; the matmul examples' ``(a, b)``
    too); :class:`ProbeError` above the tolerance."""
    import inspect

    if not hasattr(mod, "reference"):
        raise ProbeError(f"{getattr(mod, '__file__', mod)} has no plain reference(...) to check the kernel against")
    params = inspect.signature(mod.reference).parameters
    missing = [p for p, v in params.items() if p not in inputs and v.default is inspect.Parameter.empty]
    if missing:
        raise ProbeError(f"reference() of {getattr(mod, '__file__', mod)} takes {missing}, which make_inputs() does "
                         f"not return; inputs: {sorted(inputs)}")
    want = mod.reference(**{k: v for k, v in inputs.items() if k in params}).float()
    rel = float((got.float() - want).norm() / want.norm())
    if not rel <= REFERENCE_REL_TOL:
        raise ProbeError(f"the reference kernel differs from its PyTorch reference: relative error {rel:.3g} "
                         f"> {REFERENCE_REL_TOL}")
    return rel


def launched_ctas(kernel, label: str) -> int:
    """The number of CTAs (programs) of ``kernel``'s last launch, as ``run()`` chose its grid."""
    grid = getattr(kernel, "launched_grid", None)
    if grid is None:
        raise ProbeError(f"{label}: run() did not launch the kernel it was given (call compiled[grid](...))")
    return grid[0] * grid[1] * grid[2]


def timed_variant_columns(mod, ref, variant, words_per_cta: int, label: str, seed, repeats: int, document,
                          error: type[Exception] = ProbeError) -> tuple[dict, float]:
    """Run the compiled reference once on fresh inputs (checked by :func:`check_module_reference`), then
    ``variant`` ``1 + repeats`` times with a ``words_per_cta`` int64 buffer per CTA of the reference's
    grid (the module's ``run`` picks the grid, as the user's launch does). Every launch must use that
    grid and reproduce the reference output bit for bit (instrumentation changes timing, not results),
    else ``error`` (:class:`ProbeError` unless given) naming ``label``. The first launch loads the module
    and is not evidence; the others' buffers go through ``document(out, launch, n_ctas)`` and their
    columns are concatenated. Returns (columns, rel. error). Shared by the probe, traced-reference and
    region-trace collectors."""
    import torch

    inputs = mod.make_inputs(seed)
    expected = mod.run(ref, inputs).clone()
    rel = check_module_reference(mod, inputs, expected)
    n_ctas = launched_ctas(ref, "the reference")
    cols: dict[str, list] = {}
    for rep in range(1 + repeats):
        out = torch.zeros(n_ctas * words_per_cta, dtype=torch.int64, device="cuda")
        got = mod.run(variant, inputs, out)  # run() re-poisons the output before launching
        torch.cuda.synchronize()
        if launched_ctas(variant, label) != n_ctas:
            raise error(f"{label} was launched on {launched_ctas(variant, label)} CTAs, the reference on {n_ctas}")
        if not torch.equal(got, expected):
            raise error(f"{label} changed the kernel's output (launch {rep})")
        if rep:
            for k, v in document(out.cpu().numpy(), rep - 1, n_ctas)["columns"].items():
                cols.setdefault(k, []).extend(v)
    return cols, rel
