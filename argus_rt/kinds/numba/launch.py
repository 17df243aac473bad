"""The ``launch`` of a numba program, its inputs, its kernel-argument ABI and its NumPy reference check.

A numba program is a ``numba.cuda.jit`` kernel in a module of the program directory. Its launch (in
``argus_program.json``), as this module reads it::

    "launch": {
      "module": "row_reduce.py",             # the kernel's Python file
      "kernel": "row_reduce",                # the name of the @cuda.jit kernel in it
      "grid": [512], "block": [256],
      "args": {                              # one entry per kernel parameter, by the parameter's name
        "x": {"array": "float32", "shape": [512, 2048], "init": "uniform", "low": -1, "high": 1},
        "out": {"array": "float32", "shape": [512], "init": "poison"},    # an output: NaN-filled
        "n_cols": {"int32": 2048}
      },
      "reference": "row_reduce.py:reference",  # fn(**inputs it names, as NumPy) -> {output name: expected}
      "rtol": 1e-4, "atol": 1e-4,            # tolerance of that check
      "signature": "void(float32[:, ::1], float32[::1], int32)",  # optional cross-check of the args' types
      "arch": "sm_90",                       # optional GPU code (default sm_90, what numba's cc (9, 0) targets)
      "fastmath": false,                     # optional, numba's fastmath
      "coord_kind": "iteration"              # optional: what begin_at/end_at coordinates count
    }

Arrays are C-contiguous (numba type ``float32[:, ::1]``); ``init`` is one of the CUDA kind's
(``randn``, ``uniform`` [low, high), ``randint`` [low, high), ``poison`` (NaN, or -1 for integers),
``zeros``), drawn fresh with NumPy on every run. The kernel's parameter order comes from the kernel
itself; ``args`` is keyed by name. Nothing here imports numba: a launch is checked without it.
"""
from __future__ import annotations

import ctypes
import importlib.util
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ArgusInputError
from ..cuda.run import COORD_KINDS, INITS, SCALAR_TYPES
from ..errors import ProgramRunError, ReferenceMismatchError

# The marker build mode of a compile (argus_rt.kinds.numba.markers reads it): 0 off, 1 marker-only, 2 trace.
MODE_ENV = "ARGUS_NUMBA_MARKERS"
VARIANT_MODES = {"base": 0, "trace_free": 0, "marker_only": 1, "traced": 2}
LAUNCH_KEYS = ("module", "kernel", "grid", "block", "args", "reference", "rtol", "atol", "signature", "arch",
               "fastmath", "coord_kind")
REQUIRED_KEYS = ("module", "kernel", "grid", "block", "args", "reference")
ARRAY_DTYPES = ("float16", "float32", "float64", "int32", "int64", "uint8")
_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
           "float32": ctypes.c_float, "float64": ctypes.c_double}
_INTP = ctypes.c_int64  # numba's intp on a 64-bit host: shapes, strides, sizes of an array argument


class NumbaProgramError(ProgramRunError, ArgusInputError):
    """A numba program whose launch, module, kernel or signature is wrong; one line, before any GPU work."""


