"""The build cache every kind and the megakernel share: a declared spec -> content hash -> directory.

    spec = BuildSpec("megakernel", files=sources, generated={"params.h": text}, params={"flags": flags})
    entry = fetch_or_build(spec, outputs=("megakernel.cubin",), build=compile_into)
    entry.path("megakernel.cubin")

A :class:`BuildSpec` declares everything that decides a build's outputs: input files (hashed by name
and bytes), generated files (written into the entry before the build runs, hashed the same way) and
``params``, a JSON value with the flags, the compiler's version and anything else. Its
:meth:`~BuildSpec.key` is a SHA-256 over all of that, so an edited header, another flag or another
compiler is a new entry and a stale output is never used.

An entry is ``<root>/<namespace>/<key[:24]>/``, ``root`` being :func:`cache_dir` unless a caller
gives its own. It holds the outputs and ``spec.json`` (what was hashed). Publishing is atomic: the
build runs in a private staging directory beside the entry, which is renamed into place once every
output is there, so a reader sees either no entry or a whole one. Builders of one key are serialised
by a lock file (``.<key[:24]>.lock`` beside the entry): the second waits, then takes the first's
entry. Entries can be deleted whenever no build is running.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from .errors import ArgusInputError
from .fsutil import atomic_write_bytes, atomic_write_text

# Part of every key: raising it orphans every entry of an older layout (they stay until deleted).
CACHE_FORMAT = 2
KEY_CHARS = 24  # hex digits of the key in the directory name (96 bits)
SPEC_FILE = "spec.json"
_NAMESPACE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")
_FILE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,128}")


class BuildCacheError(ArgusInputError):
    """A build spec or a build's outputs are not what the cache can hold; the message names the value."""


def cache_dir() -> Path:
    """Argus's build cache: ``$ARGUS_CACHE_DIR``, else ``~/.cache/argus``."""
    env = os.environ.get("ARGUS_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "argus"


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass(frozen=True)
class BuildSpec:
    """What decides one build's outputs (see the module docstring).

    namespace: folder of its entries under the cache root, "/"-separated names ("megakernel",
               "cupy/softmax_traced"); letters, digits, ``_ . + -``.
    files:     input files, hashed by file name and bytes (callers that care where a file is put
               its path into ``params``).
    generated: {file name: text or bytes} written into the entry before the build runs.
    params:    any JSON value: flags, arch, compiler version, ...
    """

    namespace: str
    files: tuple[Path, ...] = ()
    generated: tuple[tuple[str, bytes], ...] = ()
    params: object = None

    def __init__(self, namespace: str, files: Iterable = (), generated: Mapping | None = None, params: object = None):
        object.__setattr__(self, "namespace", str(namespace))
        object.__setattr__(self, "files", tuple(Path(f) for f in files))
        items = sorted((str(k), v.encode("utf-8") if isinstance(v, str) else bytes(v))
                       for k, v in (generated or {}).items())
        object.__setattr__(self, "generated", tuple(items))
        object.__setattr__(self, "params", params)
        self._validate()

    def _validate(self) -> None:
        parts = self.namespace.split("/")
        bad = next((p for p in parts if not _NAMESPACE_PART.fullmatch(p)), None)
        if bad is not None:
            raise BuildCacheError(f"build-cache namespace {self.namespace!r}: part {bad!r} must use letters, digits, "
                                  "'_', '.', '+', '-', starting with a letter or digit")
        for name, _ in self.generated:
            if not _FILE_NAME.fullmatch(name) or name in (".", "..", SPEC_FILE):
                raise BuildCacheError(f"generated file name {name!r} of {self.namespace!r} must be a plain file name "
                                      f"(letters, digits, '_', '.', '+', '-'), not {SPEC_FILE!r}")
        missing = [str(f) for f in self.files if not f.is_file()]
        if missing:
            raise BuildCacheError(f"input file {missing[0]!r} of {self.namespace!r} does not exist")
        try:
            json.dumps(self.params, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise BuildCacheError(f"params of {self.namespace!r} are not JSON: {exc}") from None

    def manifest(self) -> dict:
        """What the key hashes (written to the entry's ``spec.json``)."""
        return {"format": CACHE_FORMAT, "namespace": self.namespace, "params": self.params,
                "files": [[f.name, file_digest(f)] for f in self.files],
                "generated": [[name, hashlib.sha256(data).hexdigest()] for name, data in self.generated]}

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.manifest(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """One published entry: its directory, full key, and whether it was there before this call."""

    dir: Path
    key: str
    cached: bool

    def path(self, name: str) -> Path:
        return self.dir / name


def entry_dir(spec: BuildSpec, key: str | None = None, root: str | os.PathLike | None = None) -> Path:
    return Path(root if root is not None else cache_dir()) / spec.namespace / (key or spec.key())[:KEY_CHARS]


def _complete(directory: Path, outputs: tuple[str, ...]) -> bool:
    return directory.is_dir() and all((directory / name).is_file() for name in outputs)


def fetch_or_build(spec: BuildSpec, outputs: Iterable[str], build: Callable[[Path], object], *,
                   root: str | os.PathLike | None = None, force: bool = False) -> CacheEntry:
    """The entry of ``spec``, built first unless it is there (``force``: rebuilt even so).

    ``build(staging)`` gets a fresh directory that already holds ``spec.generated`` and must write each
    of ``outputs`` (file names) into it; whatever it raises propagates, and nothing is published."""
    outputs = tuple(outputs)
    bad = [o for o in outputs if not _FILE_NAME.fullmatch(o) or o in (".", "..", SPEC_FILE)]
    if bad or not outputs:
        raise BuildCacheError(f"outputs {list(outputs)!r} of {spec.namespace!r}: give one or more plain file names, "
                              f"not {SPEC_FILE!r}")
    key = spec.key()
    final = entry_dir(spec, key, root)
    if not force and _complete(final, outputs):
        return CacheEntry(final, key, cached=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder of this key waits here, then reuses the entry
        if not force and _complete(final, outputs):
            return CacheEntry(final, key, cached=True)
        staging = final.parent / f".{final.name}.{secrets.token_hex(6)}.build"
        staging.mkdir()
        try:
            for name, data in spec.generated:
                atomic_write_bytes(staging / name, data)
            build(staging)
            missing = [o for o in outputs if not (staging / o).is_file()]
            if missing:
                raise BuildCacheError(f"the build of {spec.namespace!r} wrote no {missing[0]!r} "
                                      f"(expected outputs: {', '.join(outputs)})")
            atomic_write_text(staging / SPEC_FILE, json.dumps({**spec.manifest(), "key": key}, indent=2) + "\n")
            _publish(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone already once published
    return CacheEntry(final, key, cached=False)


def _publish(staging: Path, final: Path) -> None:
    """Rename ``staging`` to ``final``; an existing ``final`` (a forced rebuild, a damaged entry) is
    first renamed aside, so the name never points at a half-filled directory."""
    old = None
    if final.exists():
        old = final.parent / f".{final.name}.{secrets.token_hex(6)}.old"
        os.rename(final, old)
    os.rename(staging, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
