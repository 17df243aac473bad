"""Compile a ``@triton.jit`` function exactly as Triton's JIT would for one launch, on the CPU.

When a user launches ``kernel[grid](x, y, n, BLOCK=1024)``, ``JITFunction.run`` first *specialises*
the kernel on the arguments: a pointer whose address is a multiple of 16, or an integer that is,
gets ``tt.divisibility = 16``; an integer equal to 1 becomes a constexpr. Those attributes change
the compiled kernel (vectorised and cp.async loads need them), so a kernel compiled from a bare
signature is a different kernel. This module does not re-implement the rules: it runs Triton's own
binder (``create_function_from_signature``, which calls the native ``specialize_impl`` and the
backend's argument rules) and ``JITFunction._pack_args`` on stand-in arguments that carry only what
the JIT reads of them (dtype and ``data_ptr()`` of a tensor; the value of a scalar), then compiles
``ASTSource(fn, signature, constexprs, attrs)`` with the options the JIT derives, as
``JITFunction._do_compile`` does.

These are Triton internals; they are the same in Triton 3.6 and 3.7 (checked by
``tests/test_triton_specialization.py`` against ``JITFunction.warmup`` under both). This is the one
module that touches them: a Triton without them gets :class:`SpecializationUnavailableError`.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass, field

from ...errors import ArgusInputError

# torch's caching allocator hands out 512-byte aligned blocks; 256 is what CUDA guarantees and all
# the JIT can see is "multiple of 16 or not", so any multiple of 16 gives the same kernel.
TORCH_ALIGNMENT = 256
# torch dtype name -> bytes per element
TENSOR_DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1,
                 "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "bool": 1}
TESTED_TRITON = ("3.6", "3.7")


class SpecializationUnavailableError(RuntimeError):
    """This Triton lacks the JIT internals that specialisation is read from."""


class LaunchArgumentError(ArgusInputError):
    """A launch argument description that is not a tensor, an int, a float or a bool of the kernel."""


@dataclass(frozen=True)
class TorchDtypeName:
    """A torch dtype by name, without importing torch (``plan`` and ``discover`` stay torch-free).

    The JIT reads a tensor's dtype through ``str()`` (``"torch.float16"``); it compares equal to the
    torch dtype of that name, so a ``@triton.heuristics`` lambda that tests ``x.dtype == torch.float16``
    sees the same answer."""

    name: str

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return str(other) == str(self)

    def __hash__(self) -> int:
        return hash(str(self))

    @property
    def itemsize(self) -> int:
        return TENSOR_DTYPES[self.name]


@dataclass(frozen=True)
class TensorArg:
    """What the JIT reads of a tensor argument: ``dtype`` and ``data_ptr()`` (and, for heuristics,
    ``shape``, ``stride()``, ``element_size()``, ``numel()``).

    ``align`` is the address alignment in bytes; the stand-in's address is an odd multiple of it, so
    a 256-aligned tensor is divisible by 16 and an 8-aligned one is not."""

    dtype: TorchDtypeName
    shape: tuple[int, ...]
    align: int = TORCH_ALIGNMENT

    def data_ptr(self) -> int:
        return self.align * 4097

    def element_size(self) -> int:
        return self.dtype.itemsize

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def stride(self) -> tuple[int, ...]:  # contiguous, as torch.empty gives
        out, acc = [], 1
        for d in reversed(self.shape):
            out.append(acc)
            acc *= d
        return tuple(reversed(out))


def tensor_arg(dtype: str, shape, align: int = TORCH_ALIGNMENT) -> TensorArg:
    """A :class:`TensorArg` for a torch dtype name (``"float16"``) and a shape."""
    if dtype not in TENSOR_DTYPES:
        raise LaunchArgumentError(f"tensor dtype {dtype!r} unknown; valid: {', '.join(TENSOR_DTYPES)}")
    if not isinstance(align, int) or align < 1 or align & (align - 1):
        raise LaunchArgumentError(f"tensor align {align!r} must be a power of two (bytes)")
    return TensorArg(TorchDtypeName(dtype), tuple(int(d) for d in shape), align)


def _internals():
    import triton
    from triton.runtime import jit

    make = getattr(jit, "create_function_from_signature", None)
    pack = getattr(jit.JITFunction, "_pack_args", None)
    if make is None or pack is None:
        raise SpecializationUnavailableError(
            f"triton {triton.__version__} has no JIT binder/_pack_args; Argus reads the JIT's argument "
            f"specialisation from those of triton {' and '.join(TESTED_TRITON)}")
    return make


@contextlib.contextmanager
def _without_torch_import():
    """Keep the binder from importing torch where nothing else has: the first call of Triton's native
    ``specialize_impl`` imports torch only to register a fast path for ``torch.Tensor`` arguments (it
    clears the ImportError and falls back to any object with ``data_ptr``), and the stand-ins here
    are not torch tensors, so the specialisation is the same (checked on every example kernel by
    tests/test_triton_specialization.py). That import is seconds in a process that needs no torch (the CLI's
    plan-time check, ``discover``). ``sys.modules["torch"] = None`` makes the import fail; only while
    this is the process's one thread, so no other thread's import of torch can see it."""
    if "torch" in sys.modules or threading.active_count() > 1:
        yield
        return
    sys.modules["torch"] = None
    try:
        yield
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


def _jit_options(fn, kwargs: dict) -> dict:
    """The options ``JITFunction.run`` adds before binding (debug, instrumentation mode)."""
    from triton import knobs

    out = dict(kwargs)
    out["debug"] = out.get("debug", fn.debug) or knobs.runtime.debug
    if hasattr(knobs.compilation, "instrumentation_mode"):
        out["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    return out


def specialize(fn, args: dict, kwargs: dict, target):
    """(signature, constexprs, attrs, options) the JIT derives for ``fn`` launched with ``args``
    (kernel parameter name -> value or :class:`TensorArg`) and ``kwargs`` (constexprs and compile
    options such as ``num_warps``), for ``target`` (a ``GPUTarget``)."""
    from triton.compiler import make_backend

    make_binder = _internals()
    names = [p.name for p in fn.params]
    unknown = sorted(set(args) - set(names))
    if unknown:
        raise LaunchArgumentError(f"kernel {fn.__name__!r} has no parameter(s) {unknown}; "
                                  f"parameters: {', '.join(names)}")
    backend = make_backend(target)
    binder = make_binder(fn.signature, fn.params, backend)
    run_kwargs = _jit_options(fn, {**args, **kwargs})
    try:
        with _without_torch_import():
            bound, specialization, options = binder(**run_kwargs)
    except TypeError as exc:  # a parameter without a value
        raise LaunchArgumentError(f"kernel {fn.__name__!r}: {exc}; give every non-constexpr parameter in "
                                  f"launch.args and every constexpr in launch.constexprs") from None
    return fn._pack_args(backend, run_kwargs, bound, specialization, options)


def jit_compile(fn, args: dict, kwargs: dict, target):
    """The ``CompiledKernel`` the JIT builds for this launch (what ``fn.warmup`` returns on a GPU of
    ``target``), built here without a GPU. Triton's on-disk cache makes a repeat compile cheap."""
    import triton

    options, signature, constexprs, attrs = specialize(fn, args, kwargs, target)
    src = triton.compiler.ASTSource(fn, signature, constexprs, attrs)
    compiled = triton.compile(src, target=target, options=options.__dict__)
    declared = [(i, constexprs[(i,)]) for i, p in enumerate(fn.params) if p.is_constexpr and (i,) in constexprs]
    meta = GridMeta(tuple(p.name for p in fn.params if not p.is_constexpr),
                    {fn.params[i].name: v for i, v in declared})
    return RuntimeArgsKernel(compiled, declared, meta)


