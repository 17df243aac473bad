"""The CUDA kind's checked run: build a variant of a CUDA program and launch it once.

:func:`run_once` builds the program's variant (``trace_free``/``base``: ``ARGUS_MODE=0``,
``marker_only``: 1, ``traced``: 2; content-hash cached, :mod:`argus_rt.kinds.cuda.build`), launches it
once (under a :class:`argus_rt.trace.TraceSession` when traced), checks its outputs against the
program's plain PyTorch reference and decodes the rings; :func:`intervals_document` turns the paired
intervals into ``argus.region_intervals/1``. The ``trace`` tool adapter
(:mod:`argus_rt.backends.trace`) calls it in a device worker; Nsight Compute profiles the same run in a
process of its own (:mod:`argus_rt.kinds.run_variant`), so the PCs it reports are those of the very
cubin this module built.

A CUDA program's ``launch`` (in ``argus_program.json``) as this runner reads it::

    "launch": {
      "source": "kernel.cu",                 # the translation unit (default: first .cu source)
      "kernel": "my_kernel",                 # name or kernel key; the mangled symbol is looked up
      "grid": [128], "block": [256],
      "args": [                              # in kernel-parameter order
        {"tensor": "float32", "shape": [32768], "init": "uniform", "low": -1, "high": 1},
        {"tensor": "float32", "shape": [32768], "init": "poison"},      # an output: NaN-filled
        {"int32": 2000}, {"float32": 0.5}
      ],
      "reference": "reference.py:expected",  # fn(*CPU args) -> {arg index: expected tensor}
      "rtol": 1e-4, "atol": 1e-5,            # tolerance of that check
      "defines": {"NAME": "value"},          # optional, added to every variant's build
      "arch": "sm_90",                       # optional GPU code (default sm_90; sm_90a for wgmma/setmaxnreg)
      "coord_kind": "iteration"              # optional: what *_AT marker coordinates count (iteration|layer|step)
    }

A kernel whose arguments no JSON can describe names a Python runner instead of ``args``/``reference``
(``"runner": "run.py:run"``; :mod:`argus_rt.kinds.cuda.runner`): Argus builds the variant, the
runner launches it and checks it against its own reference. ``"coord_fields": {"step": [8, 24],
"layer": [0, 8]}`` unpacks a packed marker coordinate into named columns (name: [lowest bit, width]).

Inputs are drawn fresh on every run (``init``: ``randn``, ``uniform`` [low, high), ``randint``
[low, high), ``poison`` (NaN, or -1 for integers), ``zeros`` only where a kernel needs it).
"""
from __future__ import annotations

import importlib.util
import io
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...backends.base import BackendUnavailableError
from ...sass import disassemble, kernel_key, parse_sass
from ..errors import ProgramRunError, ReferenceMismatchError

VARIANT_MODES = {"base": 0, "trace_free": 0, "marker_only": 1, "traced": 2}
LAUNCH_KEYS = ("source", "kernel", "grid", "block", "args", "reference", "rtol", "atol", "defines", "arch",
               "coord_kind", "argv", "python", "runner", "coord_fields")
COORD_KINDS = ("iteration", "layer", "step")
TENSOR_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "uint8")
SCALAR_TYPES = ("int32", "int64", "uint32", "uint64", "float32", "float64")
INITS = ("randn", "uniform", "randint", "poison", "zeros")


