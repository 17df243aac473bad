"""The ``launch`` of a CuPy program, checked against the kernel's own signature.

A CuPy program's ``argus_program.json``::

    {"name": "row_softmax", "kind": "cupy",
     "sources": ["row_softmax.cu", "regions.h", "reference.py"],
     "flags": ["-lineinfo"],                     # the options the user's cupy.RawModule(options=...) passes
     "regions": "regions.json",
     "launch": {
       "source": "row_softmax.cu",               # the RawModule code (default: the first .cu source)
       "kernel": "row_softmax",                  # the extern "C" __global__ function get_function names
       "grid": [256], "block": [128],            # as passed to the RawKernel call
       "shared_mem": 0,                          # dynamic shared memory in bytes (optional)
       "args": {                                 # every kernel parameter, by its name in the source
         "x": {"tensor": "float32", "shape": [256, 1024], "init": "randn"},
         "y": {"tensor": "float32", "shape": [256, 1024], "init": "poison"},
         "n_cols": {"int32": 1024}
       },
       "reference": "reference.py:row_softmax",  # fn(**NumPy inputs it names) -> {parameter: expected}
       "rtol": 1e-4, "atol": 1e-7,               # tolerance of that check (|got - want| <= atol + rtol |want|)
       "arch": "sm_90a",                         # optional GPU code (default sm_90a)
       "coord_kind": "iteration"                 # optional: what *_AT marker coordinates count
     }}

Arguments are passed in the order of the kernel's parameter list, read from the source (comments
dropped), so ``args`` is keyed by parameter name and must name each parameter exactly once. A tensor
goes to a pointer parameter and a scalar to a value parameter; where the C type is a plain one
(``float``, ``double``, ``__half``, ``int``, ``long long``, ``unsigned char``, ``int32_t``, ...), its
dtype must match. ``init`` is ``randn``, ``uniform`` [low, high), ``randint`` [low, high), ``poison``
(NaN, or -1 for integers: an output the kernel must overwrite) or ``zeros``. Every run draws fresh
inputs with NumPy and uploads them with ``cupy.asarray``.

The reference gets host copies of the inputs (NumPy arrays, scalars as Python numbers), only those
its parameters name, and returns the expected value of each output parameter (a NumPy array or a
CPU PyTorch tensor). Every error here is one line naming the bad value (:class:`CupyProgramError`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import ArgusInputError
from ..cuda.run import COORD_KINDS, INITS, SCALAR_TYPES
from ..errors import ProgramRunError

LAUNCH_KEYS = ("source", "kernel", "grid", "block", "shared_mem", "args", "reference", "rtol", "atol", "arch",
               "coord_kind")
REQUIRED_KEYS = ("kernel", "grid", "block", "args", "reference")
# CuPy has no bfloat16 array type, so the CUDA kind's bfloat16 tensors are not offered here.
TENSOR_DTYPES = ("float32", "float16", "float64", "int32", "int64", "uint8")
DEFAULT_ARCH = "sm_90a"

# Plain C types whose dtype is known; anything else (a struct, a template parameter, a typedef of the
# program's own) is accepted for any dtype of the right shape (tensor or scalar).
C_TYPES = {
    "float": "float32", "double": "float64", "__half": "float16", "half": "float16",
    "int": "int32", "signedint": "int32", "int32_t": "int32",
    "unsignedint": "uint32", "unsigned": "uint32", "uint32_t": "uint32",
    "longlong": "int64", "longlongint": "int64", "int64_t": "int64", "longlongsigned": "int64",
    "unsignedlonglong": "uint64", "unsignedlonglongint": "uint64", "uint64_t": "uint64", "size_t": "uint64",
    "unsignedchar": "uint8", "uint8_t": "uint8",
}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict)\b")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"')
_ATTRIBUTES = re.compile(r"\b__(launch_bounds|cluster_dims|maxnreg)__\s*\([^()]*\)")


class CupyProgramError(ProgramRunError, ArgusInputError):
    """A CuPy program whose launch, source or reference is wrong: one line naming the bad value."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name, its C type as written, and what the launch must give it."""

    name: str
    ctype: str

    @property
    def pointer(self) -> bool:
        return "*" in self.ctype or "[" in self.ctype

    @property
    def dtype(self) -> str | None:
        """The dtype the C type names (its element type for a pointer), None when not a plain type."""
        base = _QUALIFIERS.sub(" ", self.ctype).replace("*", " ").split("[")[0]
        return C_TYPES.get("".join(base.split()))


def _code(text: str) -> str:
    """The source without comments, with string literals blanked (extern "C" stays visible as extern)."""
    return _STRINGS.sub('""', _COMMENTS.sub(" ", text))


