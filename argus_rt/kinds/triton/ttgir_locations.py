"""MLIR source locations as Triton prints them, read into a call stack of Python source positions.

Triton gives every op a location: ``"file.py":12:8`` for code in the kernel, ``"acc"(...)`` to name
a value, and ``callsite(callee at caller)`` for code inlined from a ``@triton.jit`` helper or from
``triton.language`` itself. The same syntax appears in two places: inline, in what the bindings
print for a value (``loc(callsite("k.py":7:16 at "k.py":22:26))``), and as aliases in the TTGIR
text (``loc(#loc60)`` with ``#loc60 = loc(callsite(#loc16 at #loc17))`` at the end of the module).

:func:`read_location` reads both into a :class:`Location`: the **call stack**, outermost caller
first. An op of the kernel's own body has one frame; an op inlined from a helper has the call
site in the kernel, then the position in the helper (then deeper frames for nested helpers).
Region membership compares these stacks frame by frame (:mod:`argus_rt.kinds.triton.ttgir_regions`).
"""
from __future__ import annotations

from dataclasses import dataclass


class LocationError(ValueError):
    """A location this reader cannot interpret; the message quotes it."""


@dataclass(frozen=True)
class SourceLoc:
    """One Python source position."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Location:
    """A resolved location: the call stack (outermost first; empty for ``unknown``) and the value
    name Triton attached to the innermost frame (``"acc"``), if any."""

    stack: tuple[SourceLoc, ...]
    name: str | None = None

    @property
    def outer(self) -> SourceLoc | None:
        return self.stack[0] if self.stack else None

    def __str__(self) -> str:
        return " > ".join(str(f) for f in self.stack) or "unknown"


UNKNOWN = Location(())


class _Reader:
    def __init__(self, text: str, aliases: dict[str, str], cache: dict[str, Location], depth: int) -> None:
        self.s, self.i = text, 0
        self.aliases, self.cache, self.depth = aliases, cache, depth

    def fail(self, what: str) -> LocationError:
        return LocationError(f"cannot read location {self.s!r}: {what} at offset {self.i}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def take(self, token: str) -> bool:
        self.ws()
        if self.s.startswith(token, self.i):
            self.i += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.take(token):
            raise self.fail(f"expected {token!r}")

    def string(self) -> str:
        self.ws()
        if self.i >= len(self.s) or self.s[self.i] != '"':
            raise self.fail("expected a string")
        j = self.i + 1
        out = []
        while j < len(self.s) and self.s[j] != '"':
            if self.s[j] == "\\" and j + 1 < len(self.s):
                out.append(self.s[j + 1])
                j += 2
                continue
            out.append(self.s[j])
            j += 1
        if j >= len(self.s):
            raise self.fail("unterminated string")
        self.i = j + 1
        return "".join(out)

    def integer(self) -> int:
        self.ws()
        j = self.i
        while j < len(self.s) and self.s[j].isdigit():
            j += 1
        if j == self.i:
            raise self.fail("expected an integer")
        value, self.i = int(self.s[self.i:j]), j
        return value

    def location(self) -> Location:
        self.ws()
        if self.take("unknown"):
            return UNKNOWN
        if self.take("#loc"):
            j = self.i
            while j < len(self.s) and (self.s[j].isalnum() or self.s[j] in "_"):
                j += 1
            alias, self.i = "#loc" + self.s[self.i:j], j
            return resolve_alias(alias, self.aliases, self.cache, self.depth + 1)
        if self.take("callsite("):
            callee = self.location()
            self.expect("at")
            caller = self.location()
            self.expect(")")
            return Location(caller.stack + callee.stack, callee.name or (None if callee.stack else caller.name))
        if self.take("fused"):
            if self.take("<"):  # fused<metadata>[...]: skip the metadata
                level = 1
                while self.i < len(self.s) and level:
                    level += {"<": 1, ">": -1}.get(self.s[self.i], 0)
                    self.i += 1
            self.expect("[")
            parts = [self.location()]
            while self.take(","):
                parts.append(self.location())
            self.expect("]")
            return next((p for p in parts if p.stack), parts[0])  # the first part that is a position
        text = self.string()
        if self.take("("):  # a name location: "acc"(child)
            child = self.location()
            self.expect(")")
            return Location(child.stack, text)
        if self.take(":"):  # a file position "f.py":line:col [to line:col | to :col]
            line = self.integer()
            self.expect(":")
            col = self.integer()
            if self.take("to"):
                if not self.take(":"):
                    self.integer()
                    self.expect(":")
                self.integer()
            return Location((SourceLoc(text, line, col),))
        return Location((), text)  # a bare name location without a child


def resolve_alias(alias: str, aliases: dict[str, str], cache: dict[str, Location], depth: int = 0) -> Location:
    """The location an alias (``#loc12``) stands for, through chains of aliases (cached)."""
    if alias in cache:
        return cache[alias]
    if depth > 256:
        raise LocationError(f"location alias chain too deep (a cycle?) at {alias}")
    if alias not in aliases:
        raise LocationError(f"location alias {alias} is used but never defined")
    loc = read_location(aliases[alias], aliases, cache, depth)
    cache[alias] = loc
    return loc


def read_location(expr: str, aliases: dict[str, str] | None = None, cache: dict[str, Location] | None = None,
                  depth: int = 0) -> Location:
    """Read a location: ``loc(...)`` or its inside, with ``#locN`` aliases looked up in ``aliases``."""
    expr = expr.strip()
    if expr.startswith("loc(") and expr.endswith(")"):
        expr = expr[4:-1]
    reader = _Reader(expr, aliases or {}, cache if cache is not None else {}, depth)
    loc = reader.location()
    reader.ws()
    if reader.i != len(expr):
        raise reader.fail("unexpected text after the location")
    return loc
