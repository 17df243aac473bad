"""Atomic file writes: a reader never sees a half-written file.

Files are created with mode 0666 minus the process umask (0644 under the usual umask 022), as
``open()`` would create them: reports, traces and cubins are meant to be read by other users and
tools. (``tempfile.mkstemp`` would make them 0600.)
"""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

_NEW_FILE_MODE = 0o666  # the kernel subtracts the umask
_TEMP_ATTEMPTS = 100


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _create_temp(directory: Path, name: str) -> tuple[int, Path]:
    """A new, exclusively created temporary file beside the target (O_EXCL: never an existing one)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TEMP_ATTEMPTS):
        tmp = directory / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, _NEW_FILE_MODE), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file for {name!r} in {directory}")


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename; ``durable``: fsync
    it before the rename (False where a later step decides durability, e.g. a workspace commit's own fsync)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json_file(path: Path, error: type[Exception], what: str):
    """The JSON document in ``path``, or ``error`` with one line naming ``path`` (prefixed ``what``, e.g.
    "region manifest") and why: missing, unreadable, or not JSON (with the line and column)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read the {what} ({getattr(exc, 'strerror', None) or exc})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{path}: {what} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
