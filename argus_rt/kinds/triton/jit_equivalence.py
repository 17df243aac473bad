"""The check every Triton query makes on the GPU: Argus's kernel is the one the JIT runs.

Argus builds a Triton program's kernel on the CPU from its launch description
(:func:`argus_rt.kinds.triton.program.program_compiled`). On the GPU this module launches the
user's ``@triton.jit`` function *through the JIT* on the module's real inputs (``run(compiled,
inputs)`` with a :class:`JitLaunch` where the compiled kernel would go, so the JIT specialises on
the real tensors and integers) and requires

* the JIT kernel's TTGIR to hash-equal Argus's trace-free TTGIR, and
* Argus's kernel time to be within noise of the JIT launch's (CUDA events around each launch, the
  host's launch overhead hidden behind a GPU sleep).

Otherwise :class:`JitMismatchError` refuses the query, showing the first TTGIR line that differs
and the compile metadata that differ. A passed check (its times too) is kept for the process, per launch
(:func:`launch_key`: the TTGIR and everything that makes the launch: sources, launch description, input seed),
GPU and Triton version. Not per TTGIR alone: two shapes of one configuration compile to the same TTGIR,
and a runtime reused across queries would give the second shape the first one's times.
"""
from __future__ import annotations

import hashlib
import json

from ...errors import ArgusInputError

NOISE_FLOOR = 0.05  # relative: two medians of one kernel on one GPU differ by less than this
TIMED_ROUNDS = 15
RETIMED_ROUNDS = 45  # the second, deciding series where the first disagrees (timed_verdict)
_SLEEP_CYCLES = 2_000_000  # ~1 ms at H200 clocks: longer than any host-side launch overhead
_PASSED: dict[str, dict] = {}


class JitMismatchError(ArgusInputError):
    """Argus's kernel is not the one Triton's JIT runs for this program (TTGIR or time differ)."""


class JitLaunch:
    """Stands where a ``CompiledKernel`` goes in the module's ``run(compiled, inputs)``: ``self[grid](*args)``
    launches ``fn[grid](*args, **kwargs)`` through the JIT (kwargs: the constexprs and options of the
    launch, or the autotune config's ``all_kwargs()``) and keeps the kernel the JIT ran."""

    def __init__(self, fn, kwargs: dict) -> None:
        self.fn, self.kwargs, self.kernel, self.args = fn, dict(kwargs), None, ()

    def __getitem__(self, grid):
        def launch(*args):
            self.args = args
            self.kernel = self.fn[grid](*args, **self.kwargs)
            return self.kernel
        return launch


def _alignment(address: int) -> int:
    """The largest power of two (up to 256) that divides ``address``."""
    align = 1
    while align < 256 and address % (align * 2) == 0:
        align *= 2
    return align


def argument_differences(fn, described: dict, passed: tuple) -> list[str]:
    """Where ``launch.args`` (``described``: name -> TensorArg or scalar) differs from the arguments the
    module's ``run`` really passed (positional, in ``fn``'s parameter order): dtype, shape, alignment
    class (multiple of 16 or not) of tensors, values of scalars."""
    names = [p.name for p in fn.params if not p.is_constexpr]
    out = []
    for name, value in zip(names, passed):
        want = described.get(name)
        if hasattr(value, "data_ptr"):
            dtype, shape = str(getattr(value, "dtype", "?")), tuple(getattr(value, "shape", ()))
            align = _alignment(int(value.data_ptr()))
            if want is None or not hasattr(want, "data_ptr"):
                out.append(f"{name}: run passes a {dtype} tensor, launch.args gives {want!r}")
                continue
            if str(want.dtype) != dtype or tuple(want.shape) != shape:
                out.append(f"{name}: run passes {dtype}{list(shape)}, launch.args gives {want.dtype}{list(want.shape)}")
            if (align % 16 == 0) != (want.align % 16 == 0):
                out.append(f"{name}: run passes a {align}-byte aligned address, launch.args says align {want.align}")
        elif want != value:
            out.append(f"{name}: run passes {value!r}, launch.args gives {want!r}")
    return out


class TimedLaunch:
    """Wraps a launcher (``CompiledKernel`` or :class:`JitLaunch`): each launch is timed on the GPU by
    CUDA events, after a GPU sleep so that the host's work to enqueue it is not timed."""

    def __init__(self, inner) -> None:
        self.inner, self.ms = inner, []

    def __getitem__(self, grid):
        import torch

        def launch(*args):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(_SLEEP_CYCLES)
            start.record()
            out = self.inner[grid](*args)
            end.record()
            end.synchronize()
            self.ms.append(start.elapsed_time(end))
            return out
        return launch


def ttgir_code(text: str) -> list[str]:
    """A TTGIR's lines without its ``#loc`` definitions: what the kernel is, not where its source file lies.
    Triton's cache key does not hold the file's path, so a kernel of the same source built from another
    directory (a forked program version, another checkout) can come back with that directory in its locs."""
    return [x for x in text.splitlines() if not x.startswith("#loc")]


def same_kernel(a: str, b: str) -> bool:
    """Two TTGIRs are the same kernel: equal but for their ``#loc`` definitions (:func:`ttgir_code`)."""
    return a == b or ttgir_code(a) == ttgir_code(b)


def first_difference(a: str, b: str) -> str:
    """``line N: 'argus' vs 'jit'`` for the first differing TTGIR line (``#loc`` lines skipped)."""
    la, lb = ttgir_code(a), ttgir_code(b)
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: {x.strip()[:160]!r} vs {y.strip()[:160]!r}"
    return f"{len(la)} vs {len(lb)} lines" if len(la) != len(lb) else "only in #loc lines"


