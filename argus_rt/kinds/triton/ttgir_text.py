"""What only the TTGIR *text* holds: op lines, SSA names, locations of ops without results, and
(for Triton 3.6) integer attributes. See :mod:`argus_rt.kinds.triton.mlir_ir` for why each is needed.

Nothing here decides the IR's structure: MLIR parsed it. These readers attach text facts to the
ops MLIR found, and every attachment is checked (:class:`TextMismatch` otherwise):

* op ``k`` in pre-order is the ``k``-th line that starts an op, and that line names the same op
  (``%x = "tt.reduce"(...``, ``tt.store ...``); lines skipped in between must not start an op;
* the result names on that line are as many as the op's results;
* the block-argument names found on an op's own lines are as many as its blocks' arguments.
"""
from __future__ import annotations

import re

# The head of an op line: optional results ("%a", "%a:4", "%a, %b"), then the op name, quoted in
# the generic form.
_HEAD_RE = re.compile(
    r'^\s*(?:(?P<results>%[\w.$-]+(?::\d+)?(?:\s*,\s*%[\w.$-]+(?::\d+)?)*)\s*=\s*)?'
    r'"?(?P<name>[A-Za-z_][\w$]*(?:\.[\w$]+)+)"?(?=[\s("<{]|$)'
)
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_ARG_DECL_RE = re.compile(r"(%[\w.$-]+)(?::(?!\d)|\s*=(?!=))")
_ALIAS_RE = re.compile(r"^(#loc[\w]*)\s*=\s*(loc\(.*\))\s*$")


class TextMismatch(ValueError):
    """The text does not line up with the IR MLIR parsed from it; names the line."""


def op_head(line: str) -> tuple[str | None, str] | None:
    """(results text or None, op name) of a line that starts an op, else None."""
    if line.lstrip().startswith("module"):
        return None, "builtin.module"
    m = _HEAD_RE.match(line)
    return (m.group("results"), m.group("name")) if m else None


def _names_match(line_name: str, ir_name: str) -> bool:
    # An op in its parent's default dialect may print without the dialect prefix.
    return line_name == ir_name or ir_name.split(".", 1)[-1] == line_name


# Ops a parent's custom printer writes inline, never on a line of their own: warp_specialize prints
# its partitions op as the "partitionN(...) {" region headers.
LINELESS_OPS = frozenset({"ttg.warp_specialize.partitions"})
REQUIRED, OPTIONAL, NEVER = "required", "optional", "never"


def map_op_lines(lines: list[str], names: list[str], source_name: str,
                 policy: list[str] | None = None) -> list[int | None]:
    """0-based line of each op in ``names`` (the IR's op names in pre-order), or None for an op the
    printer leaves out: ``policy[k]`` is REQUIRED, OPTIONAL (an operand-less terminator, which
    custom printers elide) or NEVER (:data:`LINELESS_OPS`)."""
    out: list[int | None] = []
    i = 0
    for k, name in enumerate(names):
        rule = policy[k] if policy else REQUIRED
        if rule == NEVER:
            out.append(None)
            continue
        start = i
        while i < len(lines) and op_head(lines[i]) is None:
            i += 1
        head = op_head(lines[i]) if i < len(lines) else None
        if head is not None and _names_match(head[1], name):
            out.append(i)
            i += 1
        elif rule == OPTIONAL:
            out.append(None)
            i = start  # the next op's line has not been consumed
        elif head is not None:
            raise TextMismatch(f"{source_name}:{i + 1}: the text has op {head[1]} where the parsed IR has "
                               f"{name} (op {k} in order); the text is not one op per line as MLIR prints it")
        else:
            raise TextMismatch(f"{source_name}: op {name} (op {k} in order) has no line in the text")
    return out


def result_names(line: str, count: int, source_name: str, line_no: int) -> list[str]:
    """SSA names of an op's results as other lines refer to them (``%x``, or ``%x#0``.. for ``%x:4``)."""
    head = op_head(line)
    text = head[0] if head else None
    names: list[str] = []
    if text:
        for part in text.split(","):
            base, _, n = part.strip().partition(":")
            names += [f"{base}#{j}" for j in range(int(n))] if n else [base]
    if len(names) != count:
        raise TextMismatch(f"{source_name}:{line_no}: {len(names)} result name(s) on the line, the IR has {count}")
    return names


def block_arg_names(own_lines: list[str]) -> list[str]:
    """Block-argument names declared on an op's own lines (its header without the results, ``^bb``
    lines, ``} else {``/``} do {``, partition headers), in order: ``%a: type`` or ``%iv = %lb``."""
    names = []
    for k, line in enumerate(own_lines):
        if k == 0:
            m = _HEAD_RE.match(line)
            line = line[m.end():] if m else line
        names += _ARG_DECL_RE.findall(_STRING_RE.sub('""', line))
    return names


def closing_line(lines: list[str], after: int) -> int:
    """0-based index of the first line after ``after`` that closes a region op (``}`` or ``})``
    not followed by another region opening)."""
    for i in range(after + 1, len(lines)):
        s = lines[i].strip()
        if s.startswith("}") and not s.endswith("{"):
            return i
    raise TextMismatch(f"no closing '}}' after line {after + 1}")


def loc_aliases(lines: list[str]) -> dict[str, str]:
    """The module's location table: ``#loc12`` -> ``loc(...)``."""
    out = {}
    for line in lines:
        m = _ALIAS_RE.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def trailing_loc(line: str) -> str | None:
    """The ``loc(...)`` that ends a line (an op's own location), or None."""
    s = line.rstrip()
    if s.endswith("{"):
        s = s[:-1].rstrip()
    if not s.endswith(")"):
        return None
    depth, i, in_str = 0, len(s) - 1, False
    while i >= 0:  # walk back to the "(" matching the final ")"
        c = s[i]
        if c == '"' and (i == 0 or s[i - 1] != "\\"):
            in_str = not in_str
        elif not in_str:
            depth += {")": 1, "(": -1}.get(c, 0)
            if depth == 0:
                break
        i -= 1
    return s[i - 3:] if i >= 3 and s[i - 3:i] == "loc" else None


# ---- integer attributes (Triton 3.6 has no op.get_int_attr) ------------------------------------
_CONST_RE = re.compile(r"arith\.constant\s+(true|false|-?\d+)\s*(?::\s*i\d+)?\s*(?:loc\(|$)")
_EXPECT_RE = re.compile(r"barrier_expect\s+%[\w.$#-]+\s*,\s*(\d+)")
_CMPI_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")  # MLIR's enum order


def text_int_attr(op_name: str, line: str, attr: str) -> int | None:
    """Integer attribute ``attr`` of the op printed on ``line``, read from its custom syntax."""
    if op_name == "arith.constant" and attr == "value":
        m = _CONST_RE.search(line)
        return None if m is None else {"true": 1, "false": 0}.get(m.group(1)) if m.group(1) in ("true", "false") \
            else int(m.group(1))
    if op_name == "ttng.barrier_expect" and attr == "size":
        m = _EXPECT_RE.search(line)
        return int(m.group(1)) if m else None
    if op_name == "arith.cmpi" and attr == "predicate":
        m = re.search(r"arith\.cmpi\s+(\w+)", line)
        return _CMPI_PREDICATES.index(m.group(1)) if m and m.group(1) in _CMPI_PREDICATES else None
    m = re.search(rf"[{{,]\s*{re.escape(attr)}\s*=\s*(-?\d+)\s*:\s*i\d+", _STRING_RE.sub('""', line))
    return int(m.group(1)) if m else None


CMPI_PREDICATES = _CMPI_PREDICATES
