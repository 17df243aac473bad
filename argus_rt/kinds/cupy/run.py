"""The CuPy kind's checked run: CuPy loads an Argus-built variant's cubin and launches it once.

:func:`run_once` builds the variant (:mod:`argus_rt.kinds.cupy.build`), loads it with
``cupy.RawModule(path=cubin)``, draws fresh random inputs (NumPy, uploaded with ``cupy.asarray``),
launches ``get_function(kernel)`` with the launch's grid, block and arguments, and checks the outputs
against the program's reference within ``rtol``/``atol``. A marker-only or traced run then launches
the **trace-free** variant on the same inputs and checks it against the reference too (the
measured variants are checked, and so is the kernel without Argus in it); whether both outputs are
bit for bit equal is recorded, not required. A traced run arms a :class:`argus_rt.trace.TraceSession`
on the module's ``argus_ctl`` (through :class:`CupyGlobals`) and decodes the rings.

``python -m argus_rt.kinds.run_variant run --program P --variant V`` is that run in a process of its
own (the kind registry's ``run_once`` hook): the one Nsight Compute profiles. The variant's launch is
the program's first launch of its kernel, so ``ncu -k <kernel> -c 1`` records the variant, never the trace-free check after it.
"""
from __future__ import annotations

import inspect
import os
import runpy
from pathlib import Path

import numpy as np

from ...backends.base import BackendUnavailableError
from ..cuda.run import SCALAR_TYPES
from ..errors import ReferenceMismatchError
from .build import VARIANT_MODES, build_variant
from .launch import CupyLaunch, CupyProgramError


def import_cupy():
    """CuPy, on a machine where it can launch kernels; :class:`BackendUnavailableError` otherwise."""
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailableError(f"CuPy programs are launched by CuPy, which is not installed here ({exc}); "
                                      "pip install cupy-cuda13x") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: no driver, no device
        raise BackendUnavailableError(f"CuPy {cupy.__version__} sees no CUDA GPU: {exc}") from None
    if count < 1:
        raise BackendUnavailableError(f"CuPy {cupy.__version__} sees no CUDA GPU")
    return cupy


class CupyGlobals:
    """The ``__device__`` globals of a module CuPy loaded, as :class:`argus_rt.trace.TraceSession`
    writes and reads them. Only globals whose size the layout mirror states (``argus_ctl``) are
    written or read; asking for the address of a missing symbol raises CuPy's driver error."""

    def __init__(self, module) -> None:
        from ...trace import layout

        self._module = module  # cupy.RawModule
        self._sizes = {layout.CTL_SYMBOL: layout.CTL_DTYPE.itemsize}

    def global_address(self, name: str) -> tuple[int, int]:
        import cupy

        ptr = cupy.cuda.driver.moduleGetGlobal(self._module.module.ptr, name)
        return int(ptr), self._sizes.get(name, 0)

    def _sized(self, name: str) -> tuple[int, int]:
        ptr, size = self.global_address(name)
        if not size:
            raise CupyProgramError(f"global {name!r}: its size is not known to Argus, so it is never read or written")
        return ptr, size

    def write_global(self, name: str, data, stream=None, blocking: bool = True) -> None:
        """Copy ``data`` into global ``name``; ``blocking=False`` enqueues it on ``stream`` from host memory
        the caller keeps unchanged until the stream reaches the copy. Bytes (or an array that must be
        copied to be contiguous) go through a temporary owned here: its copy is waited for before return."""
        from cupy.cuda import runtime

        from ...launch import host_copy_source

        ptr, size = self._sized(name)
        buf, callers = host_copy_source(data)
        if buf.nbytes != size:
            raise CupyProgramError(f"global {name!r} is {size} bytes, got {buf.nbytes} bytes to write")
        if blocking:
            runtime.memcpy(ptr, buf.ctypes.data, size, runtime.memcpyHostToDevice)
            return
        handle = _stream_ptr(stream)
        runtime.memcpyAsync(ptr, buf.ctypes.data, size, runtime.memcpyHostToDevice, handle)
        if not callers:  # ``buf`` dies with this call: the stream must be past the copy first
            runtime.streamSynchronize(handle)

    def read_global(self, name: str) -> np.ndarray:
        from cupy.cuda import runtime

        ptr, size = self._sized(name)
        out = np.zeros(size, dtype=np.uint8)
        runtime.memcpy(out.ctypes.data, ptr, size, runtime.memcpyDeviceToHost)
        return out