@dataclass(frozen=True)
class NumbaLaunch:
    """A validated ``launch`` of a numba program (see the module docstring)."""

    kernel: str  # the @cuda.jit kernel's name in ``module``
    module: str  # its file, relative to ``root``
    root: Path  # the program directory
    args: dict  # parameter name -> {"array": dtype, "shape": [...], ...} or {scalar type: value}
    grid: tuple[int, ...]
    block: tuple[int, ...]
    reference: str  # "<file>:<function>" in ``root``
    rtol: float
    atol: float
    signature: str | None  # numba signature text to check ``args`` against
    arch: str  # "sm_90"
    fastmath: bool
    coord_kind: str | None

    def trace_geometry(self) -> dict:
        """The launch's ``TraceConfig`` geometry: {ctas, threads_per_cta}."""
        return {"ctas": int(np.prod(self.grid)), "threads_per_cta": int(np.prod(self.block))}

    @property
    def cc(self) -> tuple[int, int]:
        """numba's compute capability for :attr:`arch` ("sm_90" -> (9, 0))."""
        digits = self.arch[3:]
        return int(digits[:-1]), int(digits[-1])

    @classmethod
    def from_program(cls, program) -> "NumbaLaunch":
        where, launch = f"launch of {program.name!r}", program.launch
        unknown, missing = sorted(set(launch) - set(LAUNCH_KEYS)), [k for k in REQUIRED_KEYS if k not in launch]
        problem = (f"program {program.name!r} is of kind {program.kind!r}, not 'numba'" if program.kind != "numba" else
                   f"{where}: unknown key(s) {unknown}; valid: {', '.join(LAUNCH_KEYS)}" if unknown else
                   f"{where} lacks {missing}; a numba launch needs {', '.join(REQUIRED_KEYS)}" if missing else
                   f"program {program.name!r} has no source directory (root)" if not program.root else None)
        if problem:
            raise NumbaProgramError(problem)
        for what in ("grid", "block"):
            dims = launch[what]
            if not (isinstance(dims, list) and 1 <= len(dims) <= 3 and all(type(d) is int and d > 0 for d in dims)):
                raise NumbaProgramError(f"{where}: {what} must be a list of 1-3 positive ints, got {dims!r}")
        args = launch["args"]
        if not isinstance(args, dict) or not args:
            raise NumbaProgramError(f"{where}: args must be an object {{kernel parameter name: spec}}, got {args!r}")
        for name, spec in args.items():
            _check_arg(where, name, spec)
        if not re.fullmatch(r"[^:]+\.py:[A-Za-z_][A-Za-z0-9_]*", str(launch["reference"])):
            raise NumbaProgramError(f"{where}: reference {launch['reference']!r} must be '<file.py>:<function>'")
        arch = str(launch.get("arch", "sm_90"))
        if not re.fullmatch(r"sm_\d{2,3}", arch):
            raise NumbaProgramError(f"{where}: arch {arch!r} must be a plain GPU code like 'sm_90' (numba compiles "
                                    "for a compute capability; no 'a'/'f' variants)")
        if launch.get("coord_kind") not in (None,) + COORD_KINDS:
            raise NumbaProgramError(f"{where}: coord_kind {launch['coord_kind']!r} unknown; valid: {', '.join(COORD_KINDS)}")
        if not isinstance(launch.get("fastmath", False), bool):
            raise NumbaProgramError(f"{where}: fastmath must be true or false, got {launch['fastmath']!r}")
        return cls(str(launch["kernel"]), str(launch["module"]), Path(program.root).resolve(), dict(args),
                   tuple(launch["grid"]), tuple(launch["block"]), str(launch["reference"]),
                   float(launch.get("rtol", 1e-5)), float(launch.get("atol", 1e-6)), launch.get("signature"), arch,
                   bool(launch.get("fastmath", False)), launch.get("coord_kind"))

    def check_parameters(self, params: list[str]) -> None:
        """Raise unless ``args`` names exactly the kernel's parameters ``params``."""
        missing = [p for p in params if p not in self.args]
        extra = sorted(set(self.args) - set(params))
        if missing or extra:
            what = "; ".join(x for x in (f"lacks {missing}" if missing else "",
                                         f"has {extra}, which {self.kernel} does not take" if extra else "") if x)
            raise NumbaProgramError(f"launch.args {what}; kernel parameters: {', '.join(params)}")

    def numba_types(self, params: list[str]) -> list[str]:
        """The numba type of each parameter, as text (``float32[:, ::1]``, ``int32``), in ``params`` order."""
        out = []
        for name in params:
            spec = self.args[name]
            if "array" in spec:
                dims = [":"] * (len(spec["shape"]) - 1) + ["::1"]
                out.append(f"{spec['array']}[{', '.join(dims)}]")
            else:
                out.append(_scalar_kind(spec))
        return out

    def signature_text(self, params: list[str]) -> str:
        return f"void({', '.join(self.numba_types(params))})"


def _scalar_kind(spec: dict) -> str:
    (kind,) = [k for k in spec if k in SCALAR_TYPES]
    return kind


def _check_arg(where: str, name: str, spec) -> None:
    if not isinstance(spec, dict) or len([k for k in spec if k in ("array",) + SCALAR_TYPES]) != 1:
        raise NumbaProgramError(f"{where}: args[{name!r}] = {spec!r} must be {{'array': dtype, 'shape': [...]}} or "
                                f"{{<scalar type>: value}} with scalar types {', '.join(SCALAR_TYPES)}")
    if "array" in spec:
        if spec["array"] not in ARRAY_DTYPES:
            raise NumbaProgramError(f"{where}: args[{name!r}]: array dtype {spec['array']!r} unknown; valid: "
                                    f"{', '.join(ARRAY_DTYPES)}")
        shape = spec.get("shape")
        if not (isinstance(shape, list) and shape and all(type(d) is int and d > 0 for d in shape)):
            raise NumbaProgramError(f"{where}: args[{name!r}]: shape must be a non-empty list of positive ints, "
                                    f"got {shape!r}")
        if spec.get("init", "randn") not in INITS:
            raise NumbaProgramError(f"{where}: args[{name!r}]: init {spec.get('init')!r} unknown; valid: {', '.join(INITS)}")
        if spec.get("init") == "randint" and "high" not in spec:
            raise NumbaProgramError(f"{where}: args[{name!r}]: init 'randint' needs 'high' (and optionally 'low')")
    else:
        value = spec[_scalar_kind(spec)]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise NumbaProgramError(f"{where}: args[{name!r}] = {spec!r}: the value must be a number")


# ---- inputs, arguments, reference -------------------------------------------------------------