def metadata_difference(argus, jit) -> list[str]:
    keys = ("num_warps", "num_stages", "num_ctas", "shared", "maxnreg")
    out = []
    for k in keys:
        x, y = getattr(argus.metadata, k, None), getattr(jit.metadata, k, None)
        if x != y:
            out.append(f"{k} {x} vs {y}")
    return out


def within_noise(argus_ms: list[float], jit_ms: list[float]) -> tuple[bool, dict]:
    """Whether two timed series of one kernel agree: their medians differ by at most
    max(:data:`NOISE_FLOOR`, 3 x the larger relative median absolute deviation)."""
    import numpy as np

    a, j = np.asarray(argus_ms, float), np.asarray(jit_ms, float)
    ma, mj = float(np.median(a)), float(np.median(j))
    spread = max(float(np.median(np.abs(a - ma))) / ma, float(np.median(np.abs(j - mj))) / mj)
    tol = max(NOISE_FLOOR, 3 * spread)
    ratio = ma / mj
    return abs(ratio - 1) <= tol, {"argus_ms": ma, "jit_ms": mj, "ratio": ratio, "tolerance": tol}


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


def launch_key(program, ttgir_sha256: str, *, timing: bool, seed: int | None) -> str:
    """The key of a check's result: the TTGIR and what decides the launch the module's ``run`` makes (its
    sources, which size the inputs and the grid; the launch description: args, shapes, constexprs, options,
    config; the flags and compiler), the input seed, whether it was timed, the GPU and Triton's version.
    A program's variants (probe, traced) share their base's launch, so they share its check."""
    import triton

    ident = {"ttgir": ttgir_sha256, "kind": program.kind, "sources": program.sources_sha256,
             "launch": program.launch_json, "flags": list(program.flags), "compiler": program.compiler,
             "seed": seed, "timing": timing, "gpu": _device_name(), "triton": triton.__version__}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def check_against_jit(program, mod, *, timing: bool = True, seed: int | None = None) -> dict:
    """Launch ``program``'s kernel through the JIT on ``mod.make_inputs()`` and compare (see the module
    docstring). Returns ``{"ttgir_sha256", "argus_ms", "jit_ms", "ratio", "tolerance"}`` (no times
    with ``timing=False``); raises :class:`JitMismatchError` with the difference."""
    from .program import load_kernel, program_compiled, ttgir_hash

    compiled = program_compiled(program)
    ttgir = compiled.asm["ttgir"]
    sha = ttgir_hash(ttgir)
    key = launch_key(program, sha, timing=timing, seed=seed)
    if key in _PASSED:
        return _PASSED[key]
    _mod, fn, described, kwargs = load_kernel(program, mod)  # the JIT launches the kernel of the module that runs it
    jit = JitLaunch(fn, kwargs)
    inputs = mod.make_inputs(seed)
    mod.run(jit, inputs)
    jit_ttgir = jit.kernel.asm["ttgir"]
    if not same_kernel(jit_ttgir, ttgir):
        meta = metadata_difference(compiled, jit.kernel)
        args = argument_differences(fn, described, jit.args)
        raise JitMismatchError(
            f"{program.label()}: Argus's kernel is not the one Triton's JIT runs for this launch (TTGIR hash differs; "
            f"first difference, Argus vs JIT, {first_difference(ttgir, jit_ttgir)}"
            + (f"; metadata {', '.join(meta)}" if meta else "")
            + (f"; arguments {'; '.join(args)}" if args else "") + "): make launch.args, constexprs and config "
            "describe the launch that module.run makes")
    result = {"ttgir_sha256": sha}
    if timing:
        def series(rounds: int) -> tuple[list[float], list[float]]:
            mine, theirs = TimedLaunch(compiled), TimedLaunch(jit)
            for _ in range(rounds):  # interleaved, so clock drift hits both alike
                mod.run(mine, inputs)
                mod.run(theirs, inputs)
            return mine.ms[1:], theirs.ms[1:]  # the first launch of each loads its module

        ok, times = timed_verdict(series)
        result.update(times)
        if not ok:
            raise JitMismatchError(
                f"{program.label()}: Argus's kernel (TTGIR equal to the JIT's) ran {times['argus_ms']:.4f} ms against "
                f"{times['jit_ms']:.4f} ms for the JIT launch (ratio {times['ratio']:.3f}, noise tolerance "
                f"{times['tolerance']:.3f}, in {RETIMED_ROUNDS} rounds after {TIMED_ROUNDS} gave "
                f"{times['first_ratio']:.3f}; {binary_difference(compiled, jit.kernel)}): the two launches differ in "
                "something the TTGIR does not show")
    _PASSED[key] = result
    return result


def timed_verdict(series) -> tuple[bool, dict]:
    """``within_noise`` on ``series(TIMED_ROUNDS)``; where that fails, a longer series decides, because one
    short series can be unlucky (a clock step, another process on the GPU) while a real difference between
    the two launches persists. ``series(rounds)`` -> (Argus's times, the JIT's times), interleaved."""
    ok, times = within_noise(*series(TIMED_ROUNDS))
    if ok:
        return ok, times
    first = times["ratio"]
    ok, times = within_noise(*series(RETIMED_ROUNDS))
    return ok, {**times, "first_ratio": first}


def binary_difference(argus, jit) -> str:
    """Whether the two compiled kernels are the same binary: what the timing mismatch then points to."""
    a, b = argus.asm.get("cubin"), jit.asm.get("cubin")
    if a is None or b is None:
        return "cubins not compared (one is missing)"
    if a == b:
        return "the cubins are byte-identical, so the launch or the GPU's state differs"
    meta = metadata_difference(argus, jit)
    return f"the cubins differ ({len(a)} vs {len(b)} bytes" + (f"; metadata {', '.join(meta)}" if meta else "") + ")"