def _stream_ptr(stream) -> int:
    if stream is None:
        return 0
    return int(getattr(stream, "cuda_stream", getattr(stream, "ptr", stream)))


def make_inputs(launch: CupyLaunch, seed: int | None = None) -> dict:
    """Fresh host inputs by parameter name: NumPy arrays drawn per ``init``, NumPy scalars for scalars."""
    rng = np.random.default_rng(seed if seed is not None else int.from_bytes(os.urandom(8), "little"))
    out = {}
    for name, spec in launch.ordered_args():
        if "tensor" not in spec:
            (kind, value), = ((k, v) for k, v in spec.items() if k in SCALAR_TYPES)
            out[name] = np.dtype(kind).type(value)
            continue
        dtype, shape, init = np.dtype(spec["tensor"]), tuple(spec["shape"]), spec.get("init", "randn")
        low, high = spec.get("low", 0), spec.get("high", 1)
        draw = {"randn": lambda: rng.standard_normal(shape), "uniform": lambda: rng.uniform(low, high, shape),
                "randint": lambda: rng.integers(int(low), int(high), shape),
                "poison": lambda: np.full(shape, np.nan if dtype.kind == "f" else -1),
                "zeros": lambda: np.zeros(shape)}[init]
        out[name] = draw().astype(dtype)
    return out


def _reference(launch: CupyLaunch):
    """The reference function ``launch.reference`` names, run from its file inside the program directory."""
    from ...program import program_file

    file, _, func = launch.reference.partition(":")
    root, path = program_file(launch.root, file)
    if path.suffix != ".py" or not path.is_file() or not path.is_relative_to(root):
        raise CupyProgramError(f"reference {launch.reference!r}: no Python file {file!r} inside {root}")
    fn = runpy.run_path(str(path), run_name=f"argus_cupy_reference_{path.stem}").get(func)
    if not callable(fn):
        raise CupyProgramError(f"reference {launch.reference!r}: {path.name} has no function {func!r}")
    return fn


def expected_outputs(launch: CupyLaunch, inputs: dict) -> dict[str, np.ndarray]:
    """What the reference returns for host ``inputs``: {output parameter: expected array}."""
    fn = _reference(launch)
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = {k: (v.copy() if isinstance(v, np.ndarray) else v.item()) for k, v in inputs.items()
              if takes_all or k in params}
    want = fn(**kwargs)
    tensors = [n for n, spec in launch.ordered_args() if "tensor" in spec]
    if not isinstance(want, dict) or not want or not set(want) <= set(tensors):
        raise CupyProgramError(f"reference {launch.reference!r} returned {type(want).__name__} "
                               f"{sorted(want) if isinstance(want, dict) else ''}; it must return "
                               f"{{output parameter: expected array}} with parameters among {', '.join(tensors)}")
    return {k: np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v) for k, v in want.items()}


def compare(launch: CupyLaunch, got: dict, want: dict, what: str) -> float:
    """The worst relative error of ``got`` against ``want``; :class:`ReferenceMismatchError` past the
    tolerance (|got - want| <= atol + rtol |want|), on a shape mismatch or an unwritten (NaN) element."""
    worst = 0.0
    for name, expected in want.items():
        out = got[name].astype(np.float64)
        expected = expected.astype(np.float64)
        if out.shape != expected.shape:
            raise ReferenceMismatchError(f"{what}: output {name!r} has shape {out.shape}, the reference {expected.shape}")
        if np.isnan(out).any() and not np.isnan(expected).any():
            raise ReferenceMismatchError(f"{what}: output {name!r} has {int(np.isnan(out).sum())} unwritten (NaN) "
                                         "elements")
        err = np.abs(out - expected)
        if not np.all(err <= launch.atol + launch.rtol * np.abs(expected)):
            k = int(np.argmax(err - launch.rtol * np.abs(expected)))
            raise ReferenceMismatchError(
                f"{what}: output {name!r} differs from the reference beyond rtol {launch.rtol} / atol {launch.atol}: "
                f"element {np.unravel_index(k, out.shape)} is {out.flat[k]!r}, expected {expected.flat[k]!r}")
        worst = max(worst, float(np.max(err / np.maximum(np.abs(expected), launch.atol or 1e-30), initial=0.0)))
    return worst


