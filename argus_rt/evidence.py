"""Typed evidence: one dataclass per evidence format, stored as ``.npy`` columns plus JSON metadata.

A collection publishes evidence as one directory (:meth:`Evidence.save`)::

    <dir>/meta.json                 {"format": "argus.<name>/2", "tables": {table: {column: {"dtype", "length"}}},
                                     <metadata fields>, "details": {...}}
    <dir>/<table>.<column>.npy      one column (np.save, allow_pickle=False)

and hands every file to the workspace as its own output: ``<name>`` is the metadata, ``<name>.<table>.<column>``
a column (:meth:`Evidence.outputs`), so each column is a content-addressed blob whose hash the readers'
provenance records. Readers get the typed object back with :meth:`Evidence.load` (a directory) or
:meth:`Evidence.from_outputs` (the workspace's output files); both check every metadata field and every
column's dtype and length, and name the file and the bad field in a one-line :class:`EvidenceError`.

Old workspaces are read: evidence written before this storage is one JSON document with its columns inline
(format ``argus.<name>/1``, the shape the kinds' runs still return in memory); :meth:`Evidence.from_document`
reads that shape with the same checks.

One format is not columnar: :class:`AsyncSites` (a discovery's few nested site objects) is a dataclass
whose store is one checked JSON document, ``<dir>/meta.json``, in the shape it always had.
"""
from __future__ import annotations

import io
import json
import re
import tokenize
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Callable, ClassVar

import numpy as np

META_FILE = "meta.json"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # table and column names become file and output names


class EvidenceError(ValueError):
    """Evidence that does not have the documented format (the message names the file and what is wrong)."""


# ---- metadata field checks: each returns the value or raises with what was expected -------------
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "str?": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "int": (_is_int, "an integer"),
    "int?": (lambda v: v is None or _is_int(v), "an integer or null"),
    "number?": (lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)), "a number or null"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "strs": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "dict": (lambda v: isinstance(v, dict), "an object"),
    "dict?": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "dicts": (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "a list of objects"),
}
# column kinds: which numpy dtype kinds a column may hold
_COLUMN_KINDS = {"int": "iu", "number": "iuf", "str": "U"}
_KIND_WORDS = {"int": "integers", "number": "numbers", "str": "strings"}


@dataclass(frozen=True)
class TableSpec:
    """Columns of one table: their kinds (``"int"``, ``"number"``, ``"str"``), which are required, and the
    kind of columns the table may hold besides (None: no others)."""

    columns: dict[str, str]
    required: tuple[str, ...]
    others: str | None = None