def make_inputs(launch: NumbaLaunch, seed: int | None = None) -> dict:
    """Fresh inputs, {parameter name: NumPy array (C-contiguous) or NumPy scalar}."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, spec in launch.args.items():
        if "array" not in spec:
            kind = _scalar_kind(spec)
            out[name] = getattr(np, kind)(spec[kind])
            continue
        dtype, shape, init = np.dtype(spec["array"]), tuple(spec["shape"]), spec.get("init", "randn")
        if init == "randn":
            a = rng.standard_normal(shape)
        elif init == "uniform":
            a = rng.uniform(float(spec.get("low", 0.0)), float(spec.get("high", 1.0)), shape)
        elif init == "randint":
            a = rng.integers(int(spec.get("low", 0)), int(spec["high"]), shape)
        elif init == "poison":
            a = np.full(shape, np.nan if dtype.kind == "f" else -1)
        else:
            a = np.zeros(shape)
        out[name] = np.ascontiguousarray(a.astype(dtype))
    return out


def kernel_arguments(launch: NumbaLaunch, params: list[str], inputs: dict, pointers: dict[str, int]) -> list:
    """The kernel's arguments as numba's kernel ABI lays them out (what its dispatcher passes), as ctypes
    values for :meth:`argus_rt.launch.CubinModule.launch`: an array is (meminfo, parent, nitems, itemsize,
    data, shape..., strides... in bytes), a scalar its C type. ``pointers``: device address of each array."""
    out: list = []
    for name in params:
        spec, value = launch.args[name], inputs[name]
        if "array" in spec:
            a = np.asarray(value)
            out += [ctypes.c_void_p(0), ctypes.c_void_p(0), _INTP(a.size), _INTP(a.itemsize),
                    ctypes.c_uint64(int(pointers[name]))]
            out += [_INTP(d) for d in a.shape] + [_INTP(s) for s in a.strides]
        else:
            out.append(_CTYPES[_scalar_kind(spec)](value.item() if hasattr(value, "item") else value))
    return out


def argument_sizes(launch: NumbaLaunch, params: list[str]) -> list[int]:
    """Byte size of each word :func:`kernel_arguments` passes (compared with the PTX entry's parameters)."""
    inputs = {n: np.zeros(s["shape"], s["array"]) if "array" in s else getattr(np, _scalar_kind(s))(0)
              for n, s in launch.args.items()}
    return [ctypes.sizeof(a) for a in kernel_arguments(launch, params, inputs, dict.fromkeys(params, 0))]


def load_reference(launch: NumbaLaunch):
    """The reference function ``launch.reference`` names, imported from the program directory."""
    from ...program import program_file

    file, _, func = launch.reference.partition(":")
    root, path = program_file(launch.root, file)
    if not path.is_relative_to(root) or not path.is_file():
        raise NumbaProgramError(f"reference {launch.reference!r}: {file} is not a file inside {root}")
    spec = importlib.util.spec_from_file_location(f"argus_numba_reference_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:
        raise NumbaProgramError(f"cannot import {file} for its reference: {type(exc).__name__}: {exc}") from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise NumbaProgramError(f"reference {launch.reference!r}: {file} has no function {func!r}")
    return fn


def check_reference(launch: NumbaLaunch, before: dict, after: dict, reference=None) -> float:
    """Compare the kernel's outputs ``after`` ({name: NumPy array}) with ``reference(**before it names)``;
    return the worst relative error, raise :class:`ReferenceMismatchError` past ``rtol``/``atol``."""
    fn = reference or load_reference(launch)
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    expected = fn(**{k: v for k, v in before.items() if takes_all or k in params})
    if not isinstance(expected, dict) or not expected:
        raise ReferenceMismatchError(f"reference {launch.reference!r} returned {type(expected).__name__}; it must "
                                     "return {output parameter name: expected array}")
    worst = 0.0
    for name, want in expected.items():
        if name not in after:
            raise ReferenceMismatchError(f"reference names {name!r}, which is not an array argument; arrays: "
                                         f"{', '.join(sorted(after))}")
        got, want = np.asarray(after[name], dtype=np.float64), np.asarray(want, dtype=np.float64)
        if got.shape != want.shape:
            raise ReferenceMismatchError(f"output {name!r}: shape {got.shape} vs reference {want.shape}")
        if np.isnan(got).any() and not np.isnan(want).any():
            raise ReferenceMismatchError(f"output {name!r}: {int(np.isnan(got).sum())} elements unwritten (NaN)")
        if not np.allclose(got, want, rtol=launch.rtol, atol=launch.atol):
            err = float((np.abs(got - want) / (np.abs(want) + launch.atol)).max())
            raise ReferenceMismatchError(f"output {name!r} differs from the reference: max rel err {err:.3g} > rtol "
                                         f"{launch.rtol} (atol {launch.atol})")
        worst = max(worst, float((np.abs(got - want) / np.maximum(np.abs(want), launch.atol)).max()))
    return worst


def kernel_name(program) -> str:
    """The launch's kernel, the entry's name in the cubin (the kind registry's ``kernel`` hook)."""
    return NumbaLaunch.from_program(program).kernel
