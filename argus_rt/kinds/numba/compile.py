"""Compile a numba program's kernel to PTX for one marker mode, on the CPU, as numba itself would.

:func:`compile_ptx` runs ``python -m argus_rt.kinds.numba.compile`` in a process of its own, once per
(program version, mode), and caches its output under the Argus build cache by content. A process of
its own because numba keeps what it compiled: a device function compiled in one marker mode would be
reused, markers and all, by the next mode's kernel (and a GPU, when there is one, stays untouched).

The child imports the program's module, finds the ``numba.cuda.jit`` kernel ``launch.kernel``, checks
``launch.args`` against its parameters (and ``launch.signature``, when given, against ``args``), and
calls ``numba.cuda.compile_ptx(kernel.py_func, signature, cc=...)`` with the markers in the mode's form
(:mod:`argus_rt.kinds.numba.markers`). numba compiles device functions a kernel calls for the current
device; the child has them compiled for the launch's compute capability instead, so no GPU is needed.
The kernel's entry keeps numba's code, renamed from numba's mangled name to the Python name
(``row_reduce``), the name SASS, Nsight Compute and the region map then all agree on. Every failure is
one line (:class:`~argus_rt.kinds.numba.launch.NumbaProgramError`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .launch import MODE_ENV, NumbaLaunch, NumbaProgramError
from .versions import explain_missing_numpy_name, incompatibility, installed

ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.entry\s+([A-Za-z_$][\w$]*)\s*\(", re.M)
_HERE = Path(__file__).resolve().parent
# Sources whose bytes decide the PTX besides the program itself: part of the cache key.
_OWN_SOURCES = ("markers.py", "compile.py", "launch.py", "versions.py")


@dataclass(frozen=True)
class CompiledPtx:
    """The PTX of one mode and what the compile learned about the kernel."""

    ptx: Path
    entry: str  # the kernel's symbol in the PTX (and in its cubin): the Python name
    params: tuple[str, ...]  # the kernel's parameters, in order
    signature: str  # the numba signature it was compiled for
    regions: tuple[str, ...]  # region names of the markers numba typed (every mode)
    numba_entry: str  # numba's own mangled name of the kernel


def cache_spec(program, mode: int):
    """What decides the PTX of ``mode``: the program version, numba's and numpy's versions, Python's,
    and this kind's own sources (:mod:`argus_rt.build_cache`)."""
    import numpy

    from ...build_cache import BuildSpec

    return BuildSpec(f"numba/{program.name}.mode{mode}", files=[_HERE / name for name in _OWN_SOURCES],
                     params={"program": program.base_id, "mode": mode, "versions": installed(),
                             "numpy": numpy.__version__, "python": list(sys.version_info[:2])})


def compile_ptx(program, mode: int, *, timeout_s: float = 600.0) -> CompiledPtx:
    """The kernel's PTX in marker ``mode`` (0 trace-free, 1 marker-only, 2 trace), compiled unless cached."""
    from ...build_cache import fetch_or_build
    from ...gpu_env import child_env

    NumbaLaunch.from_program(program)  # launch errors before a process is started
    problem = incompatibility()  # a known-broken numba / numpy pair: its one line, not numba's deep error
    if problem:
        raise NumbaProgramError(f"program {program.label()}: {problem}")

    def compile_into(staging: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="argus-numba-") as tmp:
            spec = Path(tmp) / "program.json"
            spec.write_text(json.dumps(program.to_dict()), encoding="utf-8")
            env = child_env({MODE_ENV: str(mode), "NUMBA_CACHE_DIR": str(Path(tmp) / "numba-cache")})
            cmd = [sys.executable, "-m", "argus_rt.kinds.numba.compile", "--program", str(spec), "--out", tmp]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise NumbaProgramError(f"numba compile of {program.label()} ran past {timeout_s:.0f} s") from None
            result = Path(tmp) / "meta.json"
            if proc.returncode != 0 or not result.is_file():
                lines = [l for l in (proc.stdout + proc.stderr).splitlines() if l.strip()]
                why = next((l[len("argus-numba-error: "):] for l in lines if l.startswith("argus-numba-error: ")),
                           " | ".join(lines[-3:]) or f"exit {proc.returncode}")
                raise NumbaProgramError(f"program {program.label()}: {why}")
            for name in ("kernel.ptx", "meta.json"):
                (staging / name).write_bytes((Path(tmp) / name).read_bytes())

    out = fetch_or_build(cache_spec(program, mode), ("kernel.ptx", "meta.json"), compile_into).dir
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    return CompiledPtx(out / "kernel.ptx", meta["entry"], tuple(meta["params"]), meta["signature"],
                       tuple(meta["regions"]), meta["numba_entry"])


