"""Versioned workspace: content-addressed blobs plus a SQLite index (WAL) in one directory.

Layout::

    <root>/index.sqlite      programs, tasks, outputs, branches (the only thing readers trust)
    <root>/blobs/ab/<sha256> immutable output files, named by the SHA-256 of their bytes
    <root>/staging/<task id>.<random>/   where a running task writes; invisible to readers

Every output is bound to the task that produced it (``task_id``, whose content hash covers the
program version, region, scope, configuration and dependency ids) and to the exact input versions
it read (the blob hashes of its dependencies' outputs, stored per output). A task counts as done
only when its row and all its output rows are committed in one SQLite transaction, after the blobs
are in place (rename); a worker killed mid-write leaves only a staging directory, which
:meth:`Workspace.clean_staging` removes. Durability against power loss needs ``durable=True``
(fsync files and directories); against killed processes it is not needed.

Blobs are checked against their hash whenever they are reused or read (:meth:`Workspace.outputs`,
:meth:`OutputRecord.read_bytes`): a damaged or missing blob, or an output whose recorded inputs are
no longer its dependencies' outputs, makes the task count as absent, so the runtime runs it again and
:meth:`Workspace.commit` rewrites the blob. :meth:`Workspace.verify` lists every problem,
:meth:`Workspace.repair` drops what is broken. A full disk raises one :class:`WorkspaceError`.

Names from users (region names, branch names, signal names) are stored as data only: every path
in the workspace is built from hex hashes and validated task ids, never from user strings.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sqlite3
import stat
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .errors import ArgusInputError
from .program import ProgramVersion, check_joinable

SCHEMA_VERSION = 1
_TASK_ID = re.compile(r"^[tcsx]-[0-9a-f]{20}$")
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_SHA = re.compile(r"^[0-9a-f]{64}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS programs (
    id TEXT PRIMARY KEY, base TEXT NOT NULL, parent TEXT, name TEXT NOT NULL, variant TEXT NOT NULL,
    record TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, op TEXT NOT NULL, program TEXT NOT NULL,
    status TEXT NOT NULL, error TEXT, attempts INTEGER NOT NULL DEFAULT 0, record TEXT NOT NULL,
    meta TEXT, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS outputs (
    task_id TEXT NOT NULL, name TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
    program TEXT NOT NULL, inputs TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (task_id, name));
CREATE TABLE IF NOT EXISTS branches (
    name TEXT PRIMARY KEY, program TEXT NOT NULL, forked_from TEXT, created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS outputs_sha ON outputs (sha256);
"""


class WorkspaceError(ArgusInputError, RuntimeError):  # RuntimeError: what it was before
    """A workspace that is missing, damaged, of another schema version, or asked for something it lacks."""


INDEX_FILE = "index.sqlite"
_TABLES = ("meta", "programs", "tasks", "outputs", "branches")


# SQLite result codes (primary, the low byte of sqlite_errorcode) that mean "no room to write".
_SQLITE_FULL = 13
# extended codes of writes the OS refused (EFBIG/ENOSPC): a data write, growing the file, its shm map
_SQLITE_IOERR_NO_ROOM = {778: "SQLITE_IOERR_WRITE", 1546: "SQLITE_IOERR_TRUNCATE", 4874: "SQLITE_IOERR_SHMSIZE"}
_NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def is_out_of_space(exc: BaseException) -> bool:
    """A write that failed for want of disk space (or a file size limit), from SQLite or the OS."""
    if isinstance(exc, OSError):
        return exc.errno in _NO_SPACE_ERRNOS
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", 0)
        return code & 0xFF == _SQLITE_FULL or code in _SQLITE_IOERR_NO_ROOM or "disk is full" in str(exc)
    return False


def _is_damage(exc: BaseException) -> bool:
    """SQLite errors that mean an unreadable or locked index, not a bug in the SQL we send."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(
        exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError))


@dataclass(frozen=True)
class OutputRecord:
    task_id: str
    name: str
    sha256: str
    size: int  # bytes
    path: Path
    program: str
    inputs: tuple  # ((dep task id, output name, sha256), ...)

    def read_bytes(self) -> bytes:
        """The blob's bytes, checked against its hash (WorkspaceError when it was damaged or removed)."""
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise WorkspaceError(f"output {self.task_id}/{self.name}: blob {self.path} cannot be read "
                                 f"({exc.strerror or exc}); rerun the query to produce it again") from None
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise WorkspaceError(f"output {self.task_id}/{self.name}: blob {self.path} does not match its hash "
                                 "(changed after it was written); rerun the query to produce it again")
        return data

    def read_json(self):
        return json.loads(self.read_bytes().decode("utf-8"))


