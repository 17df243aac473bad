"""Scope: which dynamic executions (occurrences) of a region a query selects.

Fields (all optional; an empty scope selects every occurrence):

``warp_role``   str, a role name the program declares (e.g. ``"producer"``, ``"consumer"``;
                checked against the program by :func:`check_warp_role` when a query is planned)
``iterations``  (start, stop): half-open window of loop iterations (the record's scope coordinate)
``sms``         SM indices (any iterable of ints; stored sorted)
``ctas``        CTA (block) linear indices (any iterable of ints; stored sorted)
``step``        decode step / outer step index
``layer``       layer index

Every number is an int in ``0 <= x < 2**31`` (an iteration window's stop may equal ``2**31``).
Unknown fields, repeated fields or bad values raise :class:`ScopeError` naming the field and the
valid choices.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from .errors import ArgusInputError

SCOPE_FIELDS = ("warp_role", "iterations", "sms", "ctas", "step", "layer")


class ScopeError(ArgusInputError):
    """A scope field or value that is not valid."""


INT_LIMIT = 2**31  # scope coordinates are 32-bit on the device; this bound fits every field
MAX_LISTED = 1 << 20  # SM or CTA indices one scope may list (a range 0-N counts N + 1)


def _int(name: str, value: Any, limit: int = INT_LIMIT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise ScopeError(f"scope field {name!r} needs an int in 0 <= x < 2**31, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int_set(name: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ScopeError(f"scope field {name!r} needs an iterable of ints in 0 <= x < 2**31, got {_short(value)}")
    if hasattr(value, "__len__") and len(value) > MAX_LISTED:
        raise ScopeError(f"scope field {name!r} lists {len(value)} indices; at most {MAX_LISTED} may be listed")
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
                start, stop = _int(name, value[0]), _int(name, value[1], INT_LIMIT + 1)
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
        if isinstance(items, str):  # one "k=v" string would be read character by character
            items = [items]
        fields: dict[str, Any] = {}
        given: dict[str, str] = {}
        for item in items:
            if not isinstance(item, str):
                raise ScopeError(f"scope item {item!r} is not a 'field=value' string")
            name, sep, text = item.partition("=")
            if not sep:
                raise ScopeError(f"scope item {item!r} is not field=value; valid fields: {', '.join(SCOPE_FIELDS)}")
            name = name.strip()
            if name not in SCOPE_FIELDS:
                raise ScopeError(f"unknown scope field {name!r}; valid fields: {', '.join(SCOPE_FIELDS)}")
            if name in given:
                raise ScopeError(f"scope field {name!r} given twice ({given[name]!r} and {item!r}); give each "
                                 f"field once (sms and ctas take lists: sms=0,1,4-7)")
            given[name] = item
            try:
                if name == "warp_role":
                    fields[name] = text
                elif name == "iterations":
                    start, colon, stop = text.partition(":")
                    if not colon:
                        raise ValueError(text)
                    fields[name] = (_parse_int(start), _parse_int(stop))
                elif name in ("sms", "ctas"):
                    fields[name] = _parse_int_list(name, text)
                else:
                    fields[name] = _parse_int(text)
            except ScopeError:
                raise
            except ValueError:
                raise ScopeError(f"scope item {_short(item)}: cannot parse the value of {name!r}; "
                                 f"{_SYNTAX[name]}") from None
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


_SYNTAX = {
    "warp_role": "give a role name: warp_role=producer",
    "iterations": "give a half-open window start:stop, e.g. iterations=2:4",
    "sms": "give indices and ranges, e.g. sms=0,1,4-7",
    "ctas": "give indices and ranges, e.g. ctas=0,1,4-7",
    "step": "give an int, e.g. step=3",
    "layer": "give an int, e.g. layer=0",
}


def _parse_int(text: str) -> int:
    """A decimal int; a negative or huge one parses so that Scope() names the valid range."""
    text = text.strip()
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):  # int() would also take '+1', '1_000', ' 1 '
        raise ValueError(text)
    return int(text)


def _parse_int_list(name: str, text: str) -> list[int]:
    """``0,1,4-7`` -> [0, 1, 4, 5, 6, 7]; a range is checked before it is expanded."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if "-" in part[1:]:
            lo, hi = (_int(name, _parse_int(v)) for v in part.split("-", 1))
            if hi < lo:
                raise ScopeError(f"scope field {name!r}: range {part!r} is empty (end < start)")
            if hi - lo + 1 + len(out) > MAX_LISTED:
                raise ScopeError(f"scope field {name!r}: {part!r} lists more than {MAX_LISTED} indices")
            out.extend(range(lo, hi + 1))
        elif part:
            out.append(_parse_int(part))
    return out


def check_warp_role(scope: "Scope", declared: dict, program: str) -> None:
    """Raise :class:`ScopeError` unless ``scope.warp_role`` (when set) is one of the ``declared`` roles
    of ``program``."""
    if scope.warp_role is None or scope.warp_role in declared:
        return
    if not declared:
        raise ScopeError(f"warp_role={scope.warp_role!r}: program {program!r} declares no warp roles, so no "
                         "warp_role is valid; declare them in argus_program.json, e.g. "
                         '"warp_roles": {"producer": [0], "consumer": [1, 2, 3]} (warp indices within a CTA)')
    raise ScopeError(f"warp_role={scope.warp_role!r} is not a role program {program!r} declares; valid roles: "
                     f"{', '.join(sorted(declared))}")
