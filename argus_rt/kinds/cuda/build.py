"""Build CUDA sources into cubins, with a declared build spec per module and a content-hash cache.

    spec = CudaBuildSpec(name="example", sources=["examples/cuda/nested_regions.cu"], argus_mode=2)
    cubin = build(spec)              # nvcc; cached under $ARGUS_CACHE_DIR or ~/.cache/argus
    cubin = build(spec, backend="nvrtc")   # NVRTC through cuda-python, no nvcc needed

The cache key hashes everything that decides the output: source bytes, every header in the
include directories, generated headers, defines, flags, arch, backend and the compiler's version
string. The entry lives in the shared build cache (:mod:`argus_rt.build_cache`: one lock per key,
published whole by a rename).
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from ...build_cache import BuildSpec, fetch_or_build
from ...resources import csrc_dir
from ...tools import ToolNotFoundError, find_tool

ARGUS_INCLUDE = csrc_dir()  # holds argus/argus.cuh
ARGUS_MODES = {0: "off", 1: "marker-only", 2: "trace"}
BACKENDS = ("nvcc", "nvrtc")
_HEADER_SUFFIXES = {".h", ".cuh", ".hpp", ".inc", ".inl"}


MODULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class CudaBuildError(RuntimeError):
    """Base class of build errors."""


class CompilerNotFoundError(CudaBuildError):
    """nvcc or NVRTC is not available."""


class UnsupportedArchError(CudaBuildError):
    """The requested GPU architecture is not one the compiler can target."""


class CompileError(CudaBuildError):
    """The compiler rejected the sources; the message carries its log."""


@dataclass(frozen=True)
class CudaBuildSpec:
    """Everything that decides one cubin.

    name:         module name (file names in the cache).
    sources:      .cu files (nvcc compiles the first and its includes; one TU per module).
    argus_mode:   0 off, 1 marker-only, 2 trace (defines ARGUS_MODE).
    arch:         "sm_90a", "sm_90", "sm_80", ... (the GPU code; sm_90a needs compute_90a).
    include_dirs: extra include directories; csrc/ (for argus/argus.cuh) is always added.
    defines:      {"NAME": "value"} or {"NAME": None} for a bare -DNAME.
    flags:        extra compiler flags (e.g. "-lineinfo", "-O3").
    generated:    {"file.h": text}: headers made by the caller (a parameter block, region IDs), written
                  into the cache entry and put last on the include path.
    """

    name: str
    sources: tuple[str, ...]
    argus_mode: int = 0
    arch: str = "sm_90a"
    include_dirs: tuple[str, ...] = ()
    defines: tuple[tuple[str, str | None], ...] = ()
    flags: tuple[str, ...] = ("-O3",)
    generated: tuple[tuple[str, str], ...] = ()

    def __init__(self, name, sources, argus_mode=0, arch="sm_90a", include_dirs=(), defines=(), flags=("-O3",),
                 generated=()):
        object.__setattr__(self, "name", str(name))
        object.__setattr__(self, "sources", tuple(str(s) for s in ([sources] if isinstance(sources, (str, Path)) else sources)))
        object.__setattr__(self, "argus_mode", argus_mode)
        object.__setattr__(self, "arch", arch)
        object.__setattr__(self, "include_dirs", tuple(str(d) for d in include_dirs))
        items = defines.items() if isinstance(defines, dict) else defines
        object.__setattr__(self, "defines", tuple(sorted((str(k), None if v is None else str(v)) for k, v in items)))
        object.__setattr__(self, "flags", tuple(flags))
        gen = generated.items() if isinstance(generated, dict) else generated
        object.__setattr__(self, "generated", tuple(sorted((str(k), str(v)) for k, v in gen)))
        self._validate()

    def _validate(self) -> None:
        if not MODULE_NAME.fullmatch(self.name):  # it names cache directories and files: no "..", no "/"
            raise CudaBuildError(f"module name {self.name!r} must use letters, digits, '_', '.', '-', starting "
                                 "with a letter or digit")
        if self.argus_mode not in ARGUS_MODES:
            raise CudaBuildError(f"argus_mode {self.argus_mode!r} invalid; valid: "
                                 + ", ".join(f"{k} ({v})" for k, v in ARGUS_MODES.items()))
        if not self.sources:
            raise CudaBuildError(f"module {self.name!r} has no sources")
        if len(self.sources) != 1:
            raise CudaBuildError(f"module {self.name!r}: one translation unit per module (got {len(self.sources)}); "
                                 "#include the others")
        for src in self.sources:
            if not Path(src).is_file():
                raise CudaBuildError(f"source {src!r} of module {self.name!r} does not exist")
        if not re.fullmatch(r"sm_\d+[af]?", self.arch):
            raise UnsupportedArchError(f"arch {self.arch!r} is not of the form sm_XY (e.g. sm_90a, sm_90, sm_80)")
        for key, _ in self.defines:
            if key == "ARGUS_MODE":
                raise CudaBuildError("set the Argus mode with argus_mode=, not a define")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise CudaBuildError(f"define name {key!r} is not a C identifier")

    def all_include_dirs(self) -> list[Path]:
        return [ARGUS_INCLUDE] + [Path(d) for d in self.include_dirs] + [Path(self.sources[0]).resolve().parent]

    def define_flags(self) -> list[str]:
        out = [f"-DARGUS_MODE={self.argus_mode}"]
        out += [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in self.defines]
        return out

    def to_json(self) -> dict:
        """The spec as JSON, generated headers by name only (their bytes are hashed as files)."""
        out = asdict(self)
        out["generated"] = [name for name, _ in self.generated]
        return out


def find_nvcc() -> str:
    """Path of nvcc, by the one search order of :mod:`argus_rt.tools` ($ARGUS_NVCC first)."""
    try:
        return str(find_tool("nvcc"))
    except ToolNotFoundError as exc:
        raise CompilerNotFoundError(f"{exc}; install the CUDA toolkit 12.4+ or use backend='nvrtc'") from exc


@lru_cache(maxsize=None)
def _nvcc_version_text(nvcc: str) -> str:
    """``nvcc --version``'s output, run once per nvcc per process (builds and program loads both ask)."""
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False, timeout=30).stdout


