"""Scope: which dynamic executions (occurrences) of a region a query selects.

Fields (all optional; an empty scope selects every occurrence):

``warp_role``   str, a role name the program declares (e.g. ``"producer"``, ``"consumer"``)
``iterations``  (start, stop): half-open window of loop iterations (the record's scope coordinate)
``sms``         SM indices (any iterable of ints; stored sorted)
``ctas``        CTA (block) linear indices (any iterable of ints; stored sorted)
``step``        decode step / outer step index
``layer``       layer index

Unknown fields or bad values raise :class:`ScopeError` naming the field and the valid choices.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from .errors import ArgusInputError

SCOPE_FIELDS = ("warp_role", "iterations", "sms", "ctas", "step", "layer")


class ScopeError(ArgusInputError):
    """A scope field or value that is not valid."""


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScopeError(f"scope field {name!r} needs a non-negative int, got {value!r}")
    return value


def _int_set(name: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ScopeError(f"scope field {name!r} needs an iterable of non-negative ints, got {value!r}")
    out = tuple(sorted({_int(name, v) for v in value}))
    if not out:
        raise ScopeError(f"scope field {name!r} is empty: it would select nothing; leave it unset for all")
    return out


class Scope:
    """An immutable, hashable scope. ``Scope(iterations=(2, 4), sms=range(8))``."""

    __slots__ = ("warp_role", "iterations", "sms", "ctas", "step", "layer")

    def __init__(self, **fields: Any) -> None:
        unknown = sorted(set(fields) - set(SCOPE_FIELDS))
        if unknown:
            raise ScopeError(f"unknown scope field(s) {unknown}; valid fields: {', '.join(SCOPE_FIELDS)}")
        values: dict[str, Any] = dict.fromkeys(SCOPE_FIELDS)
        for name, value in fields.items():
            if value is None:
                continue
            if name == "warp_role":
                if not isinstance(value, str) or not value.isidentifier():
                    raise ScopeError(f"scope field 'warp_role' needs an identifier string, got {value!r}")
            elif name == "iterations":
                if isinstance(value, range) and value.step == 1:
                    value = (value.start, value.stop)
                if not isinstance(value, (tuple, list)) or len(value) != 2:
                    raise ScopeError(f"scope field 'iterations' needs (start, stop), got {value!r}")
                start, stop = _int(name, value[0]), _int(name, value[1])
                if stop <= start:
                    raise ScopeError(f"scope field 'iterations' window {value!r} is empty (stop <= start)")
                value = (start, stop)
            elif name in ("sms", "ctas"):
                value = _int_set(name, value)
            else:
                value = _int(name, value)
            values[name] = value
        for name in SCOPE_FIELDS:
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name, value):  # immutable: scopes are dictionary keys and hash inputs
        raise AttributeError("Scope is immutable; build a new one with Scope(**fields)")

    # ---- conversion -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Only the set fields, JSON-ready (tuples become lists)."""
        out = {}
        for name in SCOPE_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: dict | None) -> "Scope":
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ScopeError(f"a scope is a mapping of fields, got {data!r}; valid fields: {', '.join(SCOPE_FIELDS)}")
        return cls(**data)

    @classmethod
    def parse(cls, items: Iterable[str]) -> "Scope":
        """From CLI words ``field=value``: ``iterations=2:4``, ``sms=0,1,2``, ``warp_role=producer``."""
        fields: dict[str, Any] = {}
        for item in items:
            name, sep, text = item.partition("=")
            if not sep:
                raise ScopeError(f"scope item {item!r} is not field=value; valid fields: {', '.join(SCOPE_FIELDS)}")
            name = name.strip()
            if name not in SCOPE_FIELDS:
                raise ScopeError(f"unknown scope field {name!r}; valid fields: {', '.join(SCOPE_FIELDS)}")
            try:
                if name == "warp_role":
                    fields[name] = text
                elif name == "iterations":
                    start, _, stop = text.partition(":")
                    fields[name] = (int(start), int(stop))
                elif name in ("sms", "ctas"):
                    fields[name] = _parse_int_list(text)
                else:
                    fields[name] = int(text)
            except ValueError:
                raise ScopeError(f"scope item {item!r}: cannot parse the value of {name!r}") from None
        return cls(**fields)

    def key(self) -> str:
        """Canonical text, equal for equal scopes (used in task hashes)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def fields_set(self) -> set[str]:
        return {name for name in SCOPE_FIELDS if getattr(self, name) is not None}

    def restrict(self, names: Iterable[str]) -> "Scope":
        """The same scope keeping only ``names``."""
        keep = set(names)
        return Scope(**{k: v for k, v in self.to_dict().items() if k in keep})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scope) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"Scope({inner})"

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.to_dict().items()) or "all"


def _parse_int_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out
