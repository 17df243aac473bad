"""Parse SASS listings (``cuobjdump -sass`` or ``nvdisasm``) into functions, basic blocks and a CFG.

A listing line looks like ``/*01a0*/  @!P0 BRA 0x170 ;`` (cuobjdump) or ``/*01a0*/  @!P0 BRA `(.L_x_1) ;``
(nvdisasm, with ``.L_x_1:`` label lines). PCs are byte offsets from the start of the function's code
section, the same offsets Nsight Compute reports after subtracting the function's base address.

A ``__noinline__`` device function is compiled into the same code section as the kernel that calls
it and is reached by ``CALL.REL`` and left by ``RET``; :class:`SassFunction` therefore separates the
kernel body (reachable from PC 0) from subroutines (reachable from a call target), and records every
call site, so that code shared by several callers can be split by call-site counts.

Line info: ``nvdisasm -g`` prints ``//## File "path", line N`` before the instructions of that line;
those comments are kept per instruction (``Instruction.source``) for plain source-file attribution.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from .tools import find_tool

_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s+(.*?)\s*;?\s*(?:/\*\s*0x[0-9a-fA-F]+\s*\*/)?\s*$")
_ENCODING_ONLY = re.compile(r"^\s*/\*\s*0x[0-9a-fA-F]+\s*\*/\s*$")
_CUOBJDUMP_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_NVDISASM_SECTION = re.compile(r"^\s*//-+\s*\.text\.(\S+)\s*-+\s*$")
_LABEL = re.compile(r"^\s*(\.L_[\w.]+|[A-Za-z_$][\w.$]*):\s*$")
_LINE_INFO = re.compile(r'^\s*//##\s*File\s*"([^"]*)"\s*,\s*line\s*(\d+)')
_PREDICATE = re.compile(r"^(@!?U?P(?:T|\d+))\s+")
_HEX_TARGET = re.compile(r"^(?:0x)?([0-9a-fA-F]+)$")
_LABEL_TARGET = re.compile(r"`\(([^)]+)\)")

# Control-flow opcodes (the part before the first '.'). BSSY/BMOV/WARPSYNC do not transfer control.
BRANCH_OPCODES = frozenset({"BRA", "JMP", "BRX", "JMX"})
INDIRECT_BRANCH_OPCODES = frozenset({"BRX", "JMX"})
CALL_OPCODES = frozenset({"CALL"})
RETURN_OPCODES = frozenset({"RET"})
EXIT_OPCODES = frozenset({"EXIT", "KILL"})
BARRIER_OPCODES = frozenset({"BAR", "BARRIER", "B2R", "SYNCS"})  # CTA barriers and mbarrier ops (SYNCS)
MARKER_OPCODE = "PMTRIG"


class SassParseError(ValueError):
    """A SASS listing that cannot be read; the message names the line."""


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction. ``pc`` is a byte offset from the start of its function's code."""

    pc: int
    text: str  # as listed, without the trailing ';', e.g. "@!P0 BRA 0x170"
    predicate: str | None  # "@!P0", "@P1", or None when unconditional ("@PT" counts as None)
    opcode: str  # full mnemonic with modifiers, e.g. "CALL.REL.NOINC"
    operands: str
    targets: tuple[int, ...] = ()  # resolved branch/call target PCs
    source: tuple[str, int] | None = None  # (file, line) from nvdisasm -g line info

    @property
    def base(self) -> str:
        """Mnemonic without modifiers ("CALL" for "CALL.REL.NOINC")."""
        return self.opcode.split(".", 1)[0]

    @property
    def is_branch(self) -> bool:
        return self.base in BRANCH_OPCODES

    @property
    def is_call(self) -> bool:
        return self.base in CALL_OPCODES

    @property
    def is_return(self) -> bool:
        return self.base in RETURN_OPCODES

    @property
    def is_exit(self) -> bool:
        return self.base in EXIT_OPCODES

    @property
    def is_barrier(self) -> bool:
        return self.base in BARRIER_OPCODES

    @property
    def is_marker_word(self) -> bool:
        return self.base == MARKER_OPCODE

    @property
    def marker_immediate(self) -> int:
        """The 16-bit immediate of a ``PMTRIG`` instruction."""
        if not self.is_marker_word:
            raise SassParseError(f"instruction at 0x{self.pc:04x} is {self.opcode}, not {MARKER_OPCODE}")
        return int(self.operands.split(",")[0].strip(), 0)

    @property
    def ends_block(self) -> bool:
        return self.is_branch or self.is_return or self.is_exit

    @property
    def falls_through(self) -> bool:
        """Whether control can continue at the next PC (predicated jumps and exits may not be taken)."""
        if self.is_branch and ".DIV" in self.opcode:
            return True  # BRA.DIV jumps only when the warp is diverged (to a slow path), else falls through
        if self.is_branch or self.is_return or self.is_exit:
            return self.predicate is not None
        return True