@dataclass(frozen=True)
class CudaLaunch:
    """A validated ``launch`` description of a CUDA program (see the module docstring)."""

    root: Path
    source: str
    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple[dict, ...]
    reference: str | None
    rtol: float
    atol: float
    defines: dict
    arch: str = "sm_90"
    coord_kind: str | None = None
    runner: str | None = None  # "<file>:<function>" that launches the cubin itself (kinds/cuda/runner.py)
    coord_fields: tuple[tuple[str, int, int], ...] = ()  # (name, lowest bit, width) of a packed coordinate

    @property
    def ctas(self) -> int:
        return int(np.prod(self.grid))

    @property
    def threads_per_cta(self) -> int:
        return int(np.prod(self.block))

    @classmethod
    def from_program(cls, program) -> "CudaLaunch":
        if program.kind != "cuda":
            raise ProgramRunError(f"program {program.name!r} is of kind {program.kind!r}; this runner runs kind 'cuda'")
        launch = program.launch
        bad = sorted(set(launch) - set(LAUNCH_KEYS))
        if bad:
            raise ProgramRunError(f"launch of {program.name!r}: unknown key(s) {bad}; valid: {', '.join(LAUNCH_KEYS)}")
        runner = launch.get("runner")
        for key in ("kernel",) if runner else ("kernel", "grid", "block", "args"):
            if key not in launch:
                raise ProgramRunError(f"launch of {program.name!r} lacks {key!r} (needs kernel, grid, block, args; "
                                      "or kernel and runner)")
        if runner and ("args" in launch or "reference" in launch):
            raise ProgramRunError(f"launch of {program.name!r} has a runner and args/reference; a runner makes its "
                                  "own inputs and checks them: drop args and reference")
        if not program.root:
            raise ProgramRunError(f"program {program.name!r} has no source directory (root)")
        root = Path(program.root).resolve()
        source = launch.get("source") or next((s for s in _sources(root) if s.endswith(".cu")), None)
        if not source or not _source_path(root, source).is_file():
            raise ProgramRunError(f"launch of {program.name!r}: CUDA source {source!r} not found under {root}")
        for dims, what in ((launch.get("grid", [1]), "grid"), (launch.get("block", [1]), "block")):
            if not (isinstance(dims, list) and 1 <= len(dims) <= 3 and all(isinstance(d, int) and d > 0 for d in dims)):
                raise ProgramRunError(f"launch {what} must be a list of 1-3 positive ints, got {dims!r}")
        for i, spec in enumerate(launch.get("args", ())):
            _check_arg(i, spec)
        if launch.get("coord_kind") not in (None,) + COORD_KINDS:
            raise ProgramRunError(f"launch coord_kind {launch['coord_kind']!r} unknown; valid: {', '.join(COORD_KINDS)}")
        return cls(root, source, str(launch["kernel"]), tuple(launch.get("grid", ())), tuple(launch.get("block", ())),
                   tuple(launch.get("args", ())), launch.get("reference"), float(launch.get("rtol", 1e-5)),
                   float(launch.get("atol", 1e-6)), dict(launch.get("defines", {})), str(launch.get("arch", "sm_90")),
                   launch.get("coord_kind"), runner, _coord_fields(launch.get("coord_fields", {})))


def _source_path(root: Path, source: str) -> Path:
    from ...program import program_file

    return program_file(root, source)[1]


def _coord_fields(fields: dict) -> tuple[tuple[str, int, int], ...]:
    out = []
    for name, spec in fields.items():
        if name not in COORD_KINDS:
            raise ProgramRunError(f"launch coord_fields: {name!r} unknown; valid: {', '.join(COORD_KINDS)}")
        if not (isinstance(spec, list) and len(spec) == 2 and all(isinstance(v, int) for v in spec)
                and 0 <= spec[0] < 32 and 1 <= spec[1] <= 32 - spec[0]):
            raise ProgramRunError(f"launch coord_fields[{name!r}] = {spec!r}: needs [lowest bit, width] inside 32 bits")
        out.append((name, spec[0], spec[1]))
    return tuple(sorted(out, key=lambda f: f[1]))  # lowest field first


def _sources(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_file())


def _check_arg(i: int, spec) -> None:
    if not isinstance(spec, dict) or len([k for k in spec if k in ("tensor",) + SCALAR_TYPES]) != 1:
        raise ProgramRunError(f"launch arg {i}: {spec!r} must be one of {{'tensor': dtype, ...}} or "
                              f"{{<scalar type>: value}} with scalar types {', '.join(SCALAR_TYPES)}")
    if "tensor" in spec:
        if spec["tensor"] not in TENSOR_DTYPES:
            raise ProgramRunError(f"launch arg {i}: tensor dtype {spec['tensor']!r} unknown; valid: {', '.join(TENSOR_DTYPES)}")
        if spec.get("init", "randn") not in INITS:
            raise ProgramRunError(f"launch arg {i}: init {spec.get('init')!r} unknown; valid: {', '.join(INITS)}")
        shape = spec.get("shape")
        if not (isinstance(shape, list) and shape and all(isinstance(d, int) and d > 0 for d in shape)):
            raise ProgramRunError(f"launch arg {i}: shape must be a non-empty list of positive ints, got {shape!r}")