# ---- the child process ------------------------------------------------------------------------

def _one_line(exc: BaseException) -> str:
    """The head of an error (numba's typing errors go on to list every candidate) and, when numba knows
    it, where in the module: "No implementation of ...; >>> add(float32, ...) (row_reduce.py line 24)"."""
    lines = []
    for line in (l.strip() for l in str(exc).splitlines()):
        if line.startswith(("There are", "- Of which", "During:", "File ", "^")) or len(lines) == 3:
            break
        if line:
            lines.append(line)
    loc = getattr(exc, "loc", None)
    where = f" ({Path(loc.filename).name} line {loc.line})" if getattr(loc, "line", None) else ""
    text = "; ".join(lines) or type(exc).__name__
    return (text if len(text) <= 400 else text[:397] + "...") + where


def _compile_devices_for(cc: tuple[int, int]) -> None:
    """numba compiles the device functions a kernel calls for ``get_current_device()``; answer with ``cc``
    (no GPU is asked, and device code matches the kernel's target)."""
    from types import SimpleNamespace

    from numba.cuda import dispatcher

    if hasattr(dispatcher, "get_current_device"):
        dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)


def _import_module(launch: NumbaLaunch):
    import importlib.util

    from ...program import program_file

    root, path = program_file(launch.root, launch.module)
    if not path.is_relative_to(root) or not path.is_file():
        raise NumbaProgramError(f"launch.module {launch.module!r} is not a file inside {root}")
    sys.path.insert(0, str(root))  # the module may import its neighbours (this process does nothing else)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:
        raise NumbaProgramError(f"cannot import {launch.module}: {type(exc).__name__}: {_one_line(exc)} (the "
                                "module must import without a GPU: decorate with @cuda.jit, no eager signature)") from None
    return mod


def find_kernel(mod, launch: NumbaLaunch):
    """The ``numba.cuda.jit`` kernel ``launch.kernel`` of ``mod``; a one-line error naming the kernels there."""
    from numba.cuda.dispatcher import CUDADispatcher

    def is_kernel(obj) -> bool:
        return isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device", False)

    kernels = sorted(n for n, obj in vars(mod).items() if is_kernel(obj))
    obj = getattr(mod, launch.kernel, None)
    if not is_kernel(obj):
        what = ("is a device function (device=True), not a kernel" if isinstance(obj, CUDADispatcher) else
                "is not a numba.cuda.jit kernel" if obj is not None else "is not defined")
        raise NumbaProgramError(f"launch.kernel {launch.kernel!r} {what} in {launch.module}; numba.cuda.jit kernels "
                                f"there: {', '.join(kernels) or 'none'}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", launch.kernel):
        raise NumbaProgramError(f"launch.kernel {launch.kernel!r}: Argus names the kernel's entry after it, so it "
                                "must be an ASCII identifier")
    return obj


