"""What a cubin's ELF says without disassembling it: its SASS architecture and its functions (any kind's
cubin: nvcc's, NVRTC's, Triton's or numba's).

``cuobjdump -elf`` prints the ELF header, section table and ``.nv.info`` attributes in milliseconds;
``cuobjdump -sass`` and ``nvdisasm`` start a disassembler that takes about a second before it prints
anything. So a kernel's symbol, the binary's architecture and its indirect-branch targets
(:func:`argus_rt.sass.parse_indirect_branch_targets`) come from one ``-elf`` listing, and the SASS
from one ``nvdisasm -g`` run (the mapping run's :func:`argus_rt.backends.pcmap.read_cubin`).
"""
from __future__ import annotations

import os
import re
import subprocess

from .sass import SassParseError
from .tools import find_tool

# "64-bit ELF: type=ET_EXEC, ABI=8, sm=90, toolkit=13.0, ..." (CUDA 13) or "64bit elf: type=2, abi=7, sm=90a, ..."
_HEADER_ARCH = re.compile(r"^\s*64-?bit elf:.*?\bsm=(\d+[af]?)\b", re.IGNORECASE | re.MULTILINE)
# a section-table row: Index Offset Size ES Align Type Flags Link Info Name
_CODE_SECTION = re.compile(r"^\s*[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+PROGBITS\s+\S+\s+\S+\s+\S+"
                           r"\s+\.text\.(\S+)\s*$", re.MULTILINE)


def cubin_elf(binary: str | os.PathLike, *, timeout_s: float = 120.0) -> str:
    """The ``cuobjdump -elf`` listing of a cubin."""
    cmd = [str(find_tool("cuobjdump")), "-elf", str(binary)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise SassParseError(f"{' '.join(cmd)} failed (rc {proc.returncode}): {proc.stderr.strip()[:500]}")
    return proc.stdout


def elf_arch(text: str) -> str | None:
    """``"sm_90a"`` from the listing's ELF header line (None when it names none)."""
    m = _HEADER_ARCH.search(text)
    return f"sm_{m.group(1)}" if m else None


def elf_functions(text: str) -> list[str]:
    """The functions with code (``.text.<name>`` sections), in section order: the names a SASS
    listing gives its functions."""
    return list(dict.fromkeys(_CODE_SECTION.findall(text)))