@dataclass
class BasicBlock:
    start: int  # PC of the first instruction
    instructions: list[Instruction]
    successors: list[int] = field(default_factory=list)  # start PCs of successor blocks
    indirect: bool = False  # ends in BRX/JMX: successors not known statically

    @property
    def end(self) -> int:
        """PC just past the last instruction (bytes)."""
        return self.instructions[-1].pc + INSTRUCTION_BYTES

    @property
    def pcs(self) -> list[int]:
        return [i.pc for i in self.instructions]


INSTRUCTION_BYTES = 16  # every sm_70+ instruction is 128 bits


@dataclass
class SassFunction:
    """One kernel's code section: instructions, blocks, CFG, call sites and subroutines."""

    name: str
    instructions: list[Instruction]
    blocks: dict[int, BasicBlock] = field(default_factory=dict)
    call_sites: list[tuple[int, int]] = field(default_factory=list)  # (call PC, target PC)

    def __post_init__(self) -> None:
        if not self.instructions:
            raise SassParseError(f"function {self.name!r} has no instructions")
        self._by_pc = {i.pc: i for i in self.instructions}
        if not self.blocks:
            self.blocks = _split_blocks(self.instructions)
        if not self.call_sites:
            self.call_sites = [(i.pc, t) for i in self.instructions if i.is_call for t in i.targets]

    def __getitem__(self, pc: int) -> Instruction:
        try:
            return self._by_pc[pc]
        except KeyError:
            raise SassParseError(
                f"no instruction at PC 0x{pc:04x} in {self.name!r} (code spans 0x0000..0x{self.instructions[-1].pc:04x})"
            ) from None

    def __contains__(self, pc: int) -> bool:
        return pc in self._by_pc

    @property
    def subroutine_entries(self) -> list[int]:
        """Start PCs of code reached by CALL (``__noinline__`` device functions)."""
        return sorted({t for _, t in self.call_sites})

    def block_of(self, pc: int) -> BasicBlock:
        starts = [s for s in self.blocks if s <= pc]
        if not starts or pc not in self:
            raise SassParseError(f"PC 0x{pc:04x} is not an instruction of {self.name!r}")
        return self.blocks[max(starts)]

    def reachable(self, entry: int) -> list[int]:
        """Block starts reachable from ``entry`` without entering calls (a call falls through)."""
        seen: list[int] = []
        stack = [entry]
        while stack:
            start = stack.pop()
            if start in seen:
                continue
            seen.append(start)
            stack.extend(self.blocks[start].successors)
        return sorted(seen)

    def opcode_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for ins in self.instructions:
            out[ins.base] = out.get(ins.base, 0) + 1
        return out


def _split_blocks(instructions: list[Instruction]) -> dict[int, BasicBlock]:
    pcs = [i.pc for i in instructions]
    pc_set = set(pcs)
    leaders = {pcs[0]}
    for k, ins in enumerate(instructions):
        for t in ins.targets:
            if t not in pc_set:
                raise SassParseError(f"{ins.opcode} at 0x{ins.pc:04x} targets 0x{t:04x}, which is not an instruction")
            leaders.add(t)
        if ins.ends_block and k + 1 < len(instructions):
            leaders.add(pcs[k + 1])
    blocks: dict[int, BasicBlock] = {}
    current: BasicBlock | None = None
    for ins in instructions:
        if ins.pc in leaders:
            current = BasicBlock(ins.pc, [])
            blocks[ins.pc] = current
        current.instructions.append(ins)  # type: ignore[union-attr]
    starts = sorted(blocks)
    for idx, start in enumerate(starts):
        block = blocks[start]
        last = block.instructions[-1]
        succ: list[int] = []
        if last.is_branch:
            succ.extend(last.targets)
            block.indirect = last.base in INDIRECT_BRANCH_OPCODES
        if last.falls_through and idx + 1 < len(starts):
            succ.append(starts[idx + 1])
        block.successors = list(dict.fromkeys(succ))
    return blocks


def _parse_instruction(pc: int, body: str, source, function_base: int | None) -> Instruction:
    predicate = None
    m = _PREDICATE.match(body)
    if m:
        predicate = None if m.group(1) in ("@PT", "@UPT") else m.group(1)
        body = body[m.end():]
    parts = body.split(None, 1)
    opcode = parts[0]
    operands = parts[1].strip() if len(parts) > 1 else ""
    targets: tuple[int, ...] = ()
    base = opcode.split(".", 1)[0]
    if base in BRANCH_OPCODES - INDIRECT_BRANCH_OPCODES or base in CALL_OPCODES:
        targets = (_resolve_target(operands, pc, function_base),)
    return Instruction(pc, (f"{m.group(1)} " if m else "") + body, predicate, opcode, operands, targets, source)


