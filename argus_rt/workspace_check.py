"""Checking and repairing a workspace: what ``argus workspace verify`` and ``repair`` do.

verify: SQLite's full ``integrity_check``; every record decoded (program and task records must hash
to their ids, output rows must name a valid blob and inputs); every blob hashed (zip blobs and
those their writer declared JSON decoded too); outputs whose inputs are no longer their
dependencies' outputs are stale.

repair: an index that fails the integrity check is rebuilt from the rows that can still be read
(the damaged file is kept as ``index.sqlite.damaged-<time>``); then every broken record is dropped:
a task without intact outputs counts as never run, so the next query runs it again. Repair needs
the workspace to itself (no runtime using it), like ``clean``.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
import zipfile
from pathlib import Path

from .program import ProgramVersion
from .workspace import (
    _SCHEMA,
    _SHA,
    _TABLES,
    INDEX_FILE,
    SCHEMA_VERSION,
    Workspace,
    WorkspaceError,
    _task_record_problem,
)

_TASK_STATUSES = ("done", "failed")


# ---- verify ---------------------------------------------------------------------------------
def verify(ws: Workspace) -> list[str]:
    """Every consistency problem of ``ws`` as one line each (empty: consistent)."""
    problems: list[str] = []
    try:
        problems += [f"{INDEX_FILE}: {row[0]}" for row in ws._query("PRAGMA integrity_check") if row[0] != "ok"]
    except WorkspaceError as exc:
        return [str(exc)]
    for section in (_program_problems, _task_problems, _output_problems, _branch_problems, _blob_file_problems):
        try:
            problems += [text for _key, text in section(ws)]
        except WorkspaceError as exc:  # a table SQLite cannot read any more
            problems.append(str(exc))
    return problems


def _program_problems(ws: Workspace):
    for pid, text in ws._query("SELECT id, record FROM programs"):
        try:
            pv = ProgramVersion.from_dict(json.loads(text))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # ProgramError is a ValueError
            yield ("programs", pid), f"program {pid}: damaged record ({type(exc).__name__}: {str(exc)[:80]})"
            continue
        if pv.id != pid:
            yield ("programs", pid), f"program {pid}: record describes program {pv.id}"


def _task_problems(ws: Workspace):
    for tid, status, text, meta in ws._query("SELECT id, status, record, meta FROM tasks"):
        problem = _task_record_problem(tid, text) if isinstance(tid, str) else "invalid task id"
        if problem is None and status not in _TASK_STATUSES:
            problem = f"status {status!r} (valid: {', '.join(_TASK_STATUSES)})"
        if problem is None and meta is not None and not _is_json(meta):
            problem = f"damaged meta {str(meta)[:40]!r}"
        if problem is None and status == "done" and not ws._query(
                "SELECT 1 FROM outputs WHERE task_id=? LIMIT 1", (tid,)):
            problem = "done but has no outputs"
        if problem is not None:
            yield ("tasks", tid), f"{tid}: {problem}"


def _output_problems(ws: Workspace):
    done = {tid: _declared_json(meta) for tid, meta in ws._query("SELECT id, meta FROM tasks WHERE status='done'")}
    for tid, name, sha, size, inputs in ws._query("SELECT task_id, name, sha256, size, inputs FROM outputs"):
        if tid not in done:
            yield ("outputs", tid), f"{tid}/{name}: output of a task that is not recorded as done"
            continue
        problem = ws._output_problem(sha, size, inputs)
        if problem is None:
            problem = _decode_problem(ws.blob_path(sha), name in done[tid])
        if problem is not None:
            yield ("outputs", tid), f"{tid}/{name}: {problem}"


def _branch_problems(ws: Workspace):
    programs = {r[0] for r in ws._query("SELECT id FROM programs")}
    for name, pid in ws._query("SELECT name, program FROM branches"):
        if pid not in programs:
            yield ("branches", name), f"branch {name!r}: head {pid!r} is not a recorded program version"


def _blob_file_problems(ws: Workspace):
    """Files in blobs/ that are not the intact blob their name promises (referenced or not)."""
    for path in sorted(ws.blobs.rglob("*")) if ws.blobs.is_dir() else ():
        if path.is_dir() and not path.is_symlink() and path.parent == ws.blobs and len(path.name) == 2:
            continue  # a shard directory
        name = path.name
        if not _SHA.match(name) or path.parent != ws.blobs / name[:2]:
            yield ("blobfile", str(path)), f"blobs/{path.relative_to(ws.blobs)}: not a blob (foreign file)"
        elif path.is_symlink() or not path.is_file() or ws._blob_problem(name) is not None:
            yield ("blobfile", str(path)), f"blobs/{path.relative_to(ws.blobs)}: does not match its hash"


def _declared_json(meta) -> frozenset:
    """Output names a task's writer declared JSON (committed as ``*.json``; see Workspace.commit)."""
    try:
        names = json.loads(meta).get("json", ())
    except (TypeError, ValueError, AttributeError):  # no meta, or damaged (_task_problems reports it)
        return frozenset()
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()