@dataclass(frozen=True)
class GridMeta:
    """What a grid callable (``kernel[lambda meta: ...]``) is given for a launch: the kernel's run-time
    parameters by name, as passed, and its constexprs (launch constexprs and autotune config)."""

    runtime_names: tuple[str, ...] = ()
    constexprs: dict = field(default_factory=dict)

    def of(self, args) -> dict:
        return {**dict(zip(self.runtime_names, args)), **self.constexprs}


class RuntimeArgsKernel:
    """A ``CompiledKernel`` that launches as the JIT's ``kernel[grid](*args)`` does: ``grid`` is an int,
    1 to 3 ints, or a callable of the launch's meta-parameters (:class:`GridMeta`) returning those (a
    bare ``CompiledKernel`` indexes ``grid[0..2]`` and needs all three), and ``args`` are the
    run-time arguments only.

    The launcher of a kernel compiled from the function takes every parameter, the declared
    constexprs included, because the JIT passes them all; a variant compiled from TTGIR text takes
    only the run-time ones (plus Argus's buffer), so it inserts none (:meth:`variant`). Inserting the
    values here lets a module's ``run(compiled, inputs)`` launch every variant the same way.
    ``launched_grid`` is the grid of the last launch (what Argus sizes per-CTA buffers by).
    Everything else (``asm``, ``metadata``, ``hash``, ...) is the compiled kernel's own.
    """

    def __init__(self, compiled, constexpr_values: list[tuple[int, object]] = (), grid_meta: GridMeta | None = None):
        self.compiled = compiled
        self.constexpr_values = sorted(constexpr_values)  # (parameter index, value)
        self.grid_meta = grid_meta or GridMeta()
        self.launched_grid: tuple[int, int, int] | None = None

    def __getattr__(self, name):
        return getattr(self.compiled, name)

    def variant(self, compiled) -> RuntimeArgsKernel:
        """``compiled`` (a kernel built from this one's TTGIR, edited) launched with this one's grid meta."""
        return RuntimeArgsKernel(getattr(compiled, "compiled", compiled), (), self.grid_meta)

    def full_args(self, args) -> list:
        full = list(args)
        for index, value in self.constexpr_values:
            full.insert(index, value)
        return full

    def __getitem__(self, grid):
        def launch(*args):
            dims = grid3(grid(self.grid_meta.of(args)) if callable(grid) else grid)
            self.launched_grid = dims
            return self.compiled[dims](*self.full_args(args))
        return launch


def grid3(grid) -> tuple[int, int, int]:
    """``grid`` as the three dimensions a ``CompiledKernel`` launches: an int or 1 to 3 positive ints,
    padded with 1s (the forms ``kernel[grid]`` accepts, a grid callable's result included)."""
    dims = (grid,) if isinstance(grid, int) else tuple(grid) if isinstance(grid, (tuple, list)) else None
    if not dims or len(dims) > 3 or any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in dims):
        raise LaunchArgumentError(f"grid {grid!r} must be an int, 1 to 3 positive ints, or a callable of the "
                                  "launch's meta-parameters returning those")
    return dims + (1,) * (3 - len(dims))


def describe_specialization(fn, args: dict, kwargs: dict, target) -> dict:
    """JSON-able summary of what the JIT specialised: per parameter its type and attributes."""
    _options, signature, constexprs, attrs = specialize(fn, args, kwargs, target)
    names = [p.name for p in fn.params]
    out = {}
    for i, name in enumerate(names):
        entry = {"type": signature[name]}
        if (i,) in constexprs:
            entry["value"] = constexprs[(i,)]
        if attrs.get((i,)):
            entry["attrs"] = [list(a) for a in attrs[(i,)]]
        out[name] = entry
    return out