class Evidence:
    """Base of the evidence dataclasses. A subclass declares ``FORMAT`` (stored), ``LEGACY`` (the inline
    JSON format of older workspaces), ``OUTPUT`` (the output name), ``TABLES`` (its column tables, each a
    dataclass field holding ``{column: ndarray}``) and ``META`` (its metadata fields and their checks, each a
    dataclass field). Everything else in a document is kept, unread by rules, in ``details``."""

    FORMAT: ClassVar[str]
    LEGACY: ClassVar[str]
    OUTPUT: ClassVar[str]
    TABLES: ClassVar[dict[str, TableSpec]]
    META: ClassVar[dict[str, str]]

    # ---- writing ------------------------------------------------------------------------------
    def save(self, directory) -> dict[str, Path]:
        """Write ``meta.json`` and one ``.npy`` per column under ``directory``; returns :meth:`outputs`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tables = {}
        for table in self.TABLES:
            described = tables[table] = {}
            for col, arr in getattr(self, table).items():
                arr = _storable(arr, table, col)
                _write_column(directory / _column_file(table, col), arr)
                described[col] = {"dtype": arr.dtype.str, "length": int(arr.shape[0])}
        meta = {"format": self.FORMAT, "tables": tables, **{k: getattr(self, k) for k in self.META},
                "details": self.details}
        from .fsutil import atomic_write_text  # one writer of whole-or-nothing files

        atomic_write_text(directory / META_FILE, json.dumps(meta) + "\n")
        return self.outputs(directory)

    def outputs(self, directory) -> dict[str, Path]:
        """``{output name: file}`` of this evidence saved under ``directory``: what a collection publishes."""
        directory = Path(directory)
        out = {self.OUTPUT: directory / META_FILE}
        for table in self.TABLES:
            for col in getattr(self, table):
                out[self.column_output(table, col)] = directory / _column_file(table, col)
        return out

    def document(self, *, lists: bool = False) -> dict:
        """The inline document view (``LEGACY`` shape), for code that reads evidence as a mapping (scope
        selection, the Chrome export, the probe tracks); columns as arrays, or as lists (``lists=True``)."""
        tables = {t: {c: a.tolist() if lists else a for c, a in getattr(self, t).items()} for t in self.TABLES}
        return {"format": self.LEGACY, **tables, **{k: getattr(self, k) for k in self.META}, **self.details}

    @classmethod
    def column_output(cls, table: str, column: str) -> str:
        """The output name of one column: ``<OUTPUT>.<table>.<column>``."""
        return f"{cls.OUTPUT}.{table}.{column}"

    # ---- reading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, directory):
        """The evidence :meth:`save` wrote under ``directory``."""
        directory = Path(directory)
        return cls._read(directory / META_FILE, lambda table, col: directory / _column_file(table, col))

    @classmethod
    def from_outputs(cls, path_of: Callable[[str], Path | None]):
        """The evidence among a task's output files; ``path_of(output name)`` -> file (None: absent). A
        metadata file of the older inline format (``LEGACY``) is read as it is: old workspaces stay readable."""
        meta_path = path_of(cls.OUTPUT)
        if meta_path is None:
            raise EvidenceError(f"no {cls.OUTPUT!r} output to read {cls.FORMAT} from")
        return cls._read(Path(meta_path), lambda table, col: path_of(cls.column_output(table, col)))

    @classmethod
    def from_records(cls, records):
        """The evidence among a done task's workspace outputs (``{name: OutputRecord}``), each file read
        through its record, so checked against its hash (a damaged blob is the workspace's one-line error)."""
        if cls.OUTPUT not in records:
            raise EvidenceError(f"no {cls.OUTPUT!r} output to read {cls.FORMAT} from (outputs: "
                                f"{', '.join(sorted(records))})")
        meta = records[cls.OUTPUT]
        where = f"output {getattr(meta, 'task_id', '?')}/{cls.OUTPUT}"
        try:
            doc = meta.read_json()
        except ValueError as exc:
            raise EvidenceError(f"{where}: not JSON ({exc})") from None

        def column(table: str, col: str):
            record = records.get(cls.column_output(table, col))
            return None if record is None else io.BytesIO(record.read_bytes())

        return cls._from_meta(doc, where, column)

    @classmethod
    def from_document(cls, doc, where: str = "evidence document"):
        """The evidence of an inline JSON document (``LEGACY`` format: ``{"format", "<table>": {column:
        [values]}, <metadata>}``), as the kinds' runs return it and older workspaces stored it."""
        _check_format(doc, cls.LEGACY, where)
        tables = {}
        for table, spec in cls.TABLES.items():
            raw = doc.get(table, {})
            if not isinstance(raw, dict):
                raise EvidenceError(f"{where}: {table!r} is {type(raw).__name__}, expected an object of columns")
            tables[table] = {col: _inline_column(values, spec, table, col, where) for col, values in raw.items()}
        rest = {k: v for k, v in doc.items() if k not in cls.TABLES and k != "format"}
        return cls._build(tables, rest, where, details_inline=True)

    @classmethod
    def _read(cls, meta_path: Path, column_path: Callable[[str, str], Path | None]):
        where = str(meta_path)
        try:
            text = meta_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise EvidenceError(f"{where}: cannot read {cls.OUTPUT} metadata ({exc.strerror or exc})") from None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise EvidenceError(f"{where}: not JSON ({exc})") from None
        return cls._from_meta(doc, where, column_path)

    @classmethod
    def _from_meta(cls, doc, where: str, column_source: Callable[[str, str], object]):
        """The evidence of metadata ``doc``; ``column_source(table, column)``: a file path or binary file
        object holding the column's .npy (None: absent)."""
        if isinstance(doc, dict) and doc.get("format") == cls.LEGACY:
            return cls.from_document(doc, where)
        _check_format(doc, cls.FORMAT, where, also=cls.LEGACY)
        described = doc.get("tables")
        if not isinstance(described, dict):
            raise EvidenceError(f"{where}: field 'tables' is {_shown(described)}, expected an object")
        tables = {}
        for table, spec in cls.TABLES.items():
            cols = described.get(table, {})
            if not isinstance(cols, dict):
                raise EvidenceError(f"{where}: field 'tables.{table}' is {_shown(cols)}, expected an object")
            tables[table] = {col: _stored_column(column_source, info, spec, table, col, where)
                             for col, info in cols.items()}
        extra = sorted(set(described) - set(cls.TABLES))
        if extra:
            raise EvidenceError(f"{where}: field 'tables' names unknown table(s) {extra}; valid: {sorted(cls.TABLES)}")
        rest = {k: v for k, v in doc.items() if k not in ("format", "tables")}
        return cls._build(tables, rest, where, details_inline=False)

    @classmethod
    def _build(cls, tables: dict, rest: dict, where: str, *, details_inline: bool):
        for table, spec in cls.TABLES.items():
            cols = tables[table]
            missing = [c for c in spec.required if c not in cols]
            if missing:
                raise EvidenceError(f"{where}: missing column(s) {missing}; present: {sorted(cols)}")
            lengths = {k: len(a) for k, a in cols.items()}
            if len(set(lengths.values())) > 1:
                raise EvidenceError(f"{where}: columns have different lengths {lengths}")
        meta = {}
        defaults = {f.name: f for f in fields(cls)}
        for name, check in cls.META.items():
            value = rest.pop(name) if name in rest else _default(defaults[name])
            ok, expected = _CHECKS[check]
            if not ok(value):
                raise EvidenceError(f"{where}: field {name!r} is {_shown(value)}, expected {expected}")
            meta[name] = value
        if details_inline:
            details = rest
        else:
            details = rest.pop("details", {})
            if not isinstance(details, dict):
                raise EvidenceError(f"{where}: field 'details' is {_shown(details)}, expected an object")
            if rest:
                raise EvidenceError(f"{where}: unknown field(s) {sorted(rest)}; valid: "
                                    f"{', '.join(['format', 'tables', *cls.META, 'details'])}")
        ev = cls(**tables, **meta, details=details)
        ev.check(where)
        return ev

    def check(self, where: str) -> None:
        """Checks across fields (a subclass adds its own); raises :class:`EvidenceError`."""

    @property
    def rows(self) -> int:
        """Rows of the first table."""
        cols = getattr(self, next(iter(self.TABLES)))
        return len(next(iter(cols.values()))) if cols else 0


def _default(f):
    return f.default_factory() if f.default is MISSING else f.default


def _column_file(table: str, col: str) -> str:
    return f"{table}.{col}.npy"


def _shown(value) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list, str, int, float, bool, type(None))) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_format(doc, fmt: str, where: str, also: str | None = None) -> None:
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        valid = repr(fmt) + (f" (or the older {also!r})" if also else "")
        raise EvidenceError(f"{where}: expected evidence format {valid}, got {got!r}")