def global_functions(source: str) -> list[str]:
    """Names of the ``__global__`` functions declared in ``source`` (in order, once each)."""
    code, names = _code(source), []
    for m in re.finditer(r"\b__global__\b", code):
        decl = _ATTRIBUTES.sub(" ", code[m.end():m.end() + 4000])
        hit = re.match(r"[^;{}()]*?\b([A-Za-z_]\w*)\s*\(", decl)
        names += [hit.group(1)] if hit else []
    return list(dict.fromkeys(names))


def kernel_parameters(source: str, kernel: str) -> list[Param] | None:
    """The parameters of ``__global__`` function ``kernel`` in ``source``; None if it is not declared there."""
    code = _code(source)
    for m in re.finditer(rf"\b{re.escape(kernel)}\s*\(", code):
        head = code[max(code.rfind(c, 0, m.start()) for c in ";{}") + 1:m.start()]
        if "__global__" not in head:
            continue
        depth, start = 0, m.end()
        for end in range(start, len(code)):
            depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(code[end], 0)
            if depth < 0:
                return _split_parameters(code[start:end], kernel)
    return None


def _split_parameters(text: str, kernel: str) -> list[Param]:
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    params = []
    for item in (i.split("=")[0].strip() for i in items):
        if item in ("", "void"):
            continue
        m = re.fullmatch(r"(.*?)\b([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)", item, re.S)
        if not m or not m.group(1).strip():
            raise CupyProgramError(f"kernel {kernel!r}: cannot read parameter {item!r} (give every parameter a "
                                   "type and a name)")
        params.append(Param(m.group(2), " ".join((m.group(1) + m.group(3)).split())))
    return params


@dataclass(frozen=True)
class CupyLaunch:
    """A validated ``launch`` of a CuPy program (see the module docstring)."""

    kernel: str
    params: tuple[Param, ...]  # the kernel's, in order
    args: dict  # parameter name -> its value description
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_mem: int
    ctas: int  # CTAs in the grid
    threads_per_cta: int
    root: Path
    source: str
    reference: str
    rtol: float
    atol: float
    arch: str
    coord_kind: str | None

    @property
    def source_path(self) -> Path:
        return _program_file(self.root, self.source)

    @classmethod
    def from_program(cls, program) -> "CupyLaunch":
        name = program.name
        if program.kind != "cupy":
            raise CupyProgramError(f"program {name!r} is of kind {program.kind!r}; this runs kind 'cupy'")
        if not program.root:
            raise CupyProgramError(f"program {name!r} has no source directory (root)")
        launch, root = program.launch, Path(program.root).resolve()
        bad = sorted(set(launch) - set(LAUNCH_KEYS))
        if bad:
            raise CupyProgramError(f"launch of {name!r}: unknown key(s) {bad}; valid: {', '.join(LAUNCH_KEYS)}")
        source = launch.get("source") or next((p.name for p in sorted(root.iterdir()) if p.suffix == ".cu"), None)
        if not source or not _program_file(root, source).is_file():
            raise CupyProgramError(f"launch of {name!r}: RawModule source {source!r} not found under {root}")
        text = _program_file(root, source).read_text(encoding="utf-8", errors="replace")
        kernels = ", ".join(global_functions(text)) or "none"
        missing = [k for k in REQUIRED_KEYS if k not in launch]
        if missing:
            raise CupyProgramError(f"launch of {name!r} lacks {missing[0]!r}" + (
                f": the name of the extern \"C\" __global__ function cupy.RawModule.get_function takes "
                f"(__global__ functions in {source}: {kernels})" if missing[0] == "kernel" else
                f"; a CuPy launch needs {', '.join(REQUIRED_KEYS)}"))
        kernel = launch["kernel"]
        params = kernel_parameters(text, kernel) if isinstance(kernel, str) else None
        if params is None:
            raise CupyProgramError(f"launch of {name!r}: kernel {kernel!r} is not a __global__ function of {source} "
                                   f"(__global__ functions there: {kernels})")
        grid, block = (_dims(name, launch[k], k) for k in ("grid", "block"))
        _check_args(name, kernel, params, launch["args"])
        if not (isinstance(launch["reference"], str) and launch["reference"].count(":") == 1):
            raise CupyProgramError(f"launch of {name!r}: reference {launch['reference']!r} must be "
                                   "'<file in the program directory>:<function>'")
        if launch.get("coord_kind") not in (None,) + COORD_KINDS:
            raise CupyProgramError(f"launch of {name!r}: coord_kind {launch['coord_kind']!r} unknown; valid: "
                                   f"{', '.join(COORD_KINDS)}")
        arch = launch.get("arch", DEFAULT_ARCH)
        if not (isinstance(arch, str) and re.fullmatch(r"sm_\d{2,3}a?", arch)):
            raise CupyProgramError(f"launch of {name!r}: arch {arch!r} is not of the form sm_XY[a] (e.g. sm_90a)")
        shared = launch.get("shared_mem", 0)
        if not (isinstance(shared, int) and shared >= 0):
            raise CupyProgramError(f"launch of {name!r}: shared_mem {shared!r} must be a byte count >= 0")
        tol = {k: launch.get(k, d) for k, d in (("rtol", 1e-5), ("atol", 1e-6))}
        for key, value in tol.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise CupyProgramError(f"launch of {name!r}: {key} {value!r} must be a number >= 0")
        return cls(kernel, tuple(params), dict(launch["args"]), grid, block, shared, math.prod(grid), math.prod(block),
                   root, source, launch["reference"], float(tol["rtol"]), float(tol["atol"]), arch,
                   launch.get("coord_kind"))

    def ordered_args(self) -> list[tuple[str, dict]]:
        """(parameter name, its ``args`` entry) in the kernel's parameter order."""
        return [(p.name, self.args[p.name]) for p in self.params]


