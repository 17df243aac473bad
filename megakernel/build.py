"""Compile the megakernel to a cubin with nvcc, cached by content hash.

Generated headers (kernel parameter block, region IDs) are written next to the cubin in the build
directory; the cache key covers every source byte, the generated headers, the flags and the nvcc
version, so a stale cubin is never reused.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from argus_rt.fsutil import atomic_write_text
from argus_rt.kinds.cuda.build import CompilerNotFoundError, cache_dir
from argus_rt.kinds.cuda.build import find_nvcc as argus_find_nvcc
from argus_rt.resources import csrc_dir

from .params import params_header
from .regions import region_tree

CSRC = csrc_dir()
SOURCE = CSRC / "megakernel" / "megakernel.cu"
ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
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


def _sources() -> list[Path]:
    return sorted((CSRC / "megakernel").glob("*.cu*")) + sorted((CSRC / "argus").glob("*.h*")) + \
        sorted((CSRC / "argus").glob("*.cuh"))


def build(argus_mode: int = 0, build_dir: str | os.PathLike | None = None, extra_flags: tuple[str, ...] = (),
          force: bool = False) -> BuildResult:
    """Compile (or reuse) the megakernel cubin for ``argus_mode`` (0 off, 1 marker-only, 2 trace)."""
    if argus_mode not in ARGUS_MODES:
        raise ValueError(f"argus_mode must be one of {sorted(ARGUS_MODES)} ({ARGUS_MODES}), got {argus_mode!r}")
    nvcc = find_nvcc()
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    generated = {"megakernel_params.h": params_header(), "megakernel_regions.h": region_tree().cuda_defines()}
    flags = ["-cubin", *ARCH_FLAGS, "-O3", "-std=c++17", "-Xptxas", "-v", f"-DARGUS_MODE={argus_mode}", *extra_flags]
    h = hashlib.sha256()
    for path in _sources():
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    for name, text in sorted(generated.items()):
        h.update(name.encode() + b"\0" + text.encode())
    h.update("\0".join(flags).encode() + version.encode())
    # Argus's build cache ($ARGUS_CACHE_DIR): never inside the installed package.
    out_dir = Path(build_dir or cache_dir() / "megakernel") / h.hexdigest()[:16]
    cubin, log_path = out_dir / "megakernel.cubin", out_dir / "ptxas.log"
    if cubin.exists() and log_path.exists() and not force:
        return BuildResult(cubin, log_path.read_text(encoding="utf-8"), argus_mode, True)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in generated.items():
        atomic_write_text(out_dir / name, text)
    region_tree().save(out_dir / "regions.json")
    tmp = out_dir / f".megakernel.{os.getpid()}.cubin.tmp"
    cmd = [nvcc, *flags, f"-I{CSRC}", f"-I{CSRC / 'megakernel'}", f"-I{out_dir}", "-o", str(tmp), str(SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    log = proc.stdout + proc.stderr
    atomic_write_text(log_path, log)
    os.replace(tmp, cubin)  # atomic: a concurrent reader never sees half a cubin
    return BuildResult(cubin, log, argus_mode, False)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Build the megakernel cubin and print ptxas resource usage")
    ap.add_argument("--argus-mode", type=int, default=0, choices=sorted(ARGUS_MODES))
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()
    r = build(a.argus_mode, force=a.force)
    print(r.ptxas_log)
    print(f"cubin: {r.cubin} (cached={r.cached}) registers={r.registers()} spill bytes={r.spill_bytes()}")