def nvcc_version(nvcc: str) -> str:
    out = _nvcc_version_text(nvcc)
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def compiler_version() -> str:
    """``"nvcc <release line>"`` of the nvcc Argus finds, "unknown" without one (the kind's ``compiler`` hook)."""
    try:
        nvcc = find_nvcc()
    except CompilerNotFoundError:
        return "unknown"
    out = _nvcc_version_text(nvcc)
    release = [line for line in out.splitlines() if "release" in line]
    return "nvcc " + (release[-1].split("release", 1)[1].strip() if release else out.strip()[-40:])


@lru_cache(maxsize=None)
def nvcc_archs(nvcc: str) -> tuple[str, ...]:
    """GPU codes this nvcc can emit (``nvcc --list-gpu-code``), e.g. ('sm_80', 'sm_90', 'sm_90a', ...)."""
    out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, check=False)
    return tuple(sorted(set(out.stdout.split())))


def _arch_flags(arch: str) -> list[str]:
    virtual = "compute_" + arch[3:]
    return [f"-gencode=arch={virtual},code={arch}"]


def _header_files(dirs: list[Path]) -> list[Path]:
    files = []
    for d in dirs:
        if d.is_dir():
            files += [p for p in d.rglob("*") if p.is_file() and p.suffix in _HEADER_SUFFIXES]
    return sorted(set(files))


def cache_spec(spec: CudaBuildSpec, backend: str, compiler_version: str) -> BuildSpec:
    """The build-cache spec of ``spec``: the spec, backend, compiler version and include directories as
    params; the source, every header it could include and the generated headers as files."""
    params = {"spec": spec.to_json(), "backend": backend, "compiler": compiler_version,
              "include_dirs": [str(d) for d in spec.all_include_dirs()]}
    files = [Path(s) for s in spec.sources] + _header_files(spec.all_include_dirs())
    return BuildSpec(spec.name, files=files, generated=dict(spec.generated), params=params)


def content_key(spec: CudaBuildSpec, backend: str, compiler_version: str) -> str:
    """SHA-256 over everything that decides the cubin (:func:`cache_spec`)."""
    return cache_spec(spec, backend, compiler_version).key()


LOG_FILE = "build.log"  # the compiler's output (nvcc -Xptxas -v resource lines), kept with the cubin