def build_variant(program, variant: str, *, extra_flags: tuple[str, ...] = ()) -> Path:
    """Compile ``variant`` of a CUDA program to a cubin (content-hash cached) and return its path."""
    from .build import CudaBuildSpec, build

    if variant not in VARIANT_MODES:
        raise ProgramRunError(f"cannot build variant {variant!r}; valid: {', '.join(VARIANT_MODES)}")
    launch = CudaLaunch.from_program(program)
    flags = tuple(dict.fromkeys(tuple(program.flags or ("-O3",)) + ("-lineinfo",) + tuple(extra_flags)))
    spec = CudaBuildSpec(name=f"{program.name}_{variant}", sources=[str(_source_path(launch.root, launch.source))],
                         argus_mode=VARIANT_MODES[variant], include_dirs=[str(launch.root)],
                         defines=launch.defines, flags=flags, arch=launch.arch)
    result = build(spec)
    return Path(getattr(result, "cubin", result))


def prebuild(program) -> Path | None:
    """Build the variant ``program`` is (``program.variant``) into the build cache ahead of its
    collection; None when it is no CUDA variant or the build fails (the collection builds it again
    and reports the failure)."""
    if program.kind != "cuda" or program.variant not in VARIANT_MODES:
        return None
    try:
        return build_variant(program, program.variant)
    except Exception:  # reported by the collection's own build
        return None


def kernel_symbol(cubin: Path, kernel: str) -> str:
    """The (mangled) symbol of ``kernel`` in ``cubin``, matched by :func:`kernel_key`: read from the
    cubin's code sections (``cuobjdump -elf``, milliseconds) rather than from its SASS."""
    from ...elf import cubin_elf, elf_functions

    names = elf_functions(cubin_elf(cubin)) or list(parse_sass(disassemble(cubin)))
    if kernel in names:
        return kernel
    hits = [n for n in names if kernel_key(n) == kernel_key(kernel)]
    if len(hits) != 1:
        raise ProgramRunError(f"kernel {kernel!r} {'is ambiguous' if hits else 'not found'} in {cubin.name}; "
                              f"functions: {', '.join(names)}")
    return hits[0]


def _host_dtype(spec: dict) -> np.dtype:
    """The numpy dtype of a tensor argument on the host (bfloat16: its uint16 bit pattern)."""
    return np.dtype(np.uint16) if spec["tensor"] == "bfloat16" else np.dtype(spec["tensor"])