def _check_task_id(task_id: str) -> str:
    if not isinstance(task_id, str) or not _TASK_ID.match(task_id):
        raise WorkspaceError(f"invalid task id {task_id!r} (expected a planner id like 'c-<20 hex>')")
    return task_id


def file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return _sha256_of(fh)


def _sha256_of(fh) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def _sha256_fd(fd: int) -> str:
    """SHA-256 of what is left to read from the descriptor ``fd``."""
    h = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        h.update(chunk)
    return h.hexdigest()


def _stat_key(st: os.stat_result) -> tuple:
    """What identifies one version of a blob file: any write to it changes its ctime."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Workspace:
    """An embedded versioned store. Thread-safe for one process; several processes may share it
    (SQLite WAL with a busy timeout)."""

    def __init__(self, root: str | os.PathLike, *, durable: bool = False, create: bool = True) -> None:
        """Open the workspace directory ``root``; ``create=False`` (see :meth:`open_existing`) never
        creates or initialises anything and raises :class:`WorkspaceError` when there is none."""
        self.root = Path(root)
        self.durable = durable
        self.index = self.root / INDEX_FILE
        self.blobs = self.root / "blobs"
        self.staging = self.root / "staging"
        if self.root.exists() and not self.root.is_dir():
            raise WorkspaceError(f"workspace path {self.root} is a file, not a directory; give a workspace "
                                 "directory (a new one is created where none exists)")
        if not create and not self.index.is_file():
            raise WorkspaceError(f"no workspace at {self.root} (no {INDEX_FILE}); a command that records "
                                 "results (argus query) creates one")
        if create:
            try:
                for d in (self.root, self.blobs, self.staging):
                    d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WorkspaceError(f"cannot create workspace directory {self.root}: {exc.strerror or exc}") from None
        self._staging_prefix = os.path.abspath(self.staging) + os.sep
        self._blobs_dir = os.path.join(self.blobs, "")  # blob paths as strings: see _blob_file
        self._shards: set[str] = set()  # blob shard directories known to exist
        self._verified: dict[str, tuple] = {}  # sha -> stat key of the blob file when it last hashed right
        self._lock = threading.RLock()
        self._db = None
        try:
            self._db = sqlite3.connect(self.index, timeout=30.0, check_same_thread=False, isolation_level=None)
            self._open_index(create)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            self._close_quietly()
            raise self._index_error(exc) from None
        except WorkspaceError:
            self._close_quietly()
            raise

    @classmethod
    def open_existing(cls, root: str | os.PathLike, *, durable: bool = False) -> "Workspace":
        """The workspace at ``root``, read as it is: nothing is created (for read-only commands).
        Raises :class:`WorkspaceError` "no workspace at ROOT" when there is none."""
        return cls(root, durable=durable, create=False)

    def _open_index(self, create: bool) -> None:
        db = self._db
        if not create:  # check before anything could write to a file that is not ours
            have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            missing = [t for t in _TABLES if t not in have]
            if missing:
                raise WorkspaceError(f"{self.index} is not an Argus workspace index: it lacks table(s) "
                                     f"{', '.join(missing)}")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'NORMAL'}")
        if create:
            db.executescript(_SCHEMA)
        row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None and create:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif row is None or row[0] != str(SCHEMA_VERSION):
            raise WorkspaceError(f"workspace {self.root} has schema {row[0] if row else 'none'}, this Argus "
                                 f"reads {SCHEMA_VERSION}")

    def _index_error(self, exc: BaseException) -> WorkspaceError:
        if is_out_of_space(exc):
            return self._space_error(exc)
        return WorkspaceError(f"cannot read workspace index {self.index}: {exc} (damaged or not an SQLite "
                              "file; `argus workspace repair` keeps what is readable, or move it away to start "
                              "a new workspace there)")

    def _space_error(self, exc: BaseException) -> WorkspaceError:
        what = getattr(exc, "sqlite_errorname", None) or getattr(exc, "strerror", None) or str(exc)
        return WorkspaceError(f"workspace {self.root}: no space left to write ({what}: the disk is full or a file "
                              "size limit was reached); tasks finished before it stay recorded: free space or "
                              "give another --workspace, then rerun")

    def _close_quietly(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass

    # ---- plumbing -------------------------------------------------------------------------
    class _Tx:
        def __init__(self, ws: "Workspace") -> None:
            self.ws = ws

        def __enter__(self):
            self.ws._lock.acquire()
            try:
                self.ws._db.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                self.ws._lock.release()
                if _is_damage(exc):
                    raise self.ws._index_error(exc) from None
                raise
            return self.ws._db

        def __exit__(self, exc_type, exc, tb):
            try:
                self.ws._db.execute("ROLLBACK" if exc_type else "COMMIT")
            except sqlite3.DatabaseError as end_exc:
                if exc is None and _is_damage(end_exc):
                    raise self.ws._index_error(end_exc) from None
                if exc is None:
                    raise
            finally:
                self.ws._lock.release()
            if _is_damage(exc):
                raise self.ws._index_error(exc) from None
            return False

    def _tx(self) -> "_Tx":
        return Workspace._Tx(self)

    def _query(self, sql: str, args: tuple = ()) -> list:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # bytes flipped inside a TEXT value
                if isinstance(exc, UnicodeDecodeError) or _is_damage(exc):
                    raise self._index_error(exc) from None
                raise

    def _record(self, text, what: str) -> dict:
        """A JSON record column, or WorkspaceError when the index holds something else there."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            data = None
        if not isinstance(data, (dict, list)):
            raise WorkspaceError(f"workspace index {self.index}: the record of {what} is damaged "
                                 f"(not JSON: {str(text)[:60]!r})")
        return data

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def blob_path(self, sha: str) -> Path:
        return Path(self._blob_file(sha))

    # ---- programs -------------------------------------------------------------------------
    def put_program(self, pv: ProgramVersion | dict) -> str:
        pv = pv if isinstance(pv, ProgramVersion) else ProgramVersion.from_dict(pv)
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO programs VALUES (?,?,?,?,?,?,?)",
                       (pv.id, pv.base_id, pv.parent, pv.name, pv.variant,
                        json.dumps(pv.to_dict(), sort_keys=True), time.time()))
        return pv.id

    def get_program(self, pid: str) -> ProgramVersion:
        rows = self._query("SELECT record FROM programs WHERE id=?", (pid,))
        if not rows:
            raise WorkspaceError(f"unknown program version {pid!r} in workspace {self.root}")
        record = self._record(rows[0][0], f"program {pid}")
        try:
            return ProgramVersion.from_dict(record)
        except (KeyError, TypeError, ValueError) as exc:  # ProgramError is a ValueError
            raise WorkspaceError(f"workspace index {self.index}: the record of program {pid} is damaged "
                                 f"({type(exc).__name__}: {exc})") from None

    def programs(self) -> list[dict]:
        rows = self._query("SELECT id, base, parent, name, variant, created FROM programs ORDER BY created")
        return [dict(zip(("id", "base", "parent", "name", "variant", "created"), r)) for r in rows]

    def check_joinable(self, program_ids: list[str]) -> None:
        """Raise ``IncompatibleVersionsError`` unless the versions share one base."""
        check_joinable([self.get_program(pid) for pid in program_ids])

    # ---- forks ----------------------------------------------------------------------------
    def fork(self, program_id: str, branch: str) -> None:
        """Start (or move) ``branch`` at an earlier program version; later versions derive from it."""
        if not isinstance(branch, str) or not _BRANCH.match(branch):
            raise WorkspaceError(f"invalid branch name {branch!r}: letters, digits, '_', '.', '-', max 64")
        self.get_program(program_id)  # must exist
        old = self._query("SELECT program FROM branches WHERE name=?", (branch,))
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO branches VALUES (?,?,?,?)",
                       (branch, program_id, old[0][0] if old else None, time.time()))

    def advance(self, branch: str, program: ProgramVersion) -> str:
        """Record ``program`` (derived from the branch head) as the branch's new head."""
        head = self.branch_head(branch)
        if program.parent != head:
            raise WorkspaceError(f"{program.id} was not derived from branch {branch!r} head {head}")
        self.put_program(program)
        with self._tx() as db:
            db.execute("UPDATE branches SET program=? WHERE name=?", (program.id, branch))
        return program.id

    def branch_head(self, branch: str) -> str:
        rows = self._query("SELECT program FROM branches WHERE name=?", (branch,))
        if not rows:
            names = [r[0] for r in self._query("SELECT name FROM branches ORDER BY name")]
            raise WorkspaceError(f"unknown branch {branch!r}; branches: {', '.join(names) or 'none'}")
        return rows[0][0]

    def branches(self) -> dict[str, str]:
        return dict(self._query("SELECT name, program FROM branches ORDER BY name"))

    # ---- task outputs ---------------------------------------------------------------------
    def new_staging(self, task_id: str, *, create: bool = True) -> Path:
        """A fresh private directory for one attempt of ``task_id`` (``create=False``: the executing
        thread or worker creates it, keeping directory syscalls off the scheduler's path)."""
        path = self.staging / f"{_check_task_id(task_id)}.{uuid.uuid4().hex[:12]}"
        if create:
            path.mkdir()
        return path

    def outputs(self, task_id: str) -> dict[str, OutputRecord] | None:
        """The committed outputs of a done task, or ``None`` when it has not completed here.

        Also ``None`` (the task counts as absent, so it runs again) when any of its blobs is missing or
        does not match its hash, when its output rows are damaged, or when an input it read is no
        longer what its dependency holds (the dependency was produced again with other bytes)."""
        _check_task_id(task_id)
        status = self._query("SELECT status, record FROM tasks WHERE id=?", (task_id,))
        if not status or status[0][0] != "done" or _task_record_problem(task_id, status[0][1]) is not None:
            return None
        rows = self._query("SELECT name, sha256, size, program, inputs FROM outputs WHERE task_id=?", (task_id,))
        out, checked = {}, set()  # commit gives every output of a task the same inputs: check them once
        for name, sha, size, prog, inputs in rows:
            problem = self._output_problem(sha, size, inputs, check_inputs=inputs not in checked)
            if problem is not None:
                return None
            checked.add(inputs)
            out[name] = OutputRecord(task_id, name, sha, size, self.blob_path(sha), prog,
                                     tuple(tuple(i) for i in json.loads(inputs)))
        return out

    def _output_problem(self, sha, size, inputs_text, check_inputs: bool = True) -> str | None:
        """Why one output row cannot be used (None: it can): bad row values, a bad blob, stale inputs
        (``check_inputs=False``: the caller already checked these inputs)."""
        if not isinstance(sha, str) or not _SHA.match(sha):
            return f"invalid blob hash {sha!r} in the index"
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return f"invalid size {size!r} in the index"
        try:
            inputs = json.loads(inputs_text)
        except (TypeError, ValueError):
            inputs = None
        if not isinstance(inputs, list) or not all(
                isinstance(i, list) and len(i) == 3 and all(isinstance(x, str) for x in i) for i in inputs):
            return f"damaged inputs record {str(inputs_text)[:60]!r}"
        blob = self._blob_problem(sha, size)
        if blob is not None:
            return blob
        for dep, dep_name, dep_sha in inputs if check_inputs else ():
            now = self._query("SELECT sha256 FROM outputs WHERE task_id=? AND name=?", (dep, dep_name))
            if now and now[0][0] != dep_sha:
                return f"stale: it read {dep}/{dep_name} {dep_sha[:12]}, which is now {str(now[0][0])[:12]}"
        return None

    def _blob_problem(self, sha: str, size: int | None = None) -> str | None:
        """None when the blob of ``sha`` exists and hashes to ``sha``; else what is wrong.

        A blob already hashed by this process is trusted while its inode, size, mtime and ctime are
        unchanged (any write to the file changes its ctime, which no user call can set back)."""
        path = self._blob_file(sha)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return f"blob {sha[:12]} missing"
        except OSError as exc:
            return f"blob {sha[:12]} unreadable ({exc.strerror or exc})"
        if not stat.S_ISREG(st.st_mode):
            return f"blob {sha[:12]} is not a file"
        if size is not None and st.st_size != size:
            return f"blob {sha[:12]} does not match its hash (size {st.st_size}, recorded {size})"
        key = _stat_key(st)
        if self._verified.get(sha) == key:
            return None
        try:
            actual = file_sha256(path)
        except OSError as exc:
            return f"blob {sha[:12]} unreadable ({exc.strerror or exc})"
        if actual != sha:
            self._verified.pop(sha, None)
            return f"blob {sha[:12]} does not match its hash"
        self._verified[sha] = key
        return None

    def _blob_file(self, sha: str) -> str:
        """:meth:`blob_path` as a string, without building a Path (the commit path makes many)."""
        if not isinstance(sha, str) or not _SHA.match(sha):
            raise WorkspaceError(f"invalid blob hash {sha!r}")
        return f"{self._blobs_dir}{sha[:2]}{os.sep}{sha}"

    def commit(self, task, files: dict[str, Path], inputs: list[tuple[str, str, str]],
               meta: dict | None = None) -> dict[str, OutputRecord]:
        """Move ``files`` (under a staging dir) into blobs and record them atomically as ``task``'s outputs.

        ``inputs``: the exact (dep task id, output name, sha256) the task read. A blob already in place
        is kept only when it matches its hash; a damaged one is replaced by the new, checked bytes.
        With ``durable=True`` every staged file is fsynced before its rename and every blob directory
        that received one is fsynced once, all before the index transaction that records them.
        Raises :class:`WorkspaceError` when the disk is full (nothing of this task is recorded then).
        """
        _check_task_id(task.id)
        checked: set[str] = set()  # staging directories of this commit found not to be symlinks
        renamed_into: set[str] = set()  # blob directories that got a new entry (durable: fsync each once)
        try:
            placed = {name: self._place_blob(task, name, path, checked, renamed_into)
                      for name, path in sorted(files.items())}
            for directory in sorted(renamed_into) if self.durable else ():
                _fsync_dir(directory)
        except OSError as exc:
            if is_out_of_space(exc):
                raise self._space_error(exc) from None
            raise
        now = time.time()
        recorded = tuple(sorted(tuple(i) for i in inputs))
        inputs_json = json.dumps(recorded)  # tuples encode as JSON lists, as outputs() decodes them
        declared_json = sorted(n for n, path in files.items() if os.fspath(path).endswith(".json"))
        if declared_json:  # what verify decodes as JSON: only what its writer named *.json
            meta = {**(meta or {}), "json": declared_json}
        with self._tx() as db:
            db.execute("DELETE FROM outputs WHERE task_id=?", (task.id,))
            db.executemany("INSERT INTO outputs VALUES (?,?,?,?,?,?,?)",
                           [(task.id, n, sha, size, task.program, inputs_json, now)
                            for n, (sha, size, _) in placed.items()])
            db.execute("INSERT INTO tasks (id, kind, op, program, status, error, attempts, record, meta, updated) "
                       "VALUES (?,?,?,?,'done',NULL,1,?,?,?) ON CONFLICT(id) DO UPDATE SET status='done', "
                       "error=NULL, attempts=attempts+1, record=excluded.record, meta=excluded.meta, "
                       "updated=excluded.updated",
                       (task.id, task.kind, task.op, task.program, json.dumps(task.to_dict(), sort_keys=True),
                        json.dumps(meta or {}, sort_keys=True), now))
        # what was just written, even if a concurrent writer replaced an input meanwhile
        return {n: OutputRecord(task.id, n, sha, size, Path(target), task.program, recorded)
                for n, (sha, size, target) in placed.items()}

    def _place_blob(self, task, name: str, path, checked: set[str], renamed_into: set[str]) -> tuple[str, int, str]:
        """Move one staged file to its blob path (unless an intact copy is there); (sha256, bytes, blob path).

        ``checked``: staging directories already found to be real directories in this commit;
        ``renamed_into``: gets the blob directory when a file was renamed into it."""
        path = os.fspath(path)
        full = os.path.abspath(path)
        # string checks (no syscalls); a symlink would smuggle in foreign bytes
        if not full.startswith(self._staging_prefix) or ".." in path.split(os.sep):
            raise WorkspaceError(f"task {task.id} output {name!r} at {path} is not a file under the staging area")
        symlink = self._symlinked_dir(full, checked)
        if symlink is not None:
            raise WorkspaceError(f"task {task.id} output {name!r}: {symlink} is a symbolic link; outputs must be "
                                 "regular files written under the staging directory")
        try:  # O_NOFOLLOW: the file itself must not be a link; O_NONBLOCK: a FIFO must not block the open
            fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise WorkspaceError(f"task {task.id} output {name!r}: {path} is a symbolic link; outputs must be "
                                     "regular files written under the staging directory") from None
            raise WorkspaceError(f"task {task.id} output {name!r} at {path} is not a regular file") from None
        try:  # one open for the type, size, fsync, hash and the verified-blob key
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise WorkspaceError(f"task {task.id} output {name!r} at {path} is not a regular file")
            if self.durable:
                os.fsync(fd)
            sha = _sha256_fd(fd)
            size = st.st_size
            target = self._blob_file(sha)
            if self._blob_problem(sha, size) is None:
                return sha, size, target  # identical content is already there, intact
            shard = sha[:2]
            if shard not in self._shards:
                try:
                    os.mkdir(os.path.dirname(target))
                except FileExistsError:
                    pass  # made by an earlier run or another writer (a file there fails the rename below)
                self._shards.add(shard)
            try:
                os.replace(full, target)  # atomic, also over a damaged blob
            except IsADirectoryError:  # damage: os.replace cannot put a file over a directory
                shutil.rmtree(target)
                os.replace(full, target)
            renamed_into.add(os.path.dirname(target))
            # the key of the inode just hashed, after its rename (which changes its ctime): if another
            # file took its place in staging meanwhile, the blob will not match the key and is hashed again
            self._verified[sha] = _stat_key(os.fstat(fd))
            return sha, size, target
        finally:
            os.close(fd)

    def _symlinked_dir(self, full: str, checked: set[str]) -> str | None:
        """The first directory between the staging area and the file ``full`` that is a symbolic link
        (None: there is none). Each directory is looked at once per commit (``checked``)."""
        parts = full[len(self._staging_prefix):].split(os.sep)[:-1]
        current = self._staging_prefix.rstrip(os.sep)
        for part in parts:
            current = current + os.sep + part
            if current in checked:
                continue
            try:
                if stat.S_ISLNK(os.lstat(current).st_mode):
                    return current
            except OSError:
                return None  # missing: the open reports it
            checked.add(current)
        return None

    def record_failure(self, task, error: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO tasks (id, kind, op, program, status, error, attempts, record, meta, updated) "
                       "VALUES (?,?,?,?,'failed',?,1,?,NULL,?) ON CONFLICT(id) DO UPDATE SET status='failed', "
                       "error=excluded.error, attempts=attempts+1, updated=excluded.updated "
                       "WHERE tasks.status != 'done'",
                       (task.id, task.kind, task.op, task.program, error[-4000:],
                        json.dumps(task.to_dict(), sort_keys=True), time.time()))

    def done_tasks(self, kind: str, op: str, program: str) -> list:
        """Finished tasks of one kind/op on one program version (what the planner may reuse)."""
        from .tasks import Task

        rows = self._query("SELECT record FROM tasks WHERE status='done' AND kind=? AND op=? AND program=?",
                           (kind, op, program))
        out = []
        for (text,) in rows:
            try:
                out.append(Task.from_dict(json.loads(text)))
            except (KeyError, TypeError, ValueError, AttributeError):  # PlanError is a ValueError
                continue  # a damaged record counts as absent: the planner plans that run afresh
        return out

    def task_status(self, task_id: str) -> dict | None:
        rows = self._query("SELECT status, error, attempts, op, kind FROM tasks WHERE id=?", (_check_task_id(task_id),))
        return dict(zip(("status", "error", "attempts", "op", "kind"), rows[0])) if rows else None

    def tasks(self) -> list[dict]:
        rows = self._query("SELECT id, kind, op, program, status, attempts, updated FROM tasks ORDER BY updated")
        return [dict(zip(("id", "kind", "op", "program", "status", "attempts", "updated"), r)) for r in rows]

    # ---- maintenance ----------------------------------------------------------------------
    def clean_staging(self) -> int:
        """Remove leftover staging directories (of killed or failed tasks). Only call it while no
        runtime uses this workspace. Returns how many were removed."""
        n = 0
        for entry in (self.staging.iterdir() if self.staging.is_dir() else ()):
            shutil.rmtree(entry, ignore_errors=True)
            n += 1
        return n

    def stats(self) -> dict:
        blob_bytes = sum(p.stat().st_size for p in self.blobs.rglob("*") if p.is_file())
        count = lambda sql: self._query(sql)[0][0]  # noqa: E731
        return {"programs": count("SELECT COUNT(*) FROM programs"),
                "tasks_done": count("SELECT COUNT(*) FROM tasks WHERE status='done'"),
                "tasks_failed": count("SELECT COUNT(*) FROM tasks WHERE status='failed'"),
                "outputs": count("SELECT COUNT(*) FROM outputs"), "blob_bytes": blob_bytes,
                "staging_dirs": sum(1 for _ in self.staging.iterdir()) if self.staging.is_dir() else 0}


def _task_record_problem(task_id: str, text) -> str | None:
    """Why a task row's JSON record is unusable (None: it decodes to a task with this id)."""
    from .tasks import Task

    try:
        task = Task.from_dict(json.loads(text))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # PlanError is a ValueError
        return f"damaged record ({type(exc).__name__}: {str(exc)[:80]})"
    if task.id != task_id:
        return f"record describes task {task.id}"
    return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