def _column_kind(spec: TableSpec, table: str, col: str, where: str) -> str:
    if not _NAME.match(col):
        raise EvidenceError(f"{where}: column name {col!r} of {table!r} is not lower-case letters, digits and '_'")
    kind = spec.columns.get(col, spec.others)
    if kind is None:
        raise EvidenceError(f"{where}: unknown column {col!r} in {table!r}; valid: {', '.join(spec.columns)}")
    return kind


# what np.load raises on a file that is not a readable .npy: not .npy, truncated, an object array (pickle
# refused), or a header numpy cannot parse (SyntaxError, or tokenize.TokenError from its Python-2 header filter)
NPY_READ_ERRORS = (OSError, ValueError, EOFError, SyntaxError, tokenize.TokenError)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _write_column(path: Path, arr: np.ndarray) -> None:
    """One column as a .npy file: serialised, checked to parse back to ``arr`` in memory, written whole (a
    temporary file and a rename) and read back from disk before it counts.

    Why the checks: on the H200 (2026-12-02, before 032545f) columns were published whose .npy header padding
    was zeros, so every later read failed. The cause was elsewhere in the process (NVRTC writing an empty
    log's NUL into CPython's shared ``b" "``, fixed in argus_rt/kinds/cuda/build.py; at 8000724 the cupy
    example passed 3 of 3 times with a fresh build cache, where it had failed 3 of 3), but any such
    corruption must stop at the writer: a column whose bytes do not check is an error naming the file,
    and nothing of it is left behind."""
    from .fsutil import atomic_write_bytes

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    data = buf.getvalue()
    problem = _npy_problem(data, arr, "in memory")
    if problem is None:
        atomic_write_bytes(path, data, durable=False)  # published to staging: Workspace.commit(durable) fsyncs
        problem = None if path.read_bytes() == data else "on disk: the file's bytes differ from those written"
    if problem is not None:
        path.unlink(missing_ok=True)
        raise EvidenceError(f"{path}: the column file did not check ({problem})")


def _npy_problem(data: bytes, arr: np.ndarray, where: str) -> str | None:
    """None when ``data`` (np.save's bytes) parses back to ``arr``; else what is wrong."""
    try:
        back = np.load(io.BytesIO(data), allow_pickle=False)
    except NPY_READ_ERRORS as exc:
        return f"{where}: not a readable .npy ({_first_line(exc)})"
    if back.dtype != arr.dtype or not np.array_equal(back, arr):
        return f"{where}: the values read back differ from the column's"
    return None


def _storable(arr: np.ndarray, table: str, col: str) -> np.ndarray:
    """``arr`` as np.save writes it without pickle: strings as fixed-width unicode (``<U``), whatever string
    dtype built them (a StringDType or object array of str would need pickle or a newer reader)."""
    if arr.dtype.kind in "OT":
        values = arr.tolist()
        if not all(isinstance(v, str) for v in values):
            raise EvidenceError(f"column {table}.{col} holds {arr.dtype} values that are not all strings")
        return np.array(values, dtype="U") if values else np.zeros(0, dtype="<U1")
    return arr