def _program_file(root: Path, rel: str) -> Path:
    from ...program import program_file

    return program_file(root, rel)[1]


def _dims(name: str, dims, what: str) -> tuple[int, ...]:
    if not (isinstance(dims, list) and 1 <= len(dims) <= 3
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)):
        raise CupyProgramError(f"launch of {name!r}: {what} {dims!r} must be a list of 1-3 positive ints")
    return tuple(dims)


def _check_args(name: str, kernel: str, params: list[Param], args) -> None:
    names = [p.name for p in params]
    where = f"launch of {name!r}: args"
    if not isinstance(args, dict):
        raise CupyProgramError(f"{where} must be an object keyed by {kernel}'s parameter names ({', '.join(names)}), "
                               f"got {type(args).__name__}")
    extra = [k for k in args if k not in names]
    if extra:
        raise CupyProgramError(f"{where} names {extra[0]!r}, which is not a parameter of {kernel} "
                               f"(parameters: {', '.join(names) or 'none'})")
    lacking = [n for n in names if n not in args]
    if lacking:
        raise CupyProgramError(f"{where} lacks {lacking[0]!r}: every parameter of {kernel} needs a value "
                               f"(parameters: {', '.join(names)})")
    for p in params:
        spec, at = args[p.name], f"{where}[{p.name!r}]"
        kinds = [k for k in spec if k in ("tensor",) + SCALAR_TYPES] if isinstance(spec, dict) else []
        if len(kinds) != 1:
            raise CupyProgramError(f"{at} = {spec!r} must be {{'tensor': dtype, 'shape': [...]}} or "
                                   f"{{<scalar type>: value}} with scalar types {', '.join(SCALAR_TYPES)}")
        tensor = kinds[0] == "tensor"
        if tensor != p.pointer:
            raise CupyProgramError(f"{at} is a {'tensor' if tensor else 'scalar'}, but parameter {p.name!r} of "
                                   f"{kernel} is '{p.ctype}' ({'a pointer' if p.pointer else 'a value'})")
        dtype = spec["tensor"] if tensor else kinds[0]
        if tensor and dtype not in TENSOR_DTYPES:
            raise CupyProgramError(f"{at}: tensor dtype {dtype!r} unknown; valid: {', '.join(TENSOR_DTYPES)}")
        if p.dtype is not None and p.dtype != dtype:
            raise CupyProgramError(f"{at} is {dtype}, but parameter {p.name!r} of {kernel} is '{p.ctype}' ({p.dtype})")
        if not tensor:
            value = spec[dtype]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                    dtype[0] in "iu" and not isinstance(value, int)):
                raise CupyProgramError(f"{at}: {dtype} value {value!r} is not a number of that type")
            continue
        shape = spec.get("shape")
        if not (isinstance(shape, list) and shape and all(isinstance(d, int) and d > 0 for d in shape)):
            raise CupyProgramError(f"{at}: shape {shape!r} must be a non-empty list of positive ints")
        if spec.get("init", "randn") not in INITS:
            raise CupyProgramError(f"{at}: init {spec.get('init')!r} unknown; valid: {', '.join(INITS)}")
        if spec.get("init") == "randint" and "high" not in spec:
            raise CupyProgramError(f"{at}: init 'randint' needs 'high' (and optionally 'low')")


def kernel_name(program) -> str:
    """The launch's kernel (the kind registry's ``kernel`` hook)."""
    return CupyLaunch.from_program(program).kernel
