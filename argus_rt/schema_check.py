"""Validate a JSON document against one of Argus's published schemas; describe errors in one line.

The schemas (JSON Schema draft 2020-12) ship as package data in ``argus_rt/schemas/``. A schema
node may carry ``"x-expected"``: the phrase printed when a value there is wrong, so an error reads
``launch.grid: 'big' is not an array of 1-3 positive integers`` instead of the validator's
generic sentence.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files

_MAX_SHOWN = 3  # errors named in one message; the rest are counted


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """The schema ``argus_rt/schemas/<name>.schema.json`` (parsed once)."""
    return json.loads((files("argus_rt") / "schemas" / f"{name}.schema.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def schema_at(ref: str) -> dict:
    """The schema that ``ref`` names: ``"<name>"`` (a whole schema) or ``"<name>#<JSON pointer>"`` (one
    of its nodes, e.g. ``"program#/$defs/cudaLaunch"``, with that schema's ``$defs`` to resolve its refs)."""
    name, _, pointer = ref.partition("#")
    schema = load_schema(name)
    if not pointer:
        return schema
    node = schema
    for key in pointer.strip("/").split("/"):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(f"schema reference {ref!r}: no {key!r} in {name}.schema.json")
        node = node[key]
    return {**{k: schema[k] for k in ("$schema", "$defs") if k in schema}, "$ref": f"#{pointer}"}


@lru_cache(maxsize=None)
def validator(ref: str):
    """A Draft 2020-12 validator of the schema ``ref`` names (:func:`schema_at`; built once)."""
    from jsonschema import Draft202012Validator  # on first use: its import takes tens of ms (-X importtime)

    return Draft202012Validator(schema_at(ref))


def schema_problems(ref: str, document, *, at: tuple = ()) -> list[str]:
    """Every way ``document`` breaks the schema ``ref`` names (a schema, or one node of it:
    :func:`schema_at`), shallowest first, one phrase each (``"launch.grid: 'big' is not ..."``); empty
    when it is valid. ``at``: the path of ``document`` inside the file it came from, named in each phrase."""
    schema = schema_at(ref)
    errors = sorted(validator(ref).iter_errors(document), key=lambda e: (len(e.absolute_path),
                                                                           [str(p) for p in e.absolute_path]))
    out, reported = [], []
    for error in errors:
        path = [*at, *error.absolute_path]
        if any(path[:len(done)] == done for done in reported if done):  # a field already named
            continue
        field = field_path(path)
        text = _describe(error, schema)
        line = f"{field}: {text}" if field else text
        if line not in out:
            out.append(line)
            if error.validator not in ("required", "additionalProperties"):  # those leave the values to check
                reported.append(path)
    return out


def summarize(problems: list[str]) -> str:
    """The first problems joined into one line, with a count of the rest."""
    shown = "; ".join(problems[:_MAX_SHOWN])
    more = len(problems) - _MAX_SHOWN
    return shown + (f"; and {more} more problem(s)" if more > 0 else "")


def field_path(path) -> str:
    """``['launch', 'args', 2, 'tensor']`` -> ``launch.args[2].tensor``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _resolve(node: dict, schema: dict) -> dict:
    """Follow local ``$ref``s (``#/$defs/...``), the only kind these schemas use."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
        target = schema
        for key in node["$ref"][2:].split("/"):
            target = target[key]
        node = target
    return node


def _expected(node, schema: dict) -> str | None:
    """A property's ``x-expected``: its own (beside a ``$ref``) or its target's."""
    if not isinstance(node, dict):
        return None
    return node.get("x-expected") or _resolve(node, schema).get("x-expected")


def _describe(error, schema: dict) -> str:
    node = error.schema if isinstance(error.schema, dict) else {}
    kind = error.validator
    if kind == "required" and isinstance(error.instance, dict):
        props = node.get("properties", {})
        missing = [k for k in error.validator_value if k not in error.instance]
        hints = [f"{k!r} ({_expected(props[k], schema)})" if _expected(props.get(k), schema) else repr(k)
                 for k in missing]
        return f"missing required key(s) {', '.join(hints)}"
    if kind == "additionalProperties" and isinstance(error.instance, dict) and "properties" in node:
        extra = sorted(str(k) for k in error.instance if k not in node["properties"])
        return f"unknown key(s) {', '.join(map(repr, extra))}; valid keys: {', '.join(node['properties'])}"
    expected = node.get("x-expected")
    if expected:
        return f"{_short(error.instance)} is not {expected}"
    if kind == "enum":
        return f"{_short(error.instance)} is not one of {', '.join(map(repr, error.validator_value))}"
    return error.message
