"""The numba kind's variant builds: numba's PTX to the sm_90 cubin that runs, content-hash cached.

* ``trace_free`` / ``base``: the PTX of markers mode 0 (no markers) through the CUDA kind's build
  (:func:`argus_rt.kinds.cuda.build.build`, nvcc on the ``.ptx``: ptxas; cached like every CUDA build);
* ``marker_only``: mode 1 (three ``PMTRIG`` per marker), the same way;
* ``traced``: mode 2 (each marker calls ``argus_numba_emit``) compiled relocatable (``-rdc=true``),
  :data:`TRACE_SOURCE` (``argus_detail::emit`` of ``csrc/argus/argus.cuh``, ``ARGUS_MODE=2``) likewise,
  and the two linked by ``nvcc -dlink -cubin`` into one cubin that holds the kernel, the device
  function and the ``argus_ctl`` / ``argus_scratch`` globals a :class:`argus_rt.trace.TraceSession` arms.

The cubin a collection runs is the cubin built here, so PCs of the PC-to-region map, Nsight Compute's
counters and the trace all refer to it. No GPU is needed to build.
"""
from __future__ import annotations

import hashlib
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...fsutil import atomic_write_text
from ...regions import RegionTree
from .compile import CompiledPtx, compile_ptx
from .launch import VARIANT_MODES, NumbaLaunch, NumbaProgramError

# The trace build's marker: the device function mode-2 markers call (argus_rt/kinds/numba/markers.py).
TRACE_SOURCE = """\
/* Argus trace markers for numba kernels (argus_rt/kinds/numba/build.py): a numba marker in the trace
 * build calls this function; it is argus_detail::emit of argus.cuh, the CUDA kind's ring protocol. */
#include "argus/argus.cuh"
extern "C" __device__ void argus_numba_emit(unsigned kind, unsigned id, unsigned coord) {
  argus_detail::emit(kind, id, coord);
}
"""


@dataclass(frozen=True)
class NumbaBuild:
    """One built variant: the cubin, the kernel's symbol in it, and its compile's facts."""

    cubin: Path
    symbol: str
    compiled: CompiledPtx

    @property
    def params(self) -> tuple[str, ...]:
        return self.compiled.params


def build_variant(program, variant: str) -> NumbaBuild:
    """Compile ``variant`` of a numba program (see the module docstring); cached by content."""
    from ..cuda.build import CudaBuildSpec, build

    if variant not in VARIANT_MODES:
        raise NumbaProgramError(f"cannot build variant {variant!r} of a numba program; valid: {', '.join(VARIANT_MODES)}")
    launch = NumbaLaunch.from_program(program)
    mode = VARIANT_MODES[variant]
    compiled = compile_ptx(program, mode)
    check_regions(program, compiled)
    flags = tuple(dict.fromkeys(tuple(program.flags or ("-O3",)) + ("-lineinfo",) + (("-rdc=true",) if mode == 2 else ())))
    kernel = build(CudaBuildSpec(name=f"{program.name}.numba{mode}", sources=[str(compiled.ptx)], argus_mode=mode,
                                 arch=launch.arch, flags=flags)).cubin
    if mode == 2:
        kernel = _link(program.name, [kernel, _trace_device_code(launch.arch)], launch.arch)
    return NumbaBuild(Path(kernel), compiled.entry, compiled)


def marker_regions(program) -> RegionTree:
    """The region tree the kernel's markers name (from its compile; what ``regions.json`` should hold):
    ``marker_regions(load_program(dir)).save(dir / "regions.json")``."""
    tree = RegionTree(program.name)
    for name in sorted(compile_ptx(program, 0).regions, key=lambda n: n.count("/")):
        tree.add(name)
    return tree


def variant_cubin(program, variant: str) -> Path:
    """The cubin of ``variant`` (what :func:`argus_rt.kinds.run_variant.variant_cubin` is for the other kinds)."""
    return build_variant(program, variant).cubin


def mapping_provenance(program) -> dict:
    """What the mapping run adds to its provenance: numba's own (mangled) entry name."""
    return {"numba_entry": build_variant(program, "marker_only").compiled.numba_entry}


