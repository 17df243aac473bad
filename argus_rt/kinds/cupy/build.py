"""The variants of a CuPy program, compiled through NVRTC with the options CuPy passes.

CuPy 14 compiles ``cupy.RawModule(code=src, options=opts)`` (and ``RawKernel(src, name, opts)``) by
NVRTC with (``cupy/_core/core.pyx`` ``assemble_cupy_compiler_options``, ``cupy/cuda/compiler.py``
``_compile_with_cache_cuda`` and ``_compile_using_nvrtc``, in this order)::

    [-I<cupy>/_core/include/cupy/_cccl/{cub,thrust,libcudacxx}]  opts  [--std=c++17 unless opts set -std=]
    [-I<cupy>/_core/include]  -I<CUDA headers (cuda.pathfinder, 'cudart')>  -ftz=true
    [--device-debug --generate-line-info when CUPY_CUDA_COMPILE_WITH_DEBUG=1]
    -arch=sm_<XY>  --device-as-default-execution-space  [--pch when CUPY_NVRTC_USE_PCH=1, NVRTC 12.8+]

Argus compiles each variant the same way, with ``opts`` = the program's ``flags`` (the user's
RawModule options) followed by Argus's three: ``-DARGUS_MODE=<0 trace-free | 1 marker-only |
2 traced>``, ``-I<Argus csrc>`` (for ``argus/argus.cuh``) and ``-I<program directory>`` (its own
headers; CuPy needs the same ``-I`` among the user's options for quote includes). Two things differ
from what CuPy would do: ``-arch`` is the launch's ``arch`` (default ``sm_90a``; CuPy picks
``sm_90`` on an H200), and the NVRTC program is named after the source file (CuPy names it
``<hash>.cubin.cu``), which only the line table shows. CuPy's own include directories are on the
list only where CuPy is installed (it is not imported for them), so a CPU without CuPy compiles the
same code with two include directories fewer; neither names a header ``argus.cuh`` needs.

Cubins are cached in the shared build cache (:mod:`argus_rt.build_cache`) under
``<cache>/cupy/<program>_<variant>/`` by a SHA-256 of the options, the NVRTC version, the source, and
every header under Argus's ``csrc/argus`` and the program directory.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from ...build_cache import BuildSpec, fetch_or_build
from ...resources import csrc_dir
from ..cuda import build as cuda_build
from ..cuda.run import VARIANT_MODES
from .launch import CupyLaunch, CupyProgramError

HEADER_SUFFIXES = (".h", ".cuh", ".hpp", ".inc", ".inl")
CCCL_PARTS = ("cub", "thrust", "libcudacxx")


class CupyCompileError(CupyProgramError):
    """NVRTC rejected a variant's source; the message is one line with NVRTC's first error."""


class NvrtcNotFoundError(CupyProgramError):
    """NVRTC (cuda-python's bindings and the libnvrtc they load) is not available here."""


def cupy_include_dir() -> Path | None:
    """CuPy's header directory (``cupy/_core/include``) where CuPy is installed, found without importing it."""
    try:
        spec = importlib.util.find_spec("cupy")
    except (ImportError, ValueError):  # a module object without a spec (a test's stand-in)
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "_core" / "include"
    return path if path.is_dir() else None


def cuda_include_dir() -> str | None:
    """The CUDA headers CuPy 14 adds (``cuda.pathfinder.find_nvidia_header_directory('cudart')``)."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:
        return None
    return find_nvidia_header_directory("cudart")


def nvrtc_options(program, variant: str) -> list[str]:
    """The NVRTC options of ``variant``: CuPy's for the program's flags plus Argus's three (module docstring)."""
    if variant not in VARIANT_MODES:
        raise CupyProgramError(f"cannot build variant {variant!r} of a CuPy program; valid: {', '.join(VARIANT_MODES)}")
    launch = CupyLaunch.from_program(program)
    opts = [*program.flags, f"-DARGUS_MODE={VARIANT_MODES[variant]}", f"-I{csrc_dir()}", f"-I{launch.root}"]
    if not any("-std=" in o for o in opts):
        opts.append("--std=c++17")
    cupy_dir = cupy_include_dir()
    if cupy_dir is not None:
        opts = [f"-I{cupy_dir}/cupy/_cccl/{part}" for part in CCCL_PARTS] + opts + [f"-I{cupy_dir}"]
    cuda_dir = cuda_include_dir()
    opts += [f"-I{cuda_dir}"] if cuda_dir else []
    opts.append("-ftz=true")
    if _env_flag("CUPY_CUDA_COMPILE_WITH_DEBUG"):
        opts += ["--device-debug", "--generate-line-info"]
    opts += [f"-arch={launch.arch}", "--device-as-default-execution-space"]
    if _env_flag("CUPY_NVRTC_USE_PCH") and nvrtc().nvrtcVersion()[1:] >= (12, 8):
        opts.append("--pch")
    return opts


def _env_flag(name: str) -> bool:
    """CuPy's reading of a boolean environment variable: set and equal to 1."""
    try:
        return int(os.environ.get(name) or 0) == 1
    except ValueError:
        return False


def nvrtc():
    """The NVRTC module (:func:`argus_rt.kinds.cuda.build.nvrtc`, the one loader); :class:`NvrtcNotFoundError`
    where there is none."""
    try:
        return cuda_build.nvrtc()
    except cuda_build.CompilerNotFoundError as exc:
        raise NvrtcNotFoundError(f"CuPy programs compile with NVRTC: {exc}") from None


def nvrtc_version() -> str:
    nvrtc()  # a missing NVRTC as this kind's error
    return cuda_build.nvrtc_version()


def compiler_version() -> str:
    """``"nvrtc <major>.<minor> cupy <version>"`` (the kind's ``compiler`` hook): what builds the cubin
    and what launches it; "unknown" for a part that is not installed."""
    import importlib.metadata

    try:
        nvrtc_part = nvrtc_version()
    except Exception:  # noqa: BLE001 - no loadable NVRTC, for whatever reason: its version is unknown
        nvrtc_part = "nvrtc unknown"
    cupy = next((v for v in (_dist_version(importlib.metadata, d) for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy"))
                 if v), "unknown")
    return f"{nvrtc_part} cupy {cupy}"


def _dist_version(metadata, dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def compile_cubin(source: Path, options: list[str], *, label: str) -> bytes:
    """One NVRTC compilation of ``source`` with exactly ``options``: the cubin, or one-line :class:`CupyCompileError`."""
    nvrtc()
    cubin, log = cuda_build.nvrtc_compile(source, options)
    if cubin is None:
        raise CupyCompileError(f"{label}: NVRTC cannot compile {source.name}: {first_error(log)}")
    return cubin


def first_error(log: str) -> str:
    """NVRTC's first error line (with the count of the rest), or the log's first line."""
    lines = [" ".join(line.split()) for line in log.replace("\x00", "").splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"\berror\b", line)]
    if not errors:
        return lines[0] if lines else "no log"
    return errors[0] + (f" (and {len(errors) - 1} more error(s))" if len(errors) > 1 else "")


def cache_spec(program, launch: CupyLaunch, options: list[str], version: str, variant: str) -> BuildSpec:
    """What decides a variant's cubin: the options, NVRTC's version, the source and every header it may include."""
    headers = {p for d in (csrc_dir() / "argus", launch.root) for p in d.rglob("*") if p.suffix in HEADER_SUFFIXES}
    return BuildSpec(f"cupy/{program.name}_{variant}", files=[launch.source_path, *sorted(headers)],
                     params={"options": options, "nvrtc": version, "source": launch.source})


def build_variant(program, variant: str) -> Path:
    """The cubin of ``variant`` (trace_free/base, marker_only, traced), compiled once per content."""
    launch = CupyLaunch.from_program(program)
    options = nvrtc_options(program, variant)
    name = f"{program.name}.cubin"

    def compile_into(staging: Path) -> None:
        data = compile_cubin(launch.source_path, options, label=f"program {program.name!r} variant {variant}")
        (staging / name).write_bytes(data)

    entry = fetch_or_build(cache_spec(program, launch, options, nvrtc_version(), variant), (name,), compile_into)
    return entry.path(name)


def has_kernel(cubin: Path, kernel: str) -> bool:
    """Whether ``cubin`` defines the unmangled kernel ``kernel`` (its ``.text.<kernel>`` section)."""
    return f"\0.text.{kernel}\0".encode() in cubin.read_bytes()


def check_program(program) -> str:
    """The CPU check before any task runs (``argus plan``, ``argus query``): the launch against the
    kernel's signature and, where NVRTC is available, every variant compiled (cached) and the kernel
    found unmangled in it. Raises one-line :class:`CupyProgramError`; returns what was checked."""
    launch = CupyLaunch.from_program(program)
    try:
        nvrtc()
    except NvrtcNotFoundError as exc:
        return f"launch checked; not compiled here: {exc}"
    for variant in ("trace_free", "marker_only", "traced"):
        cubin = build_variant(program, variant)
        if not has_kernel(cubin, launch.kernel):
            raise CupyProgramError(f"program {program.name!r}: kernel {launch.kernel!r} is not an unmangled symbol of "
                                   f"its {variant} cubin: declare it extern \"C\" (cupy.RawModule.get_function looks "
                                   "kernels up by their symbol name)")
    return "launch checked; trace_free, marker_only and traced compiled"