@dataclass
class BuildResult:
    cubin: Path
    key: str
    cached: bool
    log: str = field(default="", repr=False)  # the compiler's output when the cubin was built, cached or not


def build(spec: CudaBuildSpec, backend: str = "nvcc", *, force: bool = False,
          cache_root: str | os.PathLike | None = None) -> BuildResult:
    """Build (or fetch from the cache) the cubin of ``spec``; ``cache_root`` replaces :func:`cache_dir`."""
    if backend not in BACKENDS:
        raise CudaBuildError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if backend == "nvcc":
        nvcc = find_nvcc()
        archs = nvcc_archs(nvcc)
        # --list-gpu-code names base codes only (sm_90); the arch-specific sm_90a / family sm_100f
        # variants exist wherever their base does.
        if archs and spec.arch.rstrip("af") not in archs:
            raise UnsupportedArchError(f"{nvcc} ({nvcc_version(nvcc)}) cannot build {spec.arch!r}; valid: {', '.join(archs)}")
        version = nvcc_version(nvcc)
    else:
        version = nvrtc_version()
    cubin_name = f"{spec.name}.cubin"

    def compile_into(staging: Path) -> None:
        if backend == "nvcc":
            data, log = _build_nvcc(spec, nvcc, staging)
        else:
            data, log = _build_nvrtc(spec, staging)
        (staging / cubin_name).write_bytes(data)  # staging is private until published whole
        (staging / LOG_FILE).write_text(log, encoding="utf-8")

    entry = fetch_or_build(cache_spec(spec, backend, version), (cubin_name, LOG_FILE), compile_into,
                           root=cache_root, force=force)
    return BuildResult(entry.path(cubin_name), entry.key, entry.cached,
                       log=entry.path(LOG_FILE).read_text(encoding="utf-8"))


def nvcc_command(spec: CudaBuildSpec, nvcc: str, output: Path, generated_dir: Path | None = None) -> list[str]:
    """The nvcc command line of ``spec``; ``generated_dir`` holds its generated headers (last on the path)."""
    cmd = [nvcc, "-cubin", *_arch_flags(spec.arch), *spec.define_flags()]
    for d in spec.all_include_dirs() + ([generated_dir] if generated_dir is not None and spec.generated else []):
        cmd += ["-I", str(d)]
    cmd += [*spec.flags, "-o", str(output), spec.sources[0]]
    return cmd


def _build_nvcc(spec: CudaBuildSpec, nvcc: str, staging: Path) -> tuple[bytes, str]:
    tmp = staging / f".{spec.name}.nvcc.cubin"
    cmd = nvcc_command(spec, nvcc, tmp, generated_dir=staging)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise CompileError(f"nvcc failed for module {spec.name!r} (exit {proc.returncode}):\n{' '.join(cmd)}\n{log}")
    data = tmp.read_bytes()
    tmp.unlink()
    return data, log


def nvrtc():
    """cuda-python's NVRTC module, its library loaded (the one NVRTC loader of every kind); a one-line
    :class:`CompilerNotFoundError` otherwise."""
    try:
        from cuda.bindings import nvrtc as module
    except ImportError:
        try:
            from cuda import nvrtc as module  # older cuda-python
        except ImportError as exc:
            raise CompilerNotFoundError(f"NVRTC builds need cuda-python (pip install cuda-python), which is not "
                                        f"installed ({exc})") from None
    try:
        module.nvrtcVersion()
    except Exception as exc:  # the shared library itself is missing
        raise CompilerNotFoundError(f"the NVRTC library cannot be loaded ({' '.join(str(exc).split())[:300]}); "
                                    "install the CUDA toolkit or nvidia-cuda-nvrtc") from None
    return module


def nvrtc_version() -> str:
    """``"nvrtc <major>.<minor>"`` of the NVRTC library :func:`nvrtc` loads."""
    _, major, minor = nvrtc().nvrtcVersion()
    return f"nvrtc {major}.{minor}"


