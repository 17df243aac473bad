"""Compile the megakernel to a cubin with nvcc: one :class:`argus_rt.kinds.cuda.build.CudaBuildSpec`,
cached like every CUDA module (:mod:`argus_rt.build_cache`).

The generated headers (kernel parameter block, region IDs) are part of the spec: they are written
into the cache entry beside the cubin, with ``regions.json`` and the ptxas log, and hashed with every
source byte, the flags and the nvcc version, so a stale cubin is never reused.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from argus_rt.kinds.cuda.build import CompileError, CompilerNotFoundError, CudaBuildSpec
from argus_rt.kinds.cuda.build import build as cuda_build
from argus_rt.kinds.cuda.build import find_nvcc as argus_find_nvcc
from argus_rt.resources import csrc_dir

from .params import params_header
from .regions import region_tree

CSRC = csrc_dir()
SOURCE = CSRC / "megakernel" / "megakernel.cu"
ARCH = "sm_90a"
ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)  # what CudaBuildSpec(arch=ARCH) passes
FLAGS = ("-O3", "-std=c++17", "-Xptxas", "-v")  # -Xptxas -v: the resource lines BuildResult reads
ARGUS_MODES = {0: "off (trace-free)", 1: "marker-only", 2: "trace"}
KERNEL_NAME = "argus_megakernel"


class BuildError(RuntimeError):
    """nvcc is missing or failed; the message carries its output."""


@dataclass(frozen=True)
class BuildResult:
    cubin: Path
    ptxas_log: str  # nvcc -Xptxas -v output: registers, shared memory, spills
    argus_mode: int
    cached: bool

    def registers(self) -> int | None:
        for line in self.ptxas_log.splitlines():
            if "Used" in line and "registers" in line:
                return int(line.split("Used", 1)[1].split("registers", 1)[0].strip())
        return None

    def spill_bytes(self) -> int:
        total = 0
        for line in self.ptxas_log.splitlines():
            if "spill stores" in line:
                total += int(line.split("bytes spill stores")[0].split(",")[-1].strip())
        return total


def find_nvcc() -> str:
    """argus_rt's nvcc (one search order for every build, see argus_rt.tools), as a megakernel BuildError."""
    try:
        return argus_find_nvcc()
    except CompilerNotFoundError as exc:
        raise BuildError(f"{exc} (the megakernel needs nvcc >= 12.3 for sm_90a)") from exc


def build_spec(argus_mode: int = 0, extra_flags: tuple[str, ...] = ()) -> CudaBuildSpec:
    """The declared build of the megakernel in ``argus_mode``: megakernel.cu (csrc/ and csrc/megakernel
    on the include path, their headers hashed), the generated parameter and region headers, the flags."""
    generated = {"megakernel_params.h": params_header(), "megakernel_regions.h": region_tree().cuda_defines(),
                 "regions.json": json.dumps(region_tree().to_manifest(), indent=2, sort_keys=True)}
    return CudaBuildSpec("megakernel", [SOURCE], argus_mode=argus_mode, arch=ARCH,
                         flags=(*FLAGS, *extra_flags), generated=generated)


def build(argus_mode: int = 0, build_dir: str | os.PathLike | None = None, extra_flags: tuple[str, ...] = (),
          force: bool = False) -> BuildResult:
    """Compile (or reuse) the megakernel cubin for ``argus_mode`` (0 off, 1 marker-only, 2 trace).

    ``build_dir``: the cache root instead of Argus's build cache ($ARGUS_CACHE_DIR; never inside the
    installed package); the entry is ``<root>/megakernel/<key>/``."""
    if argus_mode not in ARGUS_MODES:
        raise ValueError(f"argus_mode must be one of {sorted(ARGUS_MODES)} ({ARGUS_MODES}), got {argus_mode!r}")
    find_nvcc()  # a missing nvcc as this module's BuildError
    try:
        result = cuda_build(build_spec(argus_mode, tuple(extra_flags)), force=force, cache_root=build_dir)
    except CompileError as exc:
        raise BuildError(str(exc)) from exc
    return BuildResult(result.cubin, result.log, argus_mode, result.cached)


def bench_source(name: str) -> Path:
    """csrc/megakernel/bench/<name>.cu: a microbenchmark of the megakernel's building blocks."""
    return CSRC / "megakernel" / "bench" / f"{name}.cu"


def build_bench(name: str) -> Path:
    """The cubin of bench_source(name), compiled against the megakernel's headers for its arch through Argus's build
    cache (benchmarks/weight_stream.py, benchmarks/layer_stream.py); BuildError if nvcc fails."""
    spec = CudaBuildSpec(name, [bench_source(name)], arch=ARCH, include_dirs=[CSRC / "megakernel"],
                         flags=("-O3", "-std=c++17"))
    try:
        return cuda_build(spec).cubin
    except CompileError as exc:
        raise BuildError(str(exc)) from exc


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Build the megakernel cubin and print ptxas resource usage")
    ap.add_argument("--argus-mode", type=int, default=0, choices=sorted(ARGUS_MODES))
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()
    r = build(a.argus_mode, force=a.force)
    print(r.ptxas_log)
    print(f"cubin: {r.cubin} (cached={r.cached}) registers={r.registers()} spill bytes={r.spill_bytes()}")
