"""Compile a C layout header with a real compiler and read back what it says: every struct's size,
each field's offset, size and signedness, and the value of named constants.

Used by the layout agreement tests (tests/test_trace_layout.py, tests/test_triton_layouts.py): the
header is the definition, and each test compares these numbers with its Python mirror's dtypes.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from argus_rt import tools

ROOT = Path(__file__).resolve().parents[1]
HEADER_DIR = ROOT / "csrc" / "argus"


def probe_source(headers: list[str], structs: dict[str, np.dtype], constants: list[str]) -> str:
    """A host C++ program that prints one line per number: ``size S n``, ``offset S.f n``,
    ``fsize S.f n``, ``signed S.f 0|1`` and ``const NAME n``."""
    lines = ["#include <cstdio>", *(f'#include "{h}"' for h in headers), "int main() {"]
    for struct, dtype in structs.items():
        lines.append(f'  std::printf("size {struct} %zu\\n", sizeof({struct}));')
        for field in dtype.names:
            member = f"(({struct}*)0)->{field}"
            lines.append(f'  std::printf("offset {struct}.{field} %zu\\n", ARGUS_OFFSETOF({struct}, {field}));')
            lines.append(f'  std::printf("fsize {struct}.{field} %zu\\n", sizeof({member}));')
            # arrays (ArgusCtl.sm_mask) are judged by their element type
            lines.append(f'  std::printf("signed {struct}.{field} %d\\n", '
                         f'(int)(((std::remove_all_extents<decltype({member})>::type)(-1)) < 0));')
    for name in constants:
        lines.append(f'  std::printf("const {name} %llu\\n", (unsigned long long)({name}));')
    lines.append("  return 0;\n}")
    return "\n".join(["#include <type_traits>", *lines])


def compilers() -> list[str]:
    """Host compilers to check a header with: g++/c++/clang++ (the first found) and nvcc, where present."""
    found = []
    host = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if host:
        found.append(host)
    nvcc = tools.tool_or_none("nvcc")  # where Argus looks
    if nvcc:
        found.append(str(nvcc))
    return found


def compiled_layout(tmp: Path, compiler: str, headers: list[str], structs: dict[str, np.dtype],
                    constants: list[str]) -> dict[str, int]:
    """Build and run :func:`probe_source` with ``compiler`` (``-I csrc/argus``); {line key: number}."""
    src = tmp / "probe.cpp"
    src.write_text(probe_source(headers, structs, constants))
    exe = tmp / "probe"
    argv = [compiler, "-std=c++17", "-I", str(HEADER_DIR), "-o", str(exe), str(src)]
    if Path(compiler).name == "nvcc":
        argv[1:1] = ["-x", "cu"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(argv)}\n{proc.stderr[-3000:]}"
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=60).stdout
    return {f"{kind} {name}": int(value) for kind, name, value in (line.split() for line in out.splitlines())}


def check_structs(layout: dict[str, int], structs: dict[str, np.dtype]) -> None:
    """Every size, offset, field size and signedness of ``structs`` equals the compiled header's."""
    for struct, dtype in structs.items():
        assert layout[f"size {struct}"] == dtype.itemsize, struct
        for field in dtype.names:
            sub, offset = dtype.fields[field][:2]
            base = sub.base if sub.shape else sub
            assert layout[f"offset {struct}.{field}"] == offset, f"{struct}.{field}"
            assert layout[f"fsize {struct}.{field}"] == sub.itemsize, f"{struct}.{field}"
            assert layout[f"signed {struct}.{field}"] == (base.kind == "i"), f"{struct}.{field} signedness"


def check_no_gaps(structs: dict[str, np.dtype]) -> None:
    """The dtypes are packed: a field the C side added would change a size (checked above), and
    there is no gap in the mirror it could hide in."""
    for struct, dtype in structs.items():
        end = 0
        for name in dtype.names:
            sub, offset = dtype.fields[name][:2]
            assert offset == end, f"{struct}: gap before {name}"
            end = offset + sub.itemsize
        assert end == dtype.itemsize, struct


def require_compiler(compiler: str | None) -> str:
    if compiler is None:
        pytest.skip("no host C++ compiler (g++, c++, clang++) or nvcc on PATH")
    return compiler
