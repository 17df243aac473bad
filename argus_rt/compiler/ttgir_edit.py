"""Text edits shared by the TTGIR transforms (forced-wait probes, traced references, region traces).

Each transform adds one ``!tt.ptr<i64>`` kernel argument and gives every CTA its own slice of it;
these helpers write those lines once, so every transform lays out its buffer the same way.
"""
from __future__ import annotations

import re

from .triton_discovery import Module

I64_PTR = "!tt.ptr<i64>"

# PTX for an i64 inline-asm read of the SM id (the register is 32-bit).
SMID_ASM = "{ .reg .u32 argus_t; mov.u32 argus_t, %smid; cvt.u64.u32 $0, argus_t; }"


def loc_suffix(text: str) -> str:
    """The trailing ``loc(...)`` of a TTGIR line, with its leading space, or ""."""
    m = re.search(r"\s(loc\(.*\))\s*$", text)
    return " " + m.group(1) if m else ""


def indent(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def lines_with_pointer_arg(module: Module, name: str) -> list[str]:
    """A copy of the module's lines with ``name: !tt.ptr<i64>`` appended to the kernel's argument list: where every
    instrumentation starts (the kernel gets the buffer it writes to)."""
    lines = list(module.lines)
    i = module.func_line - 1
    fl = lines[i]
    close = fl.index(") attributes") if ") attributes" in fl else fl.rindex(")")
    lines[i] = fl[:close] + f", {name}: {I64_PTR}" + fl[close:]
    return lines


def cta_slice_lines(ind: str, prefix: str, arg: str, words: int) -> list[str]:
    """Lines that define ``%{prefix}_p0``: ``arg`` + linear CTA index * ``words`` (i64 words per CTA)."""
    p = f"%{prefix}"
    return [
        f"{ind}{p}_pid_x = tt.get_program_id x : i32",
        f"{ind}{p}_pid_y = tt.get_program_id y : i32",
        f"{ind}{p}_pid_z = tt.get_program_id z : i32",
        f"{ind}{p}_n_x = tt.get_num_programs x : i32",
        f"{ind}{p}_n_y = tt.get_num_programs y : i32",
        f"{ind}{p}_lin_yz = arith.muli {p}_pid_z, {p}_n_y : i32",
        f"{ind}{p}_lin_y = arith.addi {p}_lin_yz, {p}_pid_y : i32",
        f"{ind}{p}_lin_xy = arith.muli {p}_lin_y, {p}_n_x : i32",
        f"{ind}{p}_lin = arith.addi {p}_lin_xy, {p}_pid_x : i32",
        f"{ind}{p}_words = arith.constant {words} : i32",
        f"{ind}{p}_base = arith.muli {p}_lin, {p}_words : i32",
        f"{ind}{p}_p0 = tt.addptr {arg}, {p}_base : {I64_PTR}, i32",
    ]


def i64_asm_line(ind: str, name: str, asm: str, loc: str = "") -> str:
    """A TTGIR line defining ``name`` as the i64 result of inline PTX ``asm`` (not pure: never CSE'd)."""
    return (f'{ind}{name} = tt.elementwise_inline_asm "{asm}" '
            f'{{constraints = "=l", packed_element = 1 : i32, pure = false}} -> i64{loc}')


def special_reg_line(ind: str, name: str, reg: str, loc: str = "") -> str:
    """A TTGIR line reading the 64-bit special register ``reg`` (``%globaltimer``, ``%clock64``) into ``name``."""
    return i64_asm_line(ind, name, f"mov.u64 $0, {reg};", loc)
