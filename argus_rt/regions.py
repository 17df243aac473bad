"""Region registry: qualified names -> stable 32-bit IDs, a parent/child tree, and a manifest.

A region is named by its qualified path (``"decode/layer/attention"``): the path of its
ancestors joined by ``/``. Its ID is a hash of that qualified name, so the same program version
always gets the same IDs, in every variant (trace-free, marker-only, traced, probe k), without a
central counter. Collisions are detected when a region is added and reported with both names.

A manifest (JSON) ships with a compiled program: it maps IDs back to names and records the tree.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .errors import ArgusInputError
from .fsutil import atomic_write_text, read_json_file

MANIFEST_VERSION = 1
# 0 is reserved: device buffers are zero-initialised, so a zero ID means "never written".
_RESERVED_IDS = frozenset({0, 0xFFFFFFFF})
_SEPARATOR = "/"


class RegionError(ArgusInputError):
    """Base class for region registry errors."""


class UnknownRegionError(RegionError, KeyError):
    """A region name or ID that is not in the tree."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class RegionIdCollisionError(RegionError):
    """Two different qualified names hash to the same 32-bit ID."""


def region_id(qualified_name: str) -> int:
    """Stable 32-bit ID of a qualified region name (blake2b, first 4 bytes, little endian).

    Never returns 0 or 0xFFFFFFFF (reserved); a name that hashes there is salted once.
    """
    _check_name(qualified_name)
    digest = hashlib.blake2b(qualified_name.encode("utf-8"), digest_size=4).digest()
    value = int.from_bytes(digest, "little")
    if value in _RESERVED_IDS:
        digest = hashlib.blake2b(b"argus-salt:" + qualified_name.encode("utf-8"), digest_size=4).digest()
        value = int.from_bytes(digest, "little")
    return value


def _check_name(qualified_name: str) -> None:
    if not isinstance(qualified_name, str) or not qualified_name:
        raise RegionError(f"region name must be a non-empty string, got {qualified_name!r}")
    parts = qualified_name.split(_SEPARATOR)
    for part in parts:
        if not part or set(part) <= {"."} or not all(c.isalnum() or c in "_-.:" for c in part):
            raise RegionError(
                f"bad region name {qualified_name!r}: each '/'-separated part must be non-empty and "
                "use only letters, digits, '_', '-', '.', ':' (and not be only dots)"
            )


@dataclass(frozen=True)
class Region:
    """One node of the region tree."""

    name: str  # qualified name, e.g. "decode/layer/attention"
    id: int  # stable 32-bit ID, region_id(name)
    parent: str | None  # qualified name of the parent, None for a root

    @property
    def leaf(self) -> str:
        """Last path component ("attention" for "decode/layer/attention")."""
        return self.name.rsplit(_SEPARATOR, 1)[-1]

    @property
    def depth(self) -> int:
        return self.name.count(_SEPARATOR)