def _decode_problem(path: Path, declared_json: bool) -> str | None:
    """Declared JSON blobs must parse and zip (.npz) blobs must pass zip's CRC check; others are bytes."""
    if declared_json:
        try:
            json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return f"blob {path.name[:12]} is not valid JSON ({exc})"
        return None
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as zf:
                bad = zf.testzip()
        except (zipfile.BadZipFile, OSError, RuntimeError, ValueError, EOFError) as exc:
            return f"blob {path.name[:12]} is not a readable zip archive ({exc})"
        if bad is not None:
            return f"blob {path.name[:12]}: zip member {bad!r} fails its CRC"
    return None


def _is_json(text) -> bool:
    try:
        json.loads(text)
    except (TypeError, ValueError):
        return False
    return True


# ---- repair ---------------------------------------------------------------------------------
def repair(root: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Repair the workspace at ``root``: (what was done, problems left afterwards)."""
    root = Path(root)
    done: list[str] = []
    index = root / INDEX_FILE
    if not index.is_file():
        raise WorkspaceError(f"no workspace at {root} (no {INDEX_FILE}); nothing to repair")
    if not _index_intact(index):
        done += _rebuild_index(index)
    with Workspace(root) as ws:
        done += _drop_broken(ws)
        left = verify(ws)
    return done, left


def _index_intact(index: Path) -> bool:
    try:
        db = sqlite3.connect(index, isolation_level=None)
        try:
            rows = db.execute("PRAGMA integrity_check").fetchall()
            have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            for table in set(_TABLES) & have:  # a flipped byte inside a TEXT value passes the check
                db.execute(f"SELECT * FROM {table}").fetchall()
        finally:
            db.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        return False
    return rows == [("ok",)] and set(_TABLES) <= have


def _rebuild_index(index: Path) -> list[str]:
    """Copy every readable row into a fresh index file and put it in place of the damaged one."""
    fresh = index.with_name(f"{INDEX_FILE}.rebuild-{os.getpid()}")
    fresh.unlink(missing_ok=True)
    new = sqlite3.connect(fresh, isolation_level=None)
    new.executescript(_SCHEMA)
    kept, lost = {}, {}
    try:
        old = sqlite3.connect(index, isolation_level=None)
        old.execute("SELECT name FROM sqlite_master").fetchall()
    except sqlite3.DatabaseError:  # not even the schema is readable: nothing to copy
        old = None
    try:
        for table in _TABLES:
            kept[table], lost[table] = _copy_rows(old, new, table)
        new.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    finally:
        new.close()
        if old is not None:
            old.close()
    damaged = index.with_name(f"{INDEX_FILE}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
    os.replace(index, damaged)
    for suffix in ("-wal", "-shm"):  # they belong to the damaged file
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    os.replace(fresh, index)
    counts = ", ".join(f"{t} {kept[t]} kept / {lost[t]} unreadable" for t in _TABLES)
    return [f"{INDEX_FILE} failed SQLite's integrity check: rebuilt from its readable rows ({counts}); "
            f"the damaged file is {damaged.name}"]


def _copy_rows(old, new, table: str) -> tuple[int, int]:
    """Copy the readable rows of one table row by row (one damaged row or page costs only itself)."""
    if old is None:
        return 0, 0
    rowids: list[int] = []
    try:
        for (rowid,) in old.execute(f"SELECT rowid FROM {table} NOT INDEXED"):
            rowids.append(rowid)
    except sqlite3.DatabaseError:  # a damaged page ends the scan: probe the rowids after it one by one
        try:
            top = old.execute(f"SELECT max(rowid) FROM {table} NOT INDEXED").fetchone()[0] or 0
        except sqlite3.DatabaseError:
            top = len(rowids) + (1 << 16)  # rows are numbered from 1 in insertion order
        rowids += range(max(rowids, default=0) + 1, top + 1)
    kept = lost = 0
    for rowid in rowids:
        try:
            row = old.execute(f"SELECT * FROM {table} NOT INDEXED WHERE rowid=?", (rowid,)).fetchone()
        except (sqlite3.DatabaseError, UnicodeDecodeError):
            lost += 1
            continue
        if row is None:
            continue
        try:
            new.execute(f"INSERT OR IGNORE INTO {table} VALUES ({','.join('?' * len(row))})", row)
            kept += 1
        except sqlite3.DatabaseError:  # a NOT NULL or type damage
            lost += 1
    return kept, lost


def _drop_broken(ws: Workspace) -> list[str]:
    """Delete every record verify objects to; a task left without intact outputs will run again."""
    done = []
    broken = {"programs": set(), "tasks": set(), "outputs": set(), "branches": set(), "blobfile": set()}
    texts = []
    for section in (_program_problems, _task_problems, _output_problems, _branch_problems, _blob_file_problems):
        for (table, key), text in section(ws):
            broken[table].add(key)
            texts.append(text)
    with ws._tx() as db:
        for pid in broken["programs"]:
            db.execute("DELETE FROM programs WHERE id=?", (pid,))
        for tid in broken["tasks"] | broken["outputs"]:  # a task is done only with all its outputs
            db.execute("DELETE FROM outputs WHERE task_id=?", (tid,))
            db.execute("DELETE FROM tasks WHERE id=?", (tid,))
        for name in broken["branches"]:
            db.execute("DELETE FROM branches WHERE name=?", (name,))
        db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    for path in map(Path, broken["blobfile"]):  # damaged or foreign; a rerun writes the blob again
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    done += [f"dropped: {text}" for text in texts]
    return done
