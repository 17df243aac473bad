"""Raw trace files: the device buffer bytes plus the armed configuration, as one ``.npz``.

The file holds two arrays: ``buffer`` (1-D ``uint8``, the rings as the device wrote them) and
``meta`` (a 0-d string array of JSON: ``{"layout_version", "config", "unbuffered"}``). It is read
with ``allow_pickle=False``; anything else (an empty, truncated or foreign file, damaged bytes, a
``meta`` without ``config``) raises a :class:`TraceError` that names the file and what is wrong.
Member sizes are checked before anything is allocated: each array's ``.npy`` header must declare
exactly the bytes its zip member holds, and the member no more than the file on disk can hold.
"""
from __future__ import annotations

import io
import json
import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..fsutil import atomic_write_bytes
from . import layout
from .config import TraceConfig
from .decode import Trace, decode
from .errors import TraceError

_WRITER = "TraceSession.save / argus_rt.trace.save_raw"
# Largest member accepted: 16 GiB of rings (64 MiB per ring x 256 rings) and 1 MiB of meta JSON.
_MEMBER_LIMITS = {"buffer.npy": 1 << 34, "meta.npy": 1 << 20}
_MAX_DEFLATE_RATIO = 1032  # deflate cannot compress better than this


def save_raw(path: str | os.PathLike, buffer: np.ndarray, config: TraceConfig, unbuffered: int | None = None) -> Path:
    """Write a raw trace (buffer bytes + config JSON) as an .npz file, atomically."""
    meta = {"layout_version": layout.LAYOUT_VERSION, "config": config.to_json(), "unbuffered": unbuffered}
    bio = io.BytesIO()
    np.savez(bio, buffer=np.asarray(buffer, dtype=np.uint8).reshape(-1), meta=np.array(json.dumps(meta)))
    path = Path(path)
    atomic_write_bytes(path, bio.getvalue())
    return path


def load_raw(path: str | os.PathLike, known_ids=None) -> Trace:
    """Decode a trace saved by :func:`save_raw` / :meth:`TraceSession.save`.

    Raises :class:`TraceError` (or a subclass) whose message starts with ``path``.
    """
    path = Path(path)
    buffer, meta = _read_arrays(path)
    config = _config_of(path, meta)
    unbuffered = meta.get("unbuffered")
    if unbuffered is not None and (isinstance(unbuffered, bool) or not isinstance(unbuffered, int) or unbuffered < 0):
        raise TraceError(f"{path}: meta 'unbuffered' must be a count >= 0 or null, got {unbuffered!r}")
    try:
        return decode(buffer, config, known_ids=known_ids, unbuffered=unbuffered)
    except TraceError as exc:
        raise type(exc)(f"{path}: {exc}") from None


def _read_arrays(path: Path) -> tuple[np.ndarray, dict]:
    """(buffer, meta dict) of a raw trace file, every failure as a TraceError naming ``path``."""
    if path.is_dir():
        raise TraceError(f"{path} is a directory; give the .npz file that {_WRITER} wrote")
    if not path.is_file():
        raise TraceError(f"{path}: no such file; give the .npz file that {_WRITER} wrote")
    # np.load falls back to .npy and pickle for non-zip input; an Argus trace is always a zip.
    if not zipfile.is_zipfile(path):
        raise TraceError(f"{path} is not an .npz archive ({path.stat().st_size} bytes, no complete zip "
                         f"directory: empty, truncated or another format); expected the file {_WRITER} wrote")
    try:
        _check_members(path)
        with np.load(path, allow_pickle=False) as data:
            names = list(data)
            if "buffer" not in names or "meta" not in names:
                raise TraceError(f"{path}: not an Argus raw trace (needs arrays 'buffer' and 'meta', has {names})")
            buffer, meta_array = data["buffer"], data["meta"]
    except TraceError:
        raise
    # RuntimeError: zipfile's NotImplementedError (unknown compression) and "encrypted" errors
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError, RuntimeError, struct.error,
            zlib.error) as exc:
        raise TraceError(f"{path}: damaged .npz archive ({type(exc).__name__}: {exc})") from None
    if buffer.dtype != np.uint8 or buffer.ndim != 1:
        raise TraceError(f"{path}: array 'buffer' must be 1-D uint8 (the raw rings), got {buffer.dtype} "
                         f"with shape {buffer.shape}")
    if meta_array.dtype.kind != "U" or meta_array.ndim != 0:
        raise TraceError(f"{path}: array 'meta' must be one JSON string, got {meta_array.dtype} with shape "
                         f"{meta_array.shape}")
    try:
        meta = json.loads(str(meta_array))
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: array 'meta' is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise TraceError(f"{path}: 'meta' must be a JSON object with layout_version, config, unbuffered; "
                         f"got {type(meta).__name__}")
    return buffer, meta


def _check_members(path: Path) -> None:
    """Refuse members whose declared sizes are not what they hold (np.load would allocate them)."""
    on_disk = path.stat().st_size
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            limit = _MEMBER_LIMITS.get(info.filename)
            if limit is None:
                continue  # np.load never reads a member nobody asks for
            name = info.filename[:-4]
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise TraceError(f"{path}: array {name!r} uses zip compression {info.compress_type} (valid: stored "
                                 "or deflated)")
            ratio = 1 if info.compress_type == zipfile.ZIP_STORED else _MAX_DEFLATE_RATIO
            if info.file_size > limit or info.compress_size > on_disk or info.file_size > info.compress_size * ratio:
                raise TraceError(f"{path}: array {name!r} declares {info.file_size} bytes ({info.compress_size} "
                                 f"stored, file {on_disk} bytes, limit {limit}): damaged or not an Argus raw trace")
            with zf.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                if version not in ((1, 0), (2, 0)):
                    raise TraceError(f"{path}: array {name!r} has .npy format version {version} (valid: 1.0, 2.0)")
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, _fortran, dtype = read(fh)
                header = fh.tell()
            if dtype.hasobject:
                raise TraceError(f"{path}: array {name!r} holds Python objects ({dtype}); raw traces hold numbers")
            declared = dtype.itemsize * int(np.prod(shape, dtype=object))
            if header + declared != info.file_size:
                raise TraceError(f"{path}: array {name!r} declares shape {shape} of {dtype} ({declared} bytes) but "
                                 f"holds {info.file_size - header} bytes: damaged")


def _config_of(path: Path, meta: dict) -> TraceConfig:
    if meta.get("layout_version") != layout.LAYOUT_VERSION:
        raise TraceError(f"{path}: layout version {meta.get('layout_version')!r}; this Argus reads "
                         f"{layout.LAYOUT_VERSION}")
    config = meta.get("config")
    if not isinstance(config, dict):
        what = "has no 'config'" if config is None else f"'config' is {type(config).__name__}, not an object"
        raise TraceError(f"{path}: meta {what}; a raw trace records the armed TraceConfig (keys ctas, "
                         "threads_per_cta, capacity, clock, ...)")
    try:
        return TraceConfig.from_json(config)
    except TraceError as exc:
        raise type(exc)(f"{path}: config: {exc}") from None
    except (TypeError, ValueError) as exc:  # a missing or mistyped field reaches the constructor
        raise TraceError(f"{path}: config {config!r} is not a TraceConfig: {exc}") from None