def _bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float values rounded to bfloat16 (nearest even, as torch's ``.to(torch.bfloat16)``), as uint16 bits."""
    x = np.asarray(values, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    bits[np.isnan(x)] = 0x7FC0
    return bits


def _cast(values: np.ndarray, spec: dict) -> np.ndarray:
    return _bfloat16_bits(values) if spec["tensor"] == "bfloat16" else np.asarray(values).astype(_host_dtype(spec))


def _scalar(spec: dict):
    (kind, value), = ((k, v) for k, v in spec.items() if k in SCALAR_TYPES)
    return getattr(np, kind)(value)


def host_arguments(launch: CudaLaunch, seed: int | None = None) -> list:
    """Fresh kernel arguments on the host, no torch: a numpy array per tensor, drawn per ``init`` from
    a generator seeded with ``seed`` (default: fresh random; bfloat16 as its uint16 bit pattern), a
    numpy scalar per scalar."""
    rng = np.random.default_rng(seed if seed is not None else int.from_bytes(os.urandom(6), "little"))
    out = []
    for spec in launch.args:
        if "tensor" not in spec:
            out.append(_scalar(spec))
            continue
        shape, init = tuple(spec["shape"]), spec.get("init", "randn")
        floating = spec["tensor"] in ("float32", "float16", "bfloat16", "float64")
        if init == "randn":
            t = _cast(rng.standard_normal(shape, dtype=np.float32), spec)
        elif init == "uniform":
            lo, hi = float(spec.get("low", 0.0)), float(spec.get("high", 1.0))
            t = _cast(rng.random(shape) * (hi - lo) + lo, spec)
        elif init == "randint":
            t = _cast(rng.integers(int(spec.get("low", 0)), int(spec["high"]), shape), spec)
        elif init == "poison":
            t = _cast(np.full(shape, np.nan if floating else -1, dtype=np.float64 if floating else np.int64), spec)
        else:
            t = np.zeros(shape, dtype=_host_dtype(spec))
        out.append(t)
    return out


def _cpu_tensor(value, spec: dict):
    """A CPU torch tensor of the argument's declared dtype from a host array (or a torch tensor)."""
    import torch

    if hasattr(value, "detach"):
        return value.detach().cpu()
    value = np.ascontiguousarray(value)
    if spec["tensor"] == "bfloat16":
        return torch.from_numpy(value.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(value.copy())


def make_arguments(launch: CudaLaunch, seed: int | None = None) -> list:
    """:func:`host_arguments` as CUDA torch tensors (for callers that launch with torch)."""
    return [_cpu_tensor(a, spec).cuda() if "tensor" in spec else a
            for a, spec in zip(host_arguments(launch, seed), launch.args)]


def check_reference(launch: CudaLaunch, before: list, after: list) -> float | None:
    """Compare outputs with the program's reference; return the worst relative error (None: no reference).

    ``before``/``after``: every launch argument before and after the launch, tensors as host arrays
    (:func:`host_arguments`' layout) or torch tensors; the reference gets CPU tensors and plain scalars."""
    import torch

    if not launch.reference:
        return None
    file, _, func = launch.reference.partition(":")
    path = (launch.root / file).resolve()
    if launch.root not in path.parents or not path.is_file() or not func:
        raise ProgramRunError(f"reference {launch.reference!r} must be '<file in {launch.root}>:<function>'")
    spec = importlib.util.spec_from_file_location(f"argus_reference_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    expected = getattr(mod, func)(*[_cpu_tensor(a, s) if "tensor" in s else a.item() for a, s in zip(before, launch.args)])
    worst = 0.0
    for idx, want in expected.items():
        got = _cpu_tensor(after[idx], launch.args[idx])
        if got.shape != want.shape:
            raise ReferenceMismatchError(f"output arg {idx}: shape {tuple(got.shape)} vs reference {tuple(want.shape)}")
        if torch.isnan(got).any():
            raise ReferenceMismatchError(f"output arg {idx}: {int(torch.isnan(got).sum())} elements unwritten (NaN)")
        if not torch.allclose(got.double(), want.double(), rtol=launch.rtol, atol=launch.atol):
            err = ((got.double() - want.double()).abs() / (want.double().abs() + launch.atol)).max().item()
            raise ReferenceMismatchError(f"output arg {idx} differs from the reference: max rel err {err:.3g} "
                                         f"> rtol {launch.rtol} (atol {launch.atol})")
        denom = want.double().abs().clamp_min(launch.atol)
        worst = max(worst, ((got.double() - want.double()).abs() / denom).max().item())
    return worst


def save_run(path: Path, launch: CudaLaunch, before: list, after: list) -> Path:
    """Save a launch's tensor arguments before and after it (``before_<i>``, ``after_<i>`` in an
    uncompressed .npz), for :func:`check_saved_run` in another process."""
    from ...fsutil import atomic_write_bytes

    arrays = {}
    for i, spec in enumerate(launch.args):
        if "tensor" in spec:
            arrays[f"before_{i}"], arrays[f"after_{i}"] = np.asarray(before[i]), np.asarray(after[i])
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)


def check_saved_run(program, path: Path) -> float | None:
    """:func:`check_reference` on the arguments a run saved with :func:`save_run` (the profiled run
    saves them, its parent checks them: the very outputs of the profiled launch)."""
    launch = CudaLaunch.from_program(program)
    path = Path(path)
    if not path.is_file():
        raise ProgramRunError(f"the run of {program.name!r} saved no outputs at {path} (it failed before its check)")
    before, after = [], []
    with np.load(path, allow_pickle=False) as saved:
        for i, spec in enumerate(launch.args):
            if "tensor" not in spec:
                before.append(_scalar(spec))
                after.append(before[-1])
                continue
            pair = []
            for when in ("before", "after"):
                key = f"{when}_{i}"
                arr = saved[key] if key in saved.files else None
                if arr is None or arr.shape != tuple(spec["shape"]) or arr.dtype != _host_dtype(spec):
                    raise ProgramRunError(f"{path.name}: arg {i} {when} the launch is "
                                          f"{'missing' if arr is None else f'{arr.dtype}{list(arr.shape)}'}, the "
                                          f"launch declares {spec['tensor']}{spec['shape']}")
                pair.append(arr)
            before.append(pair[0])
            after.append(pair[1])
    return check_reference(launch, before, after)


def _require_gpu() -> None:
    from ...launch import device_capability

    try:
        device_capability(0)
    except Exception as exc:  # no driver, no device, no cuda-python: nothing can run here
        raise BackendUnavailableError(f"no CUDA GPU usable through the driver API: {type(exc).__name__}: {exc}") from None


def run_once(program, variant: str, *, trace_config: dict | None = None, check: bool = True,
             raw_trace: Path | None = None, cubin: Path | None = None, symbol: str | None = None,
             outputs: Path | None = None) -> dict:
    """Build ``variant``, launch it once, check it against the reference; with ``trace_config``
    (traced variant) also decode the trace, and with ``raw_trace`` save its rings there (.npz,
    :func:`argus_rt.trace.save_raw`). Returns {"cubin", "symbol", "max_rel_err", "intervals"?}.

    ``cubin``, ``symbol``: the variant's cubin and kernel symbol as the caller built and read them
    (nothing is built or read again). ``outputs``: save the arguments before and after the launch
    there (:func:`save_run`) instead of checking them; the caller checks them
    (:func:`check_saved_run`), so this process never imports torch (``max_rel_err`` None,
    ``outputs`` set). Inputs are numpy arrays copied to device buffers through the driver API
    (:class:`argus_rt.launch.DeviceArray`); torch is imported only by the reference check and a trace
    session."""
    from ...launch import CubinModule, DeviceArray, synchronize

    _require_gpu()
    launch = CudaLaunch.from_program(program)
    start = time.time()
    cubin = Path(cubin) if cubin is not None else build_variant(program, variant)
    symbol = symbol or kernel_symbol(cubin, launch.kernel)
    if launch.runner:
        from .runner import run_with_runner

        if outputs is not None:
            raise ProgramRunError(f"program {program.name!r} has a runner, which checks its own outputs; "
                                  "there are no launch arguments to save")
        _say(program, variant, f"built in {time.time() - start:.1f} s (nvcc unless cached); its runner "
                               f"{launch.runner} runs it")
        out, session = run_with_runner(program, variant, launch, cubin, symbol, trace_config=trace_config, check=check)
        result = {**out, "cubin": str(cubin), "symbol": symbol}
        if session is not None:
            start = time.time()
            result.update(_decoded(program, session, raw_trace))
            _say(program, variant, f"trace decoded and paired in {time.time() - start:.1f} s "
                                   f"({len(result['intervals'].rows)} region occurrences)")
        return result
    module = CubinModule.load(cubin)
    host = host_arguments(launch)
    args = [DeviceArray.from_host(a) if "tensor" in spec else a for a, spec in zip(host, launch.args)]
    session = None
    if trace_config is not None:
        from ...trace import TraceConfig, TraceSession

        session = TraceSession(module, TraceConfig(ctas=launch.ctas, threads_per_cta=launch.threads_per_cta,
                                                   **trace_config))
        session.arm()
    module.launch(symbol, launch.grid, launch.block, args)
    synchronize()
    result = {"cubin": str(cubin), "symbol": symbol, "max_rel_err": None}
    if check and launch.reference:
        after = [a.to_host() if isinstance(a, DeviceArray) else a for a in args]
        if outputs is not None:
            result["outputs"] = str(save_run(outputs, launch, host, after))
        else:
            result["max_rel_err"] = check_reference(launch, host, after)
    for a in args:
        if isinstance(a, DeviceArray):
            a.free()
    if session is not None:
        result.update(_decoded(program, session, raw_trace))
    return result


def _say(program, variant: str, msg: str) -> None:
    """One progress line on stderr (a device worker relays it to the query's stderr)."""
    print(f"argus-run {program.name}:{variant}: {msg}", file=sys.stderr, flush=True)


def _decoded(program, session, raw_trace: Path | None) -> dict:
    """{"trace", "intervals"} of an armed and launched session (its rings saved to ``raw_trace`` if given)."""
    from ...trace import pair_intervals

    trace = session.decode(known_ids=[r.id for r in program.regions])
    if raw_trace is not None:
        session.save(raw_trace)
    return {"trace": trace, "intervals": pair_intervals(trace)}


def intervals_document(intervals, trace, coord_kind: str | None = None, coord_fields=()) -> dict:
    """``argus.region_intervals/1`` from paired intervals (one row per occurrence). ``coord_fields``
    ((name, lowest bit, width), ...) adds one column per field of the packed coordinate."""
    from ...trace.intervals import coordinate_columns

    rows = intervals.rows
    cols = {k: rows[k].astype(np.int64).tolist() for k in ("region_id", "start", "end", "sm", "cta", "warp", "coord")}
    cols.update({name: col.tolist() for name, col in coordinate_columns(rows["coord"], coord_fields).items()})
    dropped = int(trace.dropped) if trace is not None else 0
    doc = {"format": "argus.region_intervals/1", "clock": intervals.unit, "columns": cols, "coord_kind": coord_kind,
           "launches": 1, "dropped": dropped, "incomplete": bool(intervals.incomplete),
           "problems": [str(p) for p in getattr(intervals, "problems", [])][:20]}
    if coord_fields:
        doc["coord_fields"] = {name: [low, width] for name, low, width in coord_fields}
    return doc


def kernel_name(program) -> str:
    """The launch's kernel (the kind registry's ``kernel`` hook)."""
    return CudaLaunch.from_program(program).kernel


def saves_outputs(program) -> bool:
    """Whether the profiled run saves its launch's arguments for the parent's reference check (a launch
    described in JSON, with a reference): then that process needs no torch."""
    launch = CudaLaunch.from_program(program)
    return not launch.runner and bool(launch.reference)


def traced_run(run, program, outdir: Path, config: dict) -> tuple[dict, Path]:
    """``run(program, "traced", ...)`` (a kind's ``run_once``) with the trace adapter's ``config``
    (``capacity``, default 256; ``clock``, default "globaltimer"), the rings saved to ``outdir``:
    (its result, the raw rings' .npz path)."""
    cfg = {"capacity": int(config.get("capacity", 256)), "clock": config.get("clock", "globaltimer")}
    raw = Path(outdir) / "raw_trace.npz"
    return run(program, "traced", trace_config=cfg, raw_trace=raw), raw


def collect_region_trace(program, outdir: Path, config: dict) -> tuple[dict, Path]:
    """The traced variant's run as ``argus.region_intervals/1`` (and the raw rings' .npz path), the
    trace adapter's work for CUDA programs. ``config``: ``capacity`` (default 256), ``clock``."""
    res, raw = traced_run(run_once, program, outdir, config)
    launch = CudaLaunch.from_program(program)
    doc = intervals_document(res["intervals"], res["trace"], launch.coord_kind, launch.coord_fields)
    doc["reference_check"] = {"max_rel_err": res["max_rel_err"]}
    if launch.runner:  # what the runner reported about its launch (grid, steps, weights, ...)
        doc["runner_facts"] = runner_facts(res)
    return doc, raw


def runner_facts(result: dict) -> dict:
    """The JSON-able extras a CUDA runner returned besides what :func:`run_once` itself fills in
    (``phase_seconds``, {phase: wall seconds}, included; the absolute ``phase_stamps`` are not)."""
    own = ("trace", "intervals", "cubin", "symbol", "max_rel_err", "phase_stamps", "outputs")
    return {k: v for k, v in result.items() if k not in own
            and (isinstance(v, (str, int, float, bool, list, type(None)))
                 or (k == "phase_seconds" and isinstance(v, dict)))}