def kernel_signature(launch: NumbaLaunch, params: list[str]):
    """The numba signature of the launch, checked against ``launch.signature`` when given."""
    from numba.core import sigutils

    text = launch.signature_text(params)
    ours, _ = sigutils.normalize_signature(text)
    if launch.signature is not None:
        try:
            theirs, ret = sigutils.normalize_signature(str(launch.signature))
        except Exception as exc:
            raise NumbaProgramError(f"launch.signature {launch.signature!r} does not parse: {type(exc).__name__}: "
                                    f"{_one_line(exc)}") from None
        if len(theirs) != len(params):
            raise NumbaProgramError(f"launch.signature {launch.signature!r} has {len(theirs)} parameter(s); "
                                    f"{launch.kernel} takes {len(params)}: {', '.join(params)}")
        differ = [f"{p} is {t} in the signature, {o} in args" for p, t, o in zip(params, theirs, ours) if t != o]
        if differ or (ret is not None and str(ret) not in ("none", "void")):
            raise NumbaProgramError(f"launch.signature {launch.signature!r} disagrees with launch.args: "
                                    + ("; ".join(differ) or f"returns {ret}, a kernel returns void"))
    return text


def _rename_entry(ptx: str, old: str, new: str) -> str:
    code = re.sub(r'"[^"\n]*"|//[^\n]*', "", ptx)  # identifiers only: not file names, not comments
    if re.search(rf"(?<![\w$.]){re.escape(new)}(?![\w$])", code):
        raise NumbaProgramError(f"the PTX of {new} already has a symbol named {new!r}; cannot name the entry after the kernel")
    return re.sub(rf"(?<![\w$]){re.escape(old)}(?=_param_\d|[^\w$]|$)", new, ptx)


def compile_child(program, out: Path) -> dict:
    """In the child: compile the kernel in the mode of ``$ARGUS_NUMBA_MARKERS``; write kernel.ptx and meta.json."""
    import inspect

    launch = NumbaLaunch.from_program(program)
    _compile_devices_for(launch.cc)
    mod = _import_module(launch)
    kernel = find_kernel(mod, launch)
    sig = inspect.signature(kernel.py_func)
    odd = [p.name for p in sig.parameters.values() if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if odd:
        raise NumbaProgramError(f"{launch.kernel} has parameters {odd} that a kernel launch cannot pass")
    params = list(sig.parameters)
    launch.check_parameters(params)
    text = kernel_signature(launch, params)
    from numba import cuda

    from . import markers

    try:
        ptx, _ = cuda.compile_ptx(kernel.py_func, text, cc=launch.cc, lineinfo=True, fastmath=launch.fastmath)
    except Exception as exc:
        why = explain_missing_numpy_name(exc) or f"{type(exc).__name__}: {_one_line(exc)}"
        raise NumbaProgramError(f"numba cannot compile {launch.kernel}{text[4:]}: {why}") from None
    entries = ENTRY.findall(ptx)
    if len(entries) != 1:
        raise NumbaProgramError(f"numba's PTX of {launch.kernel} has {len(entries)} kernel entries, expected one")
    regions = sorted({name for _, name in markers.SEEN})
    (out / "kernel.ptx").write_text(_rename_entry(ptx, entries[0], launch.kernel), encoding="utf-8")
    meta = {"entry": launch.kernel, "numba_entry": entries[0], "params": params, "signature": text,
            "regions": regions, "mode": markers.mode(), "versions": installed()}
    (out / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return meta


def main(argv: list[str] | None = None) -> int:
    from ...program import ProgramVersion

    parser = argparse.ArgumentParser(prog="python -m argus_rt.kinds.numba.compile")
    parser.add_argument("--program", required=True, help="ProgramVersion JSON (ProgramVersion.to_dict())")
    parser.add_argument("--out", required=True, help="directory for kernel.ptx and meta.json")
    args = parser.parse_args(argv)
    try:
        program = ProgramVersion.from_dict(json.loads(Path(args.program).read_text(encoding="utf-8")))
        compile_child(program, Path(args.out))
    except NumbaProgramError as exc:
        print(f"argus-numba-error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.environ.setdefault(MODE_ENV, "0")
    sys.exit(main())