class RegionTree:
    """Regions of one program, keyed by qualified name and by ID.

    Lookups accept a qualified name, a unique leaf name, or an integer ID; an unknown or
    ambiguous key raises :class:`UnknownRegionError` listing the valid names.
    """

    def __init__(self, program: str = "program") -> None:
        self.program = program
        self._by_name: dict[str, Region] = {}
        self._by_id: dict[int, Region] = {}
        self._frozen = False

    def freeze(self) -> None:
        """Refuse :meth:`add` from now on. A ProgramVersion freezes its tree: the regions are part of
        its content-derived id, which it computes once."""
        self._frozen = True

    @property
    def frozen(self) -> bool:
        return self._frozen

    # ---- building -------------------------------------------------------------------------
    def add(self, name: str, parent: str | None = None) -> Region:
        """Add a region. ``name`` is a leaf name under ``parent`` or a full qualified path.

        Missing ancestors of a qualified path are added too. Adding an existing region returns it.
        """
        qualified = f"{self[parent].name}{_SEPARATOR}{name}" if parent is not None else name
        _check_name(qualified)
        if qualified in self._by_name:
            return self._by_name[qualified]
        if self._frozen:
            raise RegionError(f"cannot add region {qualified!r} to the regions of program {self.program!r}: a program "
                              "version holds them and its id depends on them; build a new RegionTree and make a new "
                              "version (ProgramVersion.derive(..., regions=tree))")
        parent_name = None
        if _SEPARATOR in qualified:
            parent_name = qualified.rsplit(_SEPARATOR, 1)[0]
            if parent_name not in self._by_name:
                self.add(parent_name)
        rid = region_id(qualified)
        clash = self._by_id.get(rid)
        if clash is not None:
            raise RegionIdCollisionError(
                f"region ID collision: {qualified!r} and {clash.name!r} both hash to 0x{rid:08x}; "
                "rename one of them"
            )
        region = Region(qualified, rid, parent_name)
        self._by_name[qualified] = region
        self._by_id[rid] = region
        return region

    # ---- lookups --------------------------------------------------------------------------
    def __getitem__(self, key: str | int) -> Region:
        if isinstance(key, int):
            region = self._by_id.get(key)
            if region is None:
                raise UnknownRegionError(
                    f"unknown region ID 0x{key:08x} in program {self.program!r}; valid IDs: "
                    + ", ".join(f"0x{r.id:08x} ({r.name})" for r in self) or "none"
                )
            return region
        region = self._by_name.get(key)
        if region is not None:
            return region
        matches = [r for r in self if r.leaf == key]
        if len(matches) == 1:
            return matches[0]
        valid = ", ".join(sorted(self._by_name)) or "none (the tree is empty)"
        if matches:
            raise UnknownRegionError(
                f"region name {key!r} is ambiguous in program {self.program!r}: "
                f"{', '.join(r.name for r in matches)}; use the qualified name"
            )
        raise UnknownRegionError(f"unknown region {key!r} in program {self.program!r}; valid regions: {valid}")

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except (UnknownRegionError, RegionError):
            return False
        return True

    def __iter__(self) -> Iterator[Region]:
        return iter(sorted(self._by_name.values(), key=lambda r: r.name))

    def __len__(self) -> int:
        return len(self._by_name)

    @property
    def names(self) -> list[str]:
        return sorted(self._by_name)

    def children(self, key: str | int) -> list[Region]:
        name = self[key].name
        return [r for r in self if r.parent == name]

    def subtree(self, key: str | int) -> list[Region]:
        """The region and all its descendants, parents before children."""
        root = self[key]
        prefix = root.name + _SEPARATOR
        return [root] + [r for r in self if r.name.startswith(prefix)]

    def ancestors(self, key: str | int) -> list[Region]:
        """Parents of the region, nearest first."""
        out = []
        region = self[key]
        while region.parent is not None:
            region = self._by_name[region.parent]
            out.append(region)
        return out

    def roots(self) -> list[Region]:
        return [r for r in self if r.parent is None]

    # ---- manifest -------------------------------------------------------------------------
    def to_manifest(self) -> dict:
        return {
            "argus_manifest_version": MANIFEST_VERSION,
            "program": self.program,
            "regions": [{"name": r.name, "id": r.id, "parent": r.parent} for r in self],
        }

    @classmethod
    def from_manifest(cls, data: dict) -> "RegionTree":
        version = data.get("argus_manifest_version") if isinstance(data, dict) else None
        if version != MANIFEST_VERSION:
            raise RegionError(
                f"unsupported region manifest version {version!r}; this Argus reads version {MANIFEST_VERSION}"
            )
        entries = data.get("regions", [])
        if not isinstance(entries, list) or not all(
                isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("id"), int) for e in entries):
            raise RegionError("manifest 'regions' must be a list of {\"name\": qualified name, \"id\": int, "
                              f"\"parent\": name or null}}, got {str(entries)[:80]}")
        tree = cls(str(data.get("program", "program")))
        for entry in sorted(entries, key=lambda e: e["name"].count(_SEPARATOR)):
            region = tree.add(entry["name"])
            if region.id != entry["id"]:
                raise RegionError(
                    f"manifest ID 0x{entry['id']:08x} for {entry['name']!r} does not match its hash "
                    f"0x{region.id:08x}: the manifest was made by an incompatible Argus or edited by hand"
                )
        return tree

    def save(self, path: str | os.PathLike) -> None:
        """Write the manifest atomically (temporary file, then rename)."""
        atomic_write_text(Path(path), json.dumps(self.to_manifest(), indent=2, sort_keys=True))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "RegionTree":
        """Read a manifest file; a missing, unreadable or non-JSON file raises :class:`RegionError`."""
        data = read_json_file(Path(path), RegionError, "region manifest")
        try:
            return cls.from_manifest(data)
        except RegionError as exc:
            raise type(exc)(f"region manifest {path}: {exc}") from None

    def cuda_defines(self, prefix: str = "ARGUS_REGION_") -> str:
        """C preprocessor lines ``#define ARGUS_REGION_<LEAF> 0x...u`` for use in CUDA sources."""
        lines = []
        for r in self:
            macro = prefix + r.name.upper().replace("/", "_").replace("-", "_").replace(".", "_").replace(":", "_")
            lines.append(f"#define {macro} 0x{r.id:08x}u  /* {r.name} */")
        return "\n".join(lines) + "\n"