def nvrtc_compile(source: Path, options: list[str]) -> tuple[bytes | None, str]:
    """One NVRTC compilation of ``source`` (the program named after the file) with exactly ``options``:
    (the cubin, NVRTC's log); the cubin is None where NVRTC rejected the source (the log says why)."""
    api = nvrtc()
    prog = _nvrtc_checked(api.nvrtcCreateProgram(source.read_bytes(), source.name.encode(), 0, [], []), "create")
    try:
        encoded = [o.encode() for o in options]
        (status,) = api.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _nvrtc_output(api.nvrtcGetProgramLog, prog, _nvrtc_checked(api.nvrtcGetProgramLogSize(prog), "log size"))
        text = log.decode(errors="replace").rstrip("\x00 ")
        if int(status) != 0:
            return None, text
        return _nvrtc_output(api.nvrtcGetCUBIN, prog, _nvrtc_checked(api.nvrtcGetCUBINSize(prog), "cubin size")), text
    finally:
        api.nvrtcDestroyProgram(prog)


def _nvrtc_output(get, prog, size: int) -> bytes:
    """What NVRTC's ``get(prog, char*)`` writes into ``size`` bytes. NVRTC writes into the bytes object it is
    handed, so that object must be this call's alone: ``b" " * 1`` (an empty log's size: its NUL) is CPython's
    one shared ``b" "``, and writing into it turned every ``b" "`` of the process into ``b"\x00"`` (numpy's
    .npy header padding among them: the cause of the H200's null-byte headers of 2026-12-02, reproduced on
    the CPU with a stand-in NVRTC; with this fix (8000724) the cupy example passed 3 of 3 times on the H200
    with a fresh build cache, where it had failed 3 of 3). ``bytes(n)`` with n >= 2 is
    always a new object; the extra byte is never written."""
    buf = bytes(size + 1)
    get(prog, buf)
    return buf[:size]


def _nvrtc_checked(result, what: str):
    """The values of a cuda-python ``(status, *values)`` tuple; a failed call raises."""
    status, *values = result
    if int(status) != 0:
        raise CompileError(f"NVRTC {what} failed: {status!r}")
    return values[0] if len(values) == 1 else values


def _build_nvrtc(spec: CudaBuildSpec, staging: Path) -> tuple[bytes, str]:
    dirs = spec.all_include_dirs() + ([staging] if spec.generated else [])
    opts = [f"--gpu-architecture={spec.arch}", "-std=c++17", "-default-device", *spec.define_flags(),
            *(f"-I{d}" for d in dirs), *(f for f in spec.flags if f != "-O3")]
    cubin, log = nvrtc_compile(Path(spec.sources[0]), opts)
    if cubin is None:
        if "invalid value for --gpu-architecture" in log or "arch" in log and "not supported" in log:
            raise UnsupportedArchError(f"NVRTC cannot build {spec.arch!r}:\n{log}")
        raise CompileError(f"NVRTC failed for module {spec.name!r}:\n{log}")
    return cubin, log


def build_all_modes(name: str, source: str, **kw) -> dict[int, BuildResult]:
    """Build one source in all three Argus modes: {0: off, 1: marker-only, 2: trace}."""
    return {m: build(CudaBuildSpec(f"{name}.mode{m}", [source], argus_mode=m, **kw)) for m in ARGUS_MODES}


# ---- reading back what was built ------------------------------------------------------------
_SASS_LINE = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*/\*\s*0x[0-9a-f]+\s*\*/\s*$")


def disassemble(cubin: str | os.PathLike, function: str | None = None) -> str:
    """SASS text of a cubin (``cuobjdump -sass``), optionally of one function: :func:`argus_rt.sass.disassemble`
    with its failure reported as a build error, as this module's callers expect."""
    from ...sass import SassParseError
    from ...sass import disassemble as sass_disassemble

    try:
        return sass_disassemble(cubin, function=function)
    except SassParseError as exc:
        raise CudaBuildError(str(exc)) from exc


def sass_instructions(text: str) -> list[tuple[str, str]]:
    """(opcode, operands) of each SASS instruction in address order; guard predicates dropped."""
    out = []
    for line in text.splitlines():
        m = _SASS_LINE.match(line)
        if not m:
            continue
        ins = m.group(1).strip().rstrip(";").strip()
        if ins.startswith("@"):
            ins = ins.split(None, 1)[1]
        op, _, ops = ins.partition(" ")
        out.append((op, ops.strip()))
    return out


def sass_lines(text: str) -> list[str]:
    """The instruction lines (address, text, encoding): equal lists mean identical machine code."""
    return [line.strip() for line in text.splitlines() if _SASS_LINE.match(line)]