def _checked_array(arr: np.ndarray, kind: str, table: str, col: str, where: str) -> np.ndarray:
    if arr.ndim != 1:
        raise EvidenceError(f"{where}: column {table}.{col} has shape {arr.shape}, expected one dimension")
    if arr.size == 0 and arr.dtype.kind not in _COLUMN_KINDS[kind]:
        arr = arr.astype(np.int64 if kind != "str" else "<U1")  # an empty JSON list carries no type
    if arr.dtype.kind not in _COLUMN_KINDS[kind]:
        raise EvidenceError(f"{where}: column {table}.{col} holds {arr.dtype}, expected {_KIND_WORDS[kind]}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise EvidenceError(f"{where}: column {table}.{col} holds a value that is not finite")
    return arr


def _inline_column(values, spec: TableSpec, table: str, col: str, where: str) -> np.ndarray:
    kind = _column_kind(spec, table, col, where)
    if not isinstance(values, list):
        raise EvidenceError(f"{where}: column {table}.{col} is {type(values).__name__}, expected a list")
    try:
        arr = np.asarray(values)
    except ValueError as exc:
        raise EvidenceError(f"{where}: column {table}.{col} is not a flat list ({exc})") from None
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    return _checked_array(arr, kind, table, col, where)


def _stored_column(column_source, info, spec: TableSpec, table: str, col: str, where: str) -> np.ndarray:
    kind = _column_kind(spec, table, col, where)
    if not (isinstance(info, dict) and isinstance(info.get("dtype"), str) and _is_int(info.get("length"))):
        raise EvidenceError(f"{where}: field 'tables.{table}.{col}' is {_shown(info)}, expected "
                            '{"dtype": str, "length": int}')
    source = column_source(table, col)
    if source is None:
        raise EvidenceError(f"{where}: column {table}.{col} has no file (the metadata lists it)")
    name = str(source) if isinstance(source, (str, Path)) else f"{where} column {table}.{col}"
    try:
        arr = np.load(source, allow_pickle=False)
    except FileNotFoundError:
        raise EvidenceError(f"{name}: missing (column {table}.{col} of {where})") from None
    except NPY_READ_ERRORS as exc:
        first = _first_line(exc)
        raise EvidenceError(f"{name}: column {table}.{col} is not a readable .npy array ({first})") from None
    if not isinstance(arr, np.ndarray):
        raise EvidenceError(f"{name}: column {table}.{col} is not a .npy array")
    if arr.dtype.str != info["dtype"] or arr.shape != (info["length"],):
        raise EvidenceError(f"{name}: column {table}.{col} is {arr.dtype.str}{list(arr.shape)}, its metadata says "
                            f"{info['dtype']}[{info['length']}]")
    return _checked_array(arr, kind, table, col, name)


# ---- the formats --------------------------------------------------------------------------------
_REGION_COLUMNS = {"region_id": "int", "start": "number", "end": "number", "sm": "int", "cta": "int",
                   "warp": "int", "coord": "int", "launch": "int"}


@dataclass(frozen=True)
class RegionIntervals(Evidence):
    """One row per region occurrence (paired begin/end), from a region trace (or a Proton trace).

    ``columns``: ``region_id``, ``start``, ``end`` (``clock`` units), optional ``sm``, ``cta``, ``warp``,
    ``coord`` (its meaning: ``coord_kind``), ``launch``, and one column per field of a packed coordinate
    (``coord_fields``: ``{field: [lowest bit, width]}``). ``warp_roles``: ``{role: [warp, ...]}``."""

    FORMAT: ClassVar[str] = "argus.region_intervals/2"
    LEGACY: ClassVar[str] = "argus.region_intervals/1"
    OUTPUT: ClassVar[str] = "region_intervals"
    TABLES: ClassVar[dict] = {"columns": TableSpec(_REGION_COLUMNS, ("region_id", "start", "end"), others="int")}
    META: ClassVar[dict] = {"clock": "str", "coord_kind": "str?", "coord_fields": "dict", "warp_roles": "dict",
                            "launches": "int", "dropped": "int", "incomplete": "bool", "problems": "strs",
                            "method": "str?", "source": "dict?"}

    columns: dict
    clock: str = "ns"
    coord_kind: str | None = None
    coord_fields: dict = field(default_factory=dict)
    warp_roles: dict = field(default_factory=dict)
    launches: int = 1
    dropped: int = 0
    incomplete: bool = False
    problems: list = field(default_factory=list)
    method: str | None = None  # how the occurrences were recorded, when not by Argus's region trace
    source: dict | None = None  # the tool that recorded them (a Proton trace: tool, triton, mode, file)
    details: dict = field(default_factory=dict)

    def check(self, where: str) -> None:
        if self.clock not in ("ns", "cycles"):
            raise EvidenceError(f"{where}: field 'clock' is {self.clock!r}, expected 'ns' or 'cycles'")
        if self.coord_kind not in (None, "iteration", "layer", "step"):
            raise EvidenceError(f"{where}: field 'coord_kind' is {self.coord_kind!r}, expected 'iteration', "
                                "'layer', 'step' or null")
        extra = sorted(set(self.columns) - set(_REGION_COLUMNS) - set(self.coord_fields))
        if extra:
            raise EvidenceError(f"{where}: column(s) {extra} are neither region-interval columns nor fields of "
                                f"'coord_fields' ({sorted(self.coord_fields)})")


@dataclass(frozen=True)
class OpEvents(Evidence):
    """Issue and completion of probed async operations: one row per CTA that recorded the probed
    (op, iteration), per launch. ``ctas``: the grid; ``recorded``: CTAs with a row."""

    FORMAT: ClassVar[str] = "argus.op_events/2"
    LEGACY: ClassVar[str] = "argus.op_events/1"
    OUTPUT: ClassVar[str] = "op_events"
    TABLES: ClassVar[dict] = {"columns": TableSpec(
        {"op_id": "str", "iteration": "int", "issue": "number", "complete": "number", "issue_cycles": "number",
         "complete_cycles": "number", "sm": "int", "cta": "int", "launch": "int"},
        ("op_id", "iteration", "issue", "complete"))}
    META: ClassVar[dict] = {"clock": "str", "ctas": "int?", "recorded": "int?", "launches": "int?"}

    columns: dict
    clock: str = "ns"
    ctas: int | None = None
    recorded: int | None = None
    launches: int | None = None
    details: dict = field(default_factory=dict)


def check_recording_ctas(label: str, iteration: int, expected: set[int], recorded_by_launch: dict[int, set[int]],
                         n_ctas: int | None = None) -> bool:
    """The join-time check of probe evidence: in every probe launch, the CTAs that recorded the probe of
    ``iteration`` (``recorded_by_launch``: launch -> CTAs) are ``expected``, the CTAs whose loop runs it in
    the traced reference. Whether the iteration was reached (False: no CTA runs it and none recorded it);
    :class:`EvidenceError` names the first launch and CTA that differ."""
    for launch in sorted(recorded_by_launch):
        got = recorded_by_launch[launch]
        if got == expected:
            continue
        stray, missed = sorted(got - expected), sorted(expected - got)
        why = (f"CTA {stray[0]} recorded it but does not run iteration {iteration}" if stray
               else f"CTA {missed[0]} runs iteration {iteration} but did not record it")
        grid = "" if n_ctas is None else f" of {n_ctas}"
        raise EvidenceError(f"probe {label}@{iteration}: launch {launch} was recorded by {len(got)}{grid} CTAs, "
                            f"the traced reference runs iteration {iteration} of that loop in {len(expected)} ({why})")
    return bool(expected)


@dataclass(frozen=True)
class IterationWaits(Evidence):
    """The traced reference of a Triton kernel: per CTA, traced loop and iteration the CTA ran, when the
    consumer's wait for that iteration's async loads began and ended (``columns``), and every (CTA,
    loop)'s trip count, zeros included (``trips``). ``loops``: ``[{"loop", "wait_line", ...}]``;
    ``ctas``: the grid; ``wait``: what was timed."""

    FORMAT: ClassVar[str] = "argus.iteration_waits/2"
    LEGACY: ClassVar[str] = "argus.iteration_waits/1"
    OUTPUT: ClassVar[str] = "iteration_waits"
    TABLES: ClassVar[dict] = {
        "columns": TableSpec({"cta": "int", "loop": "int", "iteration": "int", "begin": "number", "end": "number",
                              "trips": "int", "launch": "int"}, ("cta", "iteration", "begin", "end")),
        "trips": TableSpec({"cta": "int", "loop": "int", "trips": "int", "launch": "int"}, ())}
    META: ClassVar[dict] = {"clock": "str", "wait": "str", "ctas": "int?", "loops": "dicts", "launches": "int?"}

    columns: dict
    trips: dict = field(default_factory=dict)
    clock: str = "ns"
    wait: str = ""
    ctas: int | None = None
    loops: list = field(default_factory=list)
    launches: int | None = None
    details: dict = field(default_factory=dict)

    def check(self, where: str) -> None:
        if self.trips and not {"cta", "loop", "trips"} <= set(self.trips):
            raise EvidenceError(f"{where}: table 'trips' needs columns cta, loop, trips; present: {sorted(self.trips)}")
        for lp in self.loops:
            if not _is_int(lp.get("loop")):
                raise EvidenceError(f"{where}: field 'loops' has an entry without an integer 'loop': {_shown(lp)}")


@dataclass(frozen=True)
class PcCounters(Evidence):
    """PC-keyed counters of one kernel: ``pcs`` (``pc`` keys, ``opcode`` per PC) and one value column per
    metric in ``metrics`` (``m<i>`` is ``metric_names[i]``: metric names such as ``stall:long_scoreboard``
    are no file names)."""

    FORMAT: ClassVar[str] = "argus.pc_counters/2"
    LEGACY: ClassVar[str] = "argus.pc_counters/1"
    OUTPUT: ClassVar[str] = "pc_counters"
    TABLES: ClassVar[dict] = {"pcs": TableSpec({"pc": "str", "opcode": "str"}, ("pc",)),
                              "metrics": TableSpec({}, (), others="number")}
    META: ClassVar[dict] = {"method": "str?", "metric_names": "strs"}

    pcs: dict
    metrics: dict = field(default_factory=dict)
    method: str | None = None
    metric_names: list = field(default_factory=list)
    details: dict = field(default_factory=dict)

    @classmethod
    def from_document(cls, doc, where: str = "evidence document"):
        """The inline ``argus.pc_counters/1`` document: ``{"pcs": [key], "opcodes": [str], "metrics": {name:
        [value per pc]}, ...}``."""
        _check_format(doc, cls.LEGACY, where)
        metrics = doc.get("metrics", {})
        if not isinstance(metrics, dict):
            raise EvidenceError(f"{where}: field 'metrics' is {_shown(metrics)}, expected an object")
        names = list(metrics)
        pcs = {"pc": doc.get("pcs", [])}
        if "opcodes" in doc:
            pcs["opcode"] = doc["opcodes"]
        inline = {"format": cls.LEGACY, "pcs": pcs, "metrics": {f"m{i}": metrics[n] for i, n in enumerate(names)},
                  "metric_names": names,
                  **{k: v for k, v in doc.items() if k not in ("format", "pcs", "opcodes", "metrics")}}
        return super().from_document(inline, where)

    def document(self, *, lists: bool = False) -> dict:
        """The inline ``argus.pc_counters/1`` view (what :meth:`from_document` reads): ``pcs`` a list of keys,
        ``opcodes`` (when present) and ``metrics`` keyed by metric name."""
        col = (lambda a: a.tolist()) if lists else (lambda a: a)
        doc = {"format": self.LEGACY, "method": self.method, "pcs": col(self.pcs["pc"])}
        if "opcode" in self.pcs:
            doc["opcodes"] = col(self.pcs["opcode"])
        return {**doc, "metrics": {n: col(a) for n, a in self.by_metric().items()}, **self.details}

    def check(self, where: str) -> None:
        if sorted(self.metrics) != sorted(f"m{i}" for i in range(len(self.metric_names))):
            raise EvidenceError(f"{where}: metric columns {sorted(self.metrics)} do not match 'metric_names' "
                                f"({len(self.metric_names)} names: m0..m{len(self.metric_names) - 1})")
        n = len(self.pcs["pc"])
        bad = {k: len(v) for k, v in self.metrics.items() if len(v) != n}
        if bad:
            raise EvidenceError(f"{where}: metric columns {bad} differ in length from the {n} PCs")

    def metric(self, name: str) -> np.ndarray:
        """The values of metric ``name``, one per PC."""
        return self.metrics[f"m{self.metric_names.index(name)}"]

    def by_metric(self) -> dict[str, np.ndarray]:
        return {n: self.metrics[f"m{i}"] for i, n in enumerate(self.metric_names)}


_TIMELINE_COLUMNS = {"name": "str", "category": "str", "start_ns": "number", "end_ns": "number", "device": "int",
                     "stream": "int", "step": "int"}
_TIMELINE_DEFAULTS = {"name": "?", "category": "other"}  # what readers of the inline rows assumed when absent


@dataclass(frozen=True)
class SystemTimeline(Evidence):
    """Device-side events of one system trace (kernels, copies, NCCL phases), one row per event by start:
    ``events``: ``name``, ``category`` (``kernel``, ``nccl``, ``memcpy``, ``memset``, ``annotation``),
    ``start_ns``, ``end_ns``, optional ``device``, ``stream`` and ``step`` (the program step the event
    belongs to; a timeline tags every event or none). ``tool``: what traced it."""

    FORMAT: ClassVar[str] = "argus.system_timeline/2"
    LEGACY: ClassVar[str] = "argus.system_timeline/1"
    OUTPUT: ClassVar[str] = "system_timeline"
    TABLES: ClassVar[dict] = {"events": TableSpec(_TIMELINE_COLUMNS, ("name", "category", "start_ns", "end_ns"))}
    META: ClassVar[dict] = {"tool": "str?", "notes": "str"}

    events: dict
    tool: str | None = None
    notes: str = ""
    details: dict = field(default_factory=dict)

    @classmethod
    def from_document(cls, doc, where: str = "evidence document"):
        """The inline ``argus.system_timeline/1`` document: ``{"events": [{"name", "category", "start_ns",
        "end_ns", "device", "stream", "step"?}, ...], "tool", "notes"}``, one object per event."""
        _check_format(doc, cls.LEGACY, where)
        rows = doc.get("events", [])
        if not (isinstance(rows, list) and all(isinstance(r, dict) for r in rows)):
            raise EvidenceError(f"{where}: field 'events' is {_shown(rows)}, expected a list of objects")
        keys = sorted({k for r in rows for k in r} | set(cls.TABLES["events"].required))
        columns = {}
        for key in keys:
            if key not in _TIMELINE_COLUMNS:
                raise EvidenceError(f"{where}: event field {key!r} unknown; valid: {', '.join(_TIMELINE_COLUMNS)}")
            missing = next((n for n, r in enumerate(rows) if key not in r), None)
            if missing is not None and key not in _TIMELINE_DEFAULTS:
                raise EvidenceError(f"{where}: event {missing} has no {key!r} (every event needs start_ns and "
                                    "end_ns, and an optional field in every event or none)")
            columns[key] = [r.get(key, _TIMELINE_DEFAULTS.get(key)) for r in rows]
        inline = {"format": cls.LEGACY, "events": columns, **{k: v for k, v in doc.items() if k not in ("format", "events")}}
        return super().from_document(inline, where)

    def document(self, *, lists: bool = False) -> dict:
        """The inline ``argus.system_timeline/1`` view, one object per event (plain values whatever
        ``lists`` says: an event mixes columns)."""
        cols = {c: a.tolist() for c, a in self.events.items()}
        rows = [dict(zip(cols, values)) for values in zip(*cols.values())]
        return {"format": self.LEGACY, "tool": self.tool, "notes": self.notes, "events": rows, **self.details}

    def check(self, where: str) -> None:
        if "start_ns" in self.events and bool((self.events["end_ns"] < self.events["start_ns"]).any()):
            row = int(np.argmax(self.events["end_ns"] < self.events["start_ns"]))
            raise EvidenceError(f"{where}: event {row} ends before it starts (start_ns "
                                f"{self.events['start_ns'][row]}, end_ns {self.events['end_ns'][row]})")


@dataclass(frozen=True)
class PcRegionCounts(Evidence):
    """The PC-to-region map n(r, p) of one kernel as a mapping run measured it (read as a map by
    :meth:`argus_rt.pc_regions.PcRegionMap.from_evidence`).

    ``entries``: one row per (PC, leaf region): ``pc`` (key ``<function>@0x<offset>``), ``region`` (its
    ID; 0: outside every region), ``count`` (executions). ``stacks`` (absent in leaf-only maps, e.g.
    NVBit's): one row per (PC, region stack), ``pc``, ``depth``, ``count``; the stacks' region IDs, outer
    first, follow one another in ``stack_regions.region`` (row i's are the ``depth[i]`` after the
    previous rows'). ``pc_methods``: how each PC's owner was found; ``opcodes``: each PC's opcode.
    ``source_file_attribution``: ``{metric: {file: count}}``, plain ``-lineinfo`` attribution of the same
    counts ({}: none); ``provenance``: the mapping run (binary, ncu command, step seconds)."""

    FORMAT: ClassVar[str] = "argus.pc_region_counts/2"
    LEGACY: ClassVar[str] = "argus.pc_region_counts/1"
    OUTPUT: ClassVar[str] = "pc_region_counts"
    TABLES: ClassVar[dict] = {
        "entries": TableSpec({"pc": "str", "region": "int", "count": "number"}, ("pc", "region", "count")),
        "stacks": TableSpec({"pc": "str", "depth": "int", "count": "number"}, ()),
        "stack_regions": TableSpec({"region": "int"}, ()),
        "pc_methods": TableSpec({"pc": "str", "method": "str"}, ()),
        "opcodes": TableSpec({"pc": "str", "opcode": "str"}, ())}
    META: ClassVar[dict] = {"method": "str", "kernel": "str?", "source_file_attribution": "dict", "notes": "strs",
                            "provenance": "dict?"}

    entries: dict
    stacks: dict = field(default_factory=dict)
    stack_regions: dict = field(default_factory=dict)
    pc_methods: dict = field(default_factory=dict)
    opcodes: dict = field(default_factory=dict)
    method: str = "unknown"
    kernel: str | None = None
    source_file_attribution: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    provenance: dict | None = None
    details: dict = field(default_factory=dict)

    @classmethod
    def from_document(cls, doc, where: str = "evidence document"):
        """The inline ``argus.pc_region_counts/1`` document: ``{"entries": [[pc, region, n], ...], "stacks":
        [[pc, [region, ...], n], ...], "pc_methods": {pc: method}, "opcodes": {pc: opcode}, "method",
        "kernel", ...}``."""
        _check_format(doc, cls.LEGACY, where)
        entries = _rows(doc, "entries", where, lambda r: len(r) == 3, "[pc, region, n]")
        stacks = _rows(doc, "stacks", where, lambda r: len(r) == 3 and isinstance(r[1], list), "[pc, [region, ...], n]")
        named = {}
        for name in ("pc_methods", "opcodes"):
            named[name] = doc.get(name, {})
            if not isinstance(named[name], dict):
                raise EvidenceError(f"{where}: field {name!r} is {_shown(named[name])}, expected an object {{pc: str}}")
        notes = doc.get("notes", [])
        inline = {"format": cls.LEGACY,
                  "entries": {"pc": [r[0] for r in entries], "region": [r[1] for r in entries],
                              "count": [r[2] for r in entries]},
                  "stacks": {"pc": [r[0] for r in stacks], "depth": [len(r[1]) for r in stacks],
                             "count": [r[2] for r in stacks]} if stacks else {},
                  "stack_regions": {"region": [rid for r in stacks for rid in r[1]]} if stacks else {},
                  "pc_methods": {"pc": list(named["pc_methods"]), "method": list(named["pc_methods"].values())},
                  "opcodes": {"pc": list(named["opcodes"]), "opcode": list(named["opcodes"].values())},
                  # NVBit's maps wrote their one note as a string
                  "notes": [notes] if isinstance(notes, str) else notes,
                  **{k: v for k, v in doc.items() if k not in (*cls.TABLES, "format", "notes")}}
        return super().from_document(inline, where)

    def document(self, *, lists: bool = False) -> dict:
        """The inline ``argus.pc_region_counts/1`` view, what :meth:`from_document` reads (plain values
        whatever ``lists`` says: its rows mix a column's values with other columns')."""
        col = {t: {c: a.tolist() for c, a in getattr(self, t).items()} for t in self.TABLES}
        e, s = col["entries"], col["stacks"]
        regions, stacks, at = col["stack_regions"].get("region", []), [], 0
        for pc, depth, n in zip(s.get("pc", []), s.get("depth", []), s.get("count", [])):
            stacks.append([pc, regions[at:at + depth], n])
            at += depth
        return {"format": self.LEGACY, "method": self.method, "kernel": self.kernel,
                "entries": [list(r) for r in zip(e["pc"], e["region"], e["count"])], "stacks": stacks,
                "pc_methods": dict(zip(col["pc_methods"].get("pc", []), col["pc_methods"].get("method", []))),
                "opcodes": dict(zip(col["opcodes"].get("pc", []), col["opcodes"].get("opcode", []))),
                "source_file_attribution": self.source_file_attribution, "notes": self.notes,
                "provenance": self.provenance, **self.details}

    def check(self, where: str) -> None:
        for table, needed in (("stacks", ("pc", "depth", "count")), ("pc_methods", ("pc", "method")),
                              ("opcodes", ("pc", "opcode"))):
            cols = getattr(self, table)
            if cols and not set(needed) <= set(cols):
                raise EvidenceError(f"{where}: table {table!r} needs columns {', '.join(needed)}; present: "
                                    f"{sorted(cols)}")
        depth = self.stacks.get("depth", np.zeros(0, dtype=np.int64))
        regions = len(self.stack_regions.get("region", ()))
        if (depth < 0).any() or int(depth.sum()) != regions:
            raise EvidenceError(f"{where}: the stacks' depths add up to {int(depth.sum())}, but 'stack_regions' "
                                f"holds {regions} region IDs")


def _rows(doc: dict, name: str, where: str, ok: Callable[[list], bool], shape: str) -> list:
    """The rows of inline list field ``name``, each a list of the documented ``shape``."""
    rows = doc.get(name) or []
    if not isinstance(rows, list):
        raise EvidenceError(f"{where}: field {name!r} is {_shown(rows)}, expected a list of {shape}")
    for n, row in enumerate(rows):
        if not (isinstance(row, list) and ok(row)):
            raise EvidenceError(f"{where}: {name}[{n}] is {_shown(row)}, expected {shape}")
    return rows


_SITE_FIELDS: dict[str, str] = {"op_id": "str", "kind": "str", "region": "str", "iterations": "ints",
                                "logical_iterations": "ints", "completion": "dict"}
_CHECKS["ints"] = (lambda v: isinstance(v, list) and all(_is_int(x) for x in v), "a list of integers")


@dataclass(frozen=True)
class AsyncSites:
    """The async operations a discovery found in one region (the ``async_discovery`` Control's output):
    ``sites``, one object per logical op (``op_id``, ``kind`` (``tma_load``, ``wgmma``, ``cp_async``),
    ``region``, ``iterations`` (the probe candidates), ``completion`` (how its completion is awaited),
    and what the kind adds: source, instances, call stack); the ``regions`` spans it searched.

    Not columnar: a handful of sites, each nested (instances, a completion object, iteration lists of
    different lengths), read whole by the probe expander and joined by ``op_id``. Its store is the one
    JSON document ``<dir>/meta.json`` (format ``argus.async_sites/1``, the shape it always had, so the
    readers of older workspaces and of ``argus discover --json`` read it unchanged), checked on load."""

    FORMAT: ClassVar[str] = "argus.async_sites/1"
    OUTPUT: ClassVar[str] = "async_sites"
    META: ClassVar[dict] = {"program": "str?", "kernel": "str?", "region": "str?", "iterations": "int?",
                            "sites": "dicts", "unsupported": "strs", "helper_regions": "str?", "regions": "dicts"}

    sites: list
    program: str | None = None
    kernel: str | None = None
    region: str | None = None
    iterations: int | None = None
    unsupported: list = field(default_factory=list)
    helper_regions: str | None = None
    regions: list = field(default_factory=list)
    details: dict = field(default_factory=dict)

    def save(self, directory) -> dict[str, Path]:
        """Write the document as ``<directory>/meta.json``; returns ``{"async_sites": that file}``."""
        from .fsutil import atomic_write_text

        path = Path(directory) / META_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(self.document()) + "\n")
        return {self.OUTPUT: path}

    def document(self) -> dict:
        """The ``argus.async_sites/1`` document (plain values)."""
        return {"format": self.FORMAT, **{k: getattr(self, k) for k in self.META}, **self.details}

    @classmethod
    def load(cls, directory):
        return cls._read(Path(directory) / META_FILE)

    @classmethod
    def from_outputs(cls, path_of: Callable[[str], Path | None]):
        """The sites among a task's output files (``path_of(output name)`` -> file; None: absent)."""
        path = path_of(cls.OUTPUT)
        if path is None:
            raise EvidenceError(f"no {cls.OUTPUT!r} output to read {cls.FORMAT} from")
        return cls._read(Path(path))

    @classmethod
    def _read(cls, path: Path):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise EvidenceError(f"{path}: cannot read {cls.OUTPUT} ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise EvidenceError(f"{path}: not JSON ({exc})") from None
        return cls.from_document(doc, str(path))

    @classmethod
    def from_document(cls, doc, where: str = "evidence document"):
        """The sites of an ``argus.async_sites/1`` document; every field checked, unknown ones kept in
        ``details``."""
        _check_format(doc, cls.FORMAT, where)
        defaults = {f.name: f for f in fields(cls)}
        meta = {}
        for name, check in cls.META.items():
            value = doc[name] if name in doc else _default(defaults[name])
            ok, expected = _CHECKS[check]
            if not ok(value):
                raise EvidenceError(f"{where}: field {name!r} is {_shown(value)}, expected {expected}")
            meta[name] = value
        seen: set[str] = set()
        for n, site in enumerate(meta["sites"]):
            if not isinstance(site.get("op_id"), str):
                raise EvidenceError(f"{where}: sites[{n}] has no string 'op_id': {_shown(site)}")
            for key, check in _SITE_FIELDS.items():
                ok, expected = _CHECKS[check]
                if key in site and not ok(site[key]):
                    raise EvidenceError(f"{where}: field 'sites[{n}].{key}' is {_shown(site[key])}, expected {expected}")
            if site["op_id"] in seen:
                raise EvidenceError(f"{where}: op_id {site['op_id']!r} names two sites (sites[{n}] and an earlier one)")
            seen.add(site["op_id"])
        details = {k: v for k, v in doc.items() if k not in cls.META and k != "format"}
        return cls(**meta, details=details)

    def by_op_id(self) -> dict[str, dict]:
        """``{op_id: site}``: what a join by op ID reads."""
        return {s["op_id"]: s for s in self.sites}


EVIDENCE_TYPES: tuple[type[Evidence] | type[AsyncSites], ...] = (
    RegionIntervals, OpEvents, IterationWaits, PcCounters, SystemTimeline, PcRegionCounts, AsyncSites)


def evidence_type(output: str) -> type[Evidence] | type[AsyncSites]:
    """The evidence type published under output name ``output``."""
    for cls in EVIDENCE_TYPES:
        if cls.OUTPUT == output:
            return cls
    raise EvidenceError(f"no evidence type is published as {output!r}; typed outputs: "
                        f"{', '.join(c.OUTPUT for c in EVIDENCE_TYPES)}")