def launch_kernel(cupy, module, launch: CupyLaunch, inputs: dict, outputs, *, stream=None) -> dict:
    """Launch the kernel of ``module`` (a ``cupy.RawModule``) once on a device copy of ``inputs``, wait,
    and return {output name: host array}."""
    kernel = module.get_function(launch.kernel)
    device = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    kernel(launch.grid, launch.block, tuple(device[p.name] for p in launch.params), shared_mem=launch.shared_mem,
           stream=stream)
    (cupy.cuda.get_current_stream() if stream is None else stream).synchronize()
    return {k: cupy.asnumpy(device[k]) for k in outputs}


def run_once(program, variant: str, *, trace_config: dict | None = None, raw_trace: Path | None = None,
             seed: int | None = None) -> dict:
    """Build ``variant``, launch it once with CuPy and check it (and, for marker-only and traced, the
    trace-free variant on the same inputs) against the reference. With ``trace_config`` (the traced
    variant) also decode the trace (rings saved to ``raw_trace`` if given). Returns {"cubin",
    "symbol", "max_rel_err", "reference_check", "trace"?, "intervals"?}."""
    cupy = import_cupy()
    launch = CupyLaunch.from_program(program)
    if trace_config is not None and variant != "traced":
        raise CupyProgramError(f"only the traced variant records a trace, not {variant!r}")
    cubin = build_variant(program, variant)
    inputs = make_inputs(launch, seed)
    want = expected_outputs(launch, inputs)
    module = cupy.RawModule(path=str(cubin))
    session = stream = None
    if trace_config is not None:
        import torch

        from ...trace import TraceConfig, TraceSession

        session = TraceSession(CupyGlobals(module), TraceConfig(ctas=launch.ctas, threads_per_cta=launch.threads_per_cta,
                                                                **trace_config))
        session.arm()  # on torch's current stream, which the launch below also runs on
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    got = launch_kernel(cupy, module, launch, inputs, want, stream=stream)
    check = {"variant": variant, "rtol": launch.rtol, "atol": launch.atol,
             "max_rel_err": compare(launch, got, want, f"{program.name}:{variant}")}
    result = {"cubin": str(cubin), "symbol": launch.kernel, "max_rel_err": check["max_rel_err"],
              "reference_check": check}
    if session is not None:
        from ...trace import pair_intervals

        trace = session.decode(known_ids=[r.id for r in program.regions])
        if raw_trace is not None:
            session.save(raw_trace)
        result.update(trace=trace, intervals=pair_intervals(trace))
    if VARIANT_MODES[variant] != 0:
        free = cupy.RawModule(path=str(build_variant(program, "trace_free")))
        got_free = launch_kernel(cupy, free, launch, inputs, want)
        check["trace_free"] = {"max_rel_err": compare(launch, got_free, want, f"{program.name}:trace_free"),
                               "bitwise_equal": all(np.array_equal(got[k], got_free[k], equal_nan=True) for k in want)}
    return result


def collect_region_trace(program, outdir: Path, config: dict) -> tuple[dict, Path]:
    """The traced variant's run as ``argus.region_intervals/1`` (and the raw rings' .npz path).
    ``config``: the trace adapter's (``capacity``, default 256; ``clock``, default "globaltimer")."""
    from ..cuda.run import intervals_document, traced_run

    res, raw = traced_run(run_once, program, outdir, config)
    doc = intervals_document(res["intervals"], res["trace"], CupyLaunch.from_program(program).coord_kind)
    doc["reference_check"] = res["reference_check"]
    return doc, raw
