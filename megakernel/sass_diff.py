"""Compare megakernel cubins by SASS, with addresses and encodings stripped (the check NOTES.md uses to
say a variant's default build is the measured binary), and count a function's weight loads issued
before its first floating-point use (the GEMV batching check of rows 12 and "Ready").

    python -m megakernel.sass_diff OLD.cubin [NEW.cubin]     # NEW: a fresh build (--mode, --flags)
    python -m megakernel.sass_diff OLD.cubin --flags=-DMK_BATCH_QKV=1 --loads gemv_tile_batch
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

_ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/")
_ENC = re.compile(r"/\* 0x[0-9a-f]{16} \*/")
WEIGHT_LOAD = re.compile(r"\bLDG\.E\.NA\.128\.CONSTANT\b")  # ld_weights: ld.global.nc.L1::no_allocate.v4
FP_USE = re.compile(r"\b(FFMA|FMUL|FADD)\b")


def sass_text(cubin: str | Path) -> str:
    from argus_rt.tools import find_tool

    tool = find_tool("cuobjdump")
    return subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


def normalized(text: str) -> list[str]:
    """SASS lines without addresses, encodings (control bits included) or blank lines."""
    out = []
    for line in text.splitlines():
        line = " ".join(_ENC.sub("", _ADDR.sub("", line)).split())
        if line:
            out.append(line)
    return out


def disassembly(cubin: str | Path) -> str:
    """nvdisasm's listing: unlike cuobjdump it labels each non-inlined device function and names call targets."""
    from argus_rt.tools import find_tool

    tool = find_tool("nvdisasm")
    return subprocess.run([str(tool), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout


_LABEL = re.compile(r"^\$?([A-Za-z_$][\w$]*):$")


def functions(text: str) -> dict[str, list[str]]:
    """Instruction lines per function of an nvdisasm listing: the kernel (``name:``) and each called
    function (``$kernel$mangled:``), keyed by the mangled name."""
    out: dict[str, list[str]] = {}
    cur = None
    for raw in text.splitlines():
        line = raw.strip()
        m = _LABEL.match(line)
        if m and not line.startswith(".") and not line.startswith("$__internal"):
            cur = m.group(1).rsplit("$", 1)[-1]
            out[cur] = []
        elif line.startswith("$__internal"):
            cur = None
        elif cur is not None and line.startswith("/*"):
            out[cur].append(" ".join(_ADDR.sub("", line).split()))
    return out


def calls(fn: list[str], target: str) -> int:
    """CALL instructions in one function whose target's mangled name holds ``target`` as a whole identifier."""
    key = f"{len(target)}{target}E"
    return sum(1 for line in fn if line.startswith("CALL") and key in line)


def first_difference(a: list[str], b: list[str]) -> tuple[int, str, str] | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i, x, y
    if len(a) != len(b):
        i = min(len(a), len(b))
        return i, a[i] if i < len(a) else "<end>", b[i] if i < len(b) else "<end>"
    return None


def loads_before_first_use(fn: list[str]) -> tuple[int, int]:
    """(weight loads before the first FFMA/FMUL/FADD, weight loads in all) of one function's SASS."""
    before, seen_use, total = 0, False, 0
    for line in fn:
        if WEIGHT_LOAD.search(line):
            total += 1
            before += not seen_use
        elif FP_USE.search(line):
            seen_use = True
    return before, total


def find_function(fns: dict[str, list[str]], part: str) -> tuple[str, list[str]]:
    """The function whose mangled name holds ``part`` as a whole identifier (gemv_tile is not gemv_tile_batch)."""
    hits = [n for n in fns if f"{len(part)}{part}E" in n]  # Itanium mangling: <length><name>E...
    if len(hits) != 1:
        raise KeyError(f"{part!r}: {len(hits)} functions match ({hits})")
    return hits[0], fns[hits[0]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="reference cubin")
    ap.add_argument("new", nargs="?", help="cubin to compare (default: build one with --mode and --flags)")
    ap.add_argument("--mode", type=int, default=0, help="Argus mode of the fresh build")
    ap.add_argument("--flags", default="", help="space-separated extra nvcc flags of the fresh build")
    ap.add_argument("--loads", action="append", default=[], help="function (part of its name): weight loads "
                    "before the first FP use, in the new cubin")
    a = ap.parse_args(argv)
    new = a.new
    if new is None:
        from megakernel.build import build

        r = build(a.mode, extra_flags=tuple(a.flags.split()))
        new = r.cubin
        print(f"built {new}: registers {r.registers()}, spill bytes {r.spill_bytes()}")
    old_l, new_l = normalized(sass_text(a.old)), normalized(sass_text(new))
    diff = first_difference(old_l, new_l)
    raw_same = Path(a.old).read_bytes() == Path(new).read_bytes()
    if diff is None:
        print(f"SASS identical ({len(new_l)} lines, addresses and encodings stripped); cubin bytes "
              f"{'identical' if raw_same else 'differ'}")
    else:
        i, x, y = diff
        print(f"SASS differs ({len(old_l)} vs {len(new_l)} lines); first at line {i}:\n  old: {x}\n  new: {y}")
    fns = functions(disassembly(new))
    for part in a.loads:
        name, fn = find_function(fns, part)
        before, total = loads_before_first_use(fn)
        print(f"{name}: {before} of {total} weight loads before the first FP use, {len(fn)} instructions, "
              f"{sum(calls(f, part) for f in fns.values())} calls")
    return 0 if diff is None else 1


if __name__ == "__main__":
    sys.exit(main())