def _resolve_target(operands: str, pc: int, function_base: int | None) -> int:
    first = operands.split(",")[-1].strip().split()[0] if operands else ""
    hm = _HEX_TARGET.match(first)
    if not hm:
        raise SassParseError(f"cannot read the branch target {operands!r} at PC 0x{pc:04x}")
    value = int(hm.group(1), 16)
    if function_base is not None:
        value -= function_base
    return value


def parse_sass(text: str) -> dict[str, SassFunction]:
    """Functions of a ``cuobjdump -sass`` or ``nvdisasm [-g]`` listing, by (mangled) name.

    Raises :class:`SassParseError` when the text holds no instruction at all.
    """
    functions: dict[str, SassFunction] = {}
    name: str | None = None
    rows: list[tuple[int, str, tuple[str, int] | None]] = []
    labels: dict[str, int] = {}
    source: tuple[str, int] | None = None

    def flush() -> None:
        if name is not None and rows:
            functions[name] = _build_function(name, rows, labels)

    for lineno, line in enumerate(text.splitlines(), 1):
        m = _CUOBJDUMP_FUNCTION.match(line) or _NVDISASM_SECTION.match(line)
        if m:
            flush()
            name, rows, labels, source = m.group(1), [], {}, None
            continue
        li = _LINE_INFO.match(line)
        if li:
            source = (li.group(1), int(li.group(2)))
            continue
        if _ENCODING_ONLY.match(line):
            continue
        im = _INSTRUCTION.match(line)
        if im:
            if name is None:
                name = "<anonymous>"
            rows.append((int(im.group(1), 16), im.group(2).rstrip(" ;"), source))
            continue
        lm = _LABEL.match(line)
        if lm and name is not None:
            labels[lm.group(1)] = len(rows)  # index of the next instruction; PC resolved below
    flush()
    if not functions:
        raise SassParseError("no SASS instructions found (expected lines like '/*0010*/  FFMA R0, R1, R2, R3 ;')")
    return functions


def _build_function(name: str, rows, labels: dict[str, int]) -> SassFunction:
    label_pcs = {lab: (rows[idx][0] if idx < len(rows) else rows[-1][0] + INSTRUCTION_BYTES) for lab, idx in labels.items()}
    instructions = []
    for pc, body, source in rows:
        lm = _LABEL_TARGET.search(body)
        if lm:
            if lm.group(1) not in label_pcs:
                raise SassParseError(f"{name}: label {lm.group(1)!r} used at PC 0x{pc:04x} is never defined")
            body_for_target = body.replace(lm.group(0), hex(label_pcs[lm.group(1)]))
            ins = _parse_instruction(pc, body_for_target, source, None)
            ins = Instruction(ins.pc, body, ins.predicate, ins.opcode, ins.operands, ins.targets, ins.source)
        else:
            ins = _parse_instruction(pc, body, source, None)
        instructions.append(ins)
    return SassFunction(name, instructions)


def function_from_rows(name: str, rows: list[tuple[int, str]]) -> SassFunction:
    """A :class:`SassFunction` from (absolute address, SASS text) rows, as Nsight Compute lists them.

    Addresses become offsets from the first row; absolute branch targets are rebased the same way.
    """
    if not rows:
        raise SassParseError(f"function {name!r}: no SASS rows")
    base = rows[0][0]
    instructions = [_parse_instruction(addr - base, text.strip().rstrip(" ;"), None, base) for addr, text in rows]
    return SassFunction(name, instructions)


def select_function(functions: dict[str, SassFunction], kernel: str) -> SassFunction:
    """The function whose mangled name is ``kernel`` or contains it (must be unique)."""
    if kernel in functions:
        return functions[kernel]
    hits = [n for n in functions if kernel in n]
    if len(hits) == 1:
        return functions[hits[0]]
    kind = "ambiguous" if hits else "unknown"
    raise SassParseError(f"{kind} kernel {kernel!r}; functions in this binary: {', '.join(sorted(functions))}")


# ---- running the disassemblers ---------------------------------------------------------------

def disassemble(binary: str | os.PathLike, *, tool: str = "cuobjdump", line_info: bool = False,
                function: str | None = None, timeout_s: float = 120.0) -> str:
    """SASS text of a cubin or executable. ``line_info`` (nvdisasm, cubin only) adds file/line comments;
    ``function`` (cuobjdump only) limits the listing to that function."""
    valid = ("cuobjdump", "nvdisasm")
    if tool not in valid:
        raise ValueError(f"unknown disassembler {tool!r}; valid: {', '.join(valid)}")
    path = Path(binary)
    if not path.is_file():
        raise FileNotFoundError(f"no such binary to disassemble: {path}")
    exe = find_tool(tool)
    if tool == "cuobjdump":
        if line_info:
            raise ValueError("line_info needs tool='nvdisasm' (cuobjdump prints no line table)")
        cmd = [str(exe), "-sass"] + (["-fun", function] if function else []) + [str(path)]
    else:
        if function:
            raise ValueError("function needs tool='cuobjdump' (nvdisasm lists the whole cubin)")
        cmd = [str(exe), "-c"] + (["-g"] if line_info else []) + [str(path)]
    return _tool_output(cmd, timeout_s)


