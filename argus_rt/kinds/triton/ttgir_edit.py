"""Text edits shared by the TTGIR transforms (forced-wait probes, traced references, region traces).

Each transform adds one ``!tt.ptr<i64>`` kernel argument and gives every CTA its own slice of it;
these helpers write those lines once, so every transform lays out its buffer the same way.

Edits are made on the text Triton printed (MLIR's bindings cannot build these ops from Python in a
way that survives re-printing with Triton's names), and every edited module goes through
:func:`checked_edit`: MLIR parses and verifies it, and the original ops must all still be there in
order. A broken edit is refused on the CPU, naming the line, instead of failing in a GPU compile.
"""
from __future__ import annotations

import re

from .ttgir_module import ForLoop, Module, TtgirError, parse_module, text_name

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


def trip_index_lines(ind: str, prefix: str, loop: ForLoop, loc: str = "") -> tuple[list[str], str]:
    """Lines computing the trip index ``(iv - lb) / step`` of ``loop`` at run time, as i32; returns
    (lines, SSA name). They use the loop's own SSA bounds, which dominate its body, so a run-time
    lower bound (causal attention) works the same as a constant one."""
    p, t = f"%{prefix}", loop.iv_type
    lines = [f"{ind}{p}_rel = arith.subi {text_name(loop.iv)}, {text_name(loop.lower)} : {t}{loc}",
             f"{ind}{p}_trip = arith.divsi {p}_rel, {text_name(loop.step)} : {t}{loc}"]
    if t == "i32":
        return lines, f"{p}_trip"
    return lines + [f"{ind}{p}_trip32 = arith.trunci {p}_trip : {t} to i32{loc}"], f"{p}_trip32"


def iv_for_trip_lines(ind: str, prefix: str, module: Module, loop: ForLoop, trip: int,
                      loc: str = "") -> tuple[list[str], str]:
    """Lines defining ``%{prefix}_iv``, the induction variable's value ``lb + trip * step`` in trip
    ``trip``: one constant when the bounds are constants, else computed at run time from the loop's
    SSA bounds. Returns (lines, SSA name; of the loop's iv type)."""
    p, t = f"%{prefix}", loop.iv_type
    lb, step = module.constant_int(loop.lower), module.constant_int(loop.step)
    if lb is not None and step is not None:
        return [f"{ind}{p}_iv = arith.constant {lb + trip * step} : {t}{loc}"], f"{p}_iv"
    return [f"{ind}{p}_tc = arith.constant {trip} : {t}{loc}",
            f"{ind}{p}_toff = arith.muli {p}_tc, {text_name(loop.step)} : {t}{loc}",
            f"{ind}{p}_iv = arith.addi {text_name(loop.lower)}, {p}_toff : {t}{loc}"], f"{p}_iv"


def checked_edit(text: str, origin: Module, what: str) -> str:
    """``text`` after checking it is a valid edit of ``origin``: MLIR parses and verifies it, it has
    the same kernel, and ``origin``'s ops are all still there, in order. Raises :class:`TtgirError`
    naming ``what`` (the transform) otherwise."""
    try:
        edited = parse_module(text, f"<{what}>")
    except TtgirError as exc:
        raise TtgirError(f"the {what} edit broke the TTGIR: {exc}") from None
    if edited.func_name != origin.func_name:
        raise TtgirError(f"the {what} edit renamed kernel {origin.func_name!r} to {edited.func_name!r}")
    names = iter(o.name for o in edited.ops)
    for op in origin.ops:
        if not any(n == op.name for n in names):
            raise TtgirError(f"the {what} edit lost {op} (or moved it out of order)")
    return text