def _trace_device_code(arch: str) -> Path:
    """The relocatable cubin of :data:`TRACE_SOURCE` (ARGUS_MODE=2) for ``arch``."""
    from ...build_cache import cache_dir
    from ..cuda.build import CudaBuildSpec, build

    # Content-named, so a source of another Argus never takes this one's place; written whole.
    source = cache_dir() / "numba" / f"argus_numba_trace.{hashlib.sha256(TRACE_SOURCE.encode()).hexdigest()[:12]}.cu"
    if not source.is_file():
        atomic_write_text(source, TRACE_SOURCE)
    return build(CudaBuildSpec(name="argus_numba_trace", sources=[str(source)], argus_mode=2, arch=arch,
                               flags=("-O3", "-rdc=true"))).cubin


def _link(name: str, parts: list[Path], arch: str) -> Path:
    """``nvcc -dlink -cubin`` of relocatable cubins into one, cached by their bytes and nvcc's version."""
    from ...build_cache import BuildSpec, fetch_or_build
    from ..cuda.build import find_nvcc, nvcc_version

    nvcc = find_nvcc()
    cubin = f"{name}.cubin"

    def link_into(staging: Path) -> None:
        cmd = [nvcc, "-dlink", "-cubin", f"-arch={arch}", "-o", str(staging / cubin), *map(str, parts)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise NumbaProgramError(f"nvcc -dlink failed for {name} (exit {proc.returncode}): {' '.join(cmd)}: "
                                    + " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:]))

    spec = BuildSpec(f"numba/{name}.linked", files=parts, params={"arch": arch, "nvcc": nvcc_version(nvcc)})
    return fetch_or_build(spec, (cubin,), link_into).path(cubin)


_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(?P<type>[busf])(?P<bits>8|16|32|64)\s+[\w$]+(?:\[(?P<n>\d+)\])?")


def entry_parameter_sizes(ptx: str, entry: str) -> list[int]:
    """Byte size of each ``.param`` of the PTX kernel ``entry``, in order."""
    m = re.search(rf"\.entry\s+{re.escape(entry)}\s*\((.*?)\)", ptx, re.S)
    if m is None:
        raise NumbaProgramError(f"no kernel entry {entry!r} in the PTX")
    return [int(p["bits"]) // 8 * int(p["n"] or 1) for p in _PARAM.finditer(m.group(1))]


def check_abi(program, compiled: CompiledPtx) -> None:
    """Raise unless the words :func:`argus_rt.kinds.numba.launch.kernel_arguments` passes have the sizes
    of the PTX entry's parameters (numba's kernel ABI is what Argus packs by hand)."""
    from .launch import argument_sizes

    want = entry_parameter_sizes(compiled.ptx.read_text(encoding="utf-8"), compiled.entry)
    got = argument_sizes(NumbaLaunch.from_program(program), list(compiled.params))
    if want != got:
        raise NumbaProgramError(f"{compiled.entry}: numba's kernel takes parameter words of {want} bytes, Argus would "
                                f"pass {got}: this numba's kernel ABI is not the one Argus packs")


def check_regions(program, compiled: CompiledPtx) -> None:
    """Raise unless every region the kernel's markers name is in the program's region manifest."""
    unknown = sorted(set(compiled.regions) - set(program.regions.names))
    if unknown:
        raise NumbaProgramError(f"program {program.label()}: markers name regions that regions.json lacks: {unknown} "
                                f"(it has {', '.join(program.regions.names) or 'none'}); marker_regions(program) in "
                                "argus_rt.kinds.numba.build is the tree the kernel's markers name")


def check_program(program) -> CompiledPtx | None:
    """What ``argus plan`` (and ``argus query``, before any task) checks of a numba program, on the CPU:
    its launch; where numba is installed also its module, kernel, arguments and signature, by compiling
    the marker-only PTX (cached), the regions its markers name and numba's kernel ABI. Every failure is a
    one-line :class:`~argus_rt.kinds.numba.launch.NumbaProgramError`; None: numba is not installed here."""
    import importlib.util

    NumbaLaunch.from_program(program)
    if importlib.util.find_spec("numba") is None:
        return None
    compiled = compile_ptx(program, VARIANT_MODES["marker_only"])
    check_regions(program, compiled)
    check_abi(program, compiled)
    return compiled