def _tool_output(cmd: list[str], timeout_s: float) -> str:
    """stdout of a disassembler run; :class:`SassParseError` with its stderr when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise SassParseError(f"{' '.join(cmd)} failed (rc {proc.returncode}): {proc.stderr.strip()[:500]}")
    return proc.stdout


def indirect_branch_targets(binary: str | os.PathLike, *, timeout_s: float = 120.0) -> dict[str, dict[int, tuple[int, ...]]]:
    """{function: {PC of an indirect branch: its target PCs}} from the cubin's
    ``EIATTR_INDIRECT_BRANCH_TARGETS`` attributes (``cuobjdump -elf``): ptxas records every target of
    the jump tables it emits (a dense ``switch`` becomes ``BRX``), which the SASS text does not show."""
    return parse_indirect_branch_targets(_tool_output([str(find_tool("cuobjdump")), "-elf", str(binary)], timeout_s))


def parse_indirect_branch_targets(elf_text: str) -> dict[str, dict[int, tuple[int, ...]]]:
    """The ``EIATTR_INDIRECT_BRANCH_TARGETS`` entries of a ``cuobjdump -elf`` listing, per ``.nv.info.<function>``."""
    out: dict[str, dict[int, tuple[int, ...]]] = {}
    function, branch = None, None
    for line in elf_text.splitlines():
        m = re.match(r"^\.nv\.info\.(\S+)\s*$", line)
        if m:
            function, branch = m.group(1), None
            continue
        m = re.search(r"Offset of Indirect Branch:\s*(0x[0-9a-fA-F]+)", line)
        if m and function is not None:
            branch = int(m.group(1), 16)
            continue
        m = re.match(r"^\s*Targets:\s*((?:0x[0-9a-fA-F]+\s*)+)$", line)
        if m and branch is not None:
            out.setdefault(function, {})[branch] = tuple(int(t, 16) for t in m.group(1).split())
            branch = None
    return out


def with_indirect_targets(function: SassFunction, targets: dict[int, tuple[int, ...]]) -> SassFunction:
    """``function`` with the given targets on its indirect branches, so its CFG has their edges."""
    if not targets:
        return function
    for pc in targets:
        if pc not in function or function[pc].base not in INDIRECT_BRANCH_OPCODES:
            raise SassParseError(f"{function.name}: indirect-branch targets name PC 0x{pc:04x}, which is not a BRX/JMX")
    return SassFunction(function.name, [replace(i, targets=tuple(targets[i.pc])) if i.pc in targets else i
                                        for i in function.instructions])


def sass_arch(text: str) -> str | None:
    """The SASS architecture a cuobjdump listing names (``"sm_90a"``), or None when it names none."""
    m = re.search(r"code for (sm_\w+)", text) or re.search(r"\.target\s+(sm_\w+)", text)
    return m.group(1) if m else None


def kernel_key(name: str) -> str:
    """A short, tool-independent kernel name: ``ground_truth_kernel`` for the mangled
    ``_Z19ground_truth_kernelPKfS0_Pfiiii``, for the demangled ``ground_truth_kernel(const float *, ...)``
    that Nsight Compute prints, and for ``void ns::k<int>(float*)``; plain names (Triton) pass through.
    """
    name = name.strip()
    if name.startswith("_Z"):
        rest = name[2:]
        parts = []
        if rest.startswith("N"):  # nested name: _ZN <len><id>... E
            rest = rest[1:]
        while rest and rest[0].isdigit():
            m = re.match(r"(\d+)", rest)
            n = int(m.group(1))
            parts.append(rest[len(m.group(1)):len(m.group(1)) + n])
            rest = rest[len(m.group(1)) + n:]
        if parts:
            return parts[-1]
        return name
    base = name.split("(", 1)[0]
    depth, out = 0, []
    for ch in base:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    base = "".join(out).strip().split()[-1] if "".join(out).strip() else base
    return base.rsplit("::", 1)[-1]


def pc_key(kernel: str, pc: int) -> str:
    """The PC key shared by Argus evidence files: ``"<kernel_key>@0x<offset>"``."""
    return f"{kernel_key(kernel)}@0x{pc:x}"


def parse_pc_key(key: str) -> tuple[str, int]:
    kernel, sep, off = key.rpartition("@0x")
    if not sep or not kernel:
        raise ValueError(f"bad PC key {key!r}; expected '<kernel>@0x<hex offset>'")
    return kernel, int(off, 16)
