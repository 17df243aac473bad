"""Measurement campaigns: a grid of queries (program versions x regions x signal sets) in one go.

A campaign file (JSON, schema ``argus_rt/schemas/campaign.schema.json``)::

    {"argus_campaign_version": 1, "name": "gemm tiles",
     "programs": ["progs/v1", {"path": "progs/v2", "label": "v2 (BK=64)"}],
     "regions": ["gemm", "epilogue"],
     "signals": ["latency", "instruction_mix,stall_reasons"],
     "engine": "ray", "address": "auto"}

names 2 x 2 x 2 = 8 queries. They run one after the other on one open engine (Ray's workers stay
up between them) against one shared workspace, each query's tasks in parallel. Resume is the
workspace's reuse: running an interrupted campaign again plans every query again, and a query that
had finished is answered from the workspace without running a task (status ``reused``), a query
that was cut off runs only what it had not committed. Paths in the file are relative to its
directory; every query is validated (programs load, regions, signals and scope exist) before
anything runs, and a bad file is one :class:`CampaignError` line.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ArgusInputError, one_line
from .fsutil import read_json_file
from .schema_check import schema_problems, summarize

CAMPAIGN_VERSION = 1
RESULT_VERSION = 1


class CampaignError(ArgusInputError):
    """A campaign file that cannot be read, breaks the schema, or names a query that cannot be planned."""


@dataclass
class CampaignQuery:
    index: int
    program: str  # label
    program_dir: str
    region: str | None
    signals: list[str]

    def describe(self) -> str:
        return f"{self.program} / {self.region or '(all regions)'} / {','.join(self.signals)}"


@dataclass
class Campaign:
    name: str
    path: Path
    queries: list[CampaignQuery]
    programs: dict  # label -> ProgramVersion
    scope: dict | None = None
    sampling: dict | None = None
    timeouts: dict | None = None
    engine: str | None = None
    address: str | None = None
    engine_options: dict = field(default_factory=dict)
    workspace: str | None = None
    devices: list[str] | None = None


def _signal_set(item) -> list[str]:
    names = item.split(",") if isinstance(item, str) else list(item)
    return list(dict.fromkeys(n for n in names if n))


def load_campaign(path) -> Campaign:
    """Read, validate and expand a campaign file; :class:`CampaignError` (one line) when it is bad."""
    from .program import load_program

    path = Path(path)
    doc = read_json_file(path, CampaignError, "campaign file")
    problems = schema_problems("campaign", doc)
    if problems:
        raise CampaignError(f"{path}: {summarize(problems)}")
    base = path.parent
    programs: dict = {}
    dirs: dict[str, str] = {}
    for i, item in enumerate(doc["programs"]):
        spec = {"path": item} if isinstance(item, str) else item
        where = base / spec["path"]
        try:
            pv = load_program(where, allow_unsafe_flags=spec.get("allow_unsafe_flags", False))
        except (ArgusInputError, OSError) as exc:
            raise CampaignError(f"{path}: programs[{i}] ({spec['path']}): {one_line(exc)}") from None
        label = spec.get("label") or spec["path"]
        if label in programs:
            raise CampaignError(f"{path}: programs[{i}]: label {label!r} is used twice; give each program a "
                                "distinct 'label'")
        programs[label], dirs[label] = pv, str(where)
    regions = doc.get("regions") or [None]
    signal_sets = [_signal_set(s) for s in doc["signals"]]
    queries: list[CampaignQuery] = []
    for label in programs:
        for region in regions:
            for signals in signal_sets:
                queries.append(CampaignQuery(len(queries), label, dirs[label], region, signals))
    campaign = Campaign(name=doc.get("name") or path.stem, path=path, queries=queries, programs=programs,
                        scope=doc.get("scope"), sampling=doc.get("sampling"), timeouts=doc.get("timeouts"),
                        engine=doc.get("engine"), address=doc.get("address"),
                        engine_options=dict(doc.get("engine_options") or {}),
                        workspace=str(base / doc["workspace"]) if doc.get("workspace") else None,
                        devices=doc.get("devices"))
    check_queries(campaign)
    return campaign


def check_queries(campaign: Campaign) -> None:
    """Plan every query without running it (no workspace): an unknown region, signal or scope field
    anywhere is one error naming the query, before any task runs."""
    from .query import make_plan

    for q in campaign.queries:
        try:
            make_plan(campaign.programs[q.program], q.region, q.signals, campaign.scope, sampling=campaign.sampling,
                      timeouts=campaign.timeouts)
        except (ArgusInputError, KeyError, ValueError) as exc:
            raise CampaignError(f"{campaign.path}: query {q.index + 1} ({q.describe()}): {one_line(exc)}") from None


@dataclass
class QueryOutcome:
    query: CampaignQuery
    status: str  # ran | reused | failed
    report: dict
    wall_s: float

    def row(self) -> dict:
        ex = self.report["execution"]
        return {"index": self.query.index, "program": self.query.program, "region": self.query.region,
                "signals": self.query.signals, "status": self.status, "tasks": ex["tasks"],
                "collect_runs": ex["collect_runs"], "values": len(self.report["values"]),
                "unanswered": self.report["unanswered"], "wall_s": round(self.wall_s, 3)}


@dataclass
class CampaignResult:
    campaign: Campaign
    engine: str
    workspace: str
    outcomes: list[QueryOutcome]
    wall_s: float
    interrupted: bool = False

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(o.status != "failed" for o in self.outcomes)

    def to_dict(self, reports: bool = True) -> dict:
        rows = []
        for o in self.outcomes:
            row = o.row()
            if reports:
                row["report"] = o.report
            rows.append(row)
        return {"argus_campaign_result_version": RESULT_VERSION, "campaign": self.campaign.name,
                "file": str(self.campaign.path), "engine": self.engine, "workspace": self.workspace,
                "queries": len(self.campaign.queries), "finished": len(self.outcomes),
                "interrupted": self.interrupted, "wall_s": round(self.wall_s, 3), "results": rows}

    def summary_line(self) -> str:
        done = len(self.outcomes)
        text = (f"{self.campaign.name}: {done} of {len(self.campaign.queries)} queries on {self.engine} in "
                f"{self.wall_s:.1f} s: {self.count('ran')} ran, {self.count('reused')} reused (nothing run), "
                f"{self.count('failed')} with unanswered signals")
        if self.interrupted:
            text += "; interrupted: run the same command again to resume (finished queries are reused)"
        return text

    def print(self, console) -> None:
        """The summary table, one row per finished query."""
        from rich.markup import escape
        from rich.table import Table

        table = Table(title=f"campaign {self.campaign.name} ({self.workspace})")
        for h in ("#", "program", "region", "signals", "status", "ran", "reused", "failed", "collect runs",
                  "values", "wall s"):
            table.add_column(h, overflow="fold")
        for o in self.outcomes:
            r = o.row()
            t = r["tasks"]
            status = r["status"] + (f": {', '.join(u['signal'] for u in r['unanswered'])} unanswered"
                                    if r["unanswered"] else "")
            table.add_row(str(r["index"] + 1), escape(r["program"]), escape(r["region"] or "(all)"),
                          escape(",".join(r["signals"])), escape(status), str(t.get("done", 0)),
                          str(t.get("reused", 0)), str(t.get("failed", 0) + t.get("blocked", 0)),
                          str(r["collect_runs"]), str(r["values"]), f"{r['wall_s']:.2f}")
        console.print(table)
        console.print(self.summary_line(), markup=False)


def _status(report) -> str:
    tasks = report.execution["tasks"]
    if report.unanswered:
        return "failed"
    return "ran" if tasks.get("done", 0) else "reused"


class _Progress:
    """A rich bar over the queries on a terminal; elsewhere one line per finished query on ``stream``."""

    def __init__(self, total: int, enabled: bool, stream) -> None:
        self.total, self.enabled, self.stream = total, enabled, stream
        self._rich = None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._rich = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=Console(file=self.stream), transient=False)
            self._rich.start()
            self._bar = self._rich.add_task("campaign", total=self.total)
        return self

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.stop()

    def starting(self, q: CampaignQuery) -> None:
        if self._rich is not None:
            self._rich.update(self._bar, description=f"query {q.index + 1}: {q.describe()}")

    def finished(self, outcome: QueryOutcome, done: int) -> None:
        if self._rich is not None:
            self._rich.update(self._bar, completed=done)
            return
        if self.stream is not None:
            t = outcome.report["execution"]["tasks"]
            print(f"[{done}/{self.total}] {outcome.query.describe()}: {outcome.status} "
                  f"({t.get('done', 0)} ran, {t.get('reused', 0)} reused, {t.get('failed', 0)} failed) "
                  f"{outcome.wall_s:.2f} s", file=self.stream, flush=True)


def run_campaign(campaign: Campaign, *, workspace=None, engine: str | None = None, address: str | None = None,
                 engine_options: dict | None = None, devices: list[str] | None = None, progress: bool = False,
                 stream=None, on_query=None) -> CampaignResult:
    """Run every query of ``campaign`` in order on one engine and one workspace; the result lists the
    finished ones. Arguments given here win over the file's. ``progress``: a rich bar on ``stream``
    (else one line per query there, when ``stream`` is given). ``on_query(outcome)`` is called after
    each query. On KeyboardInterrupt the engine is closed (running tasks killed) and the result comes
    back with ``interrupted=True``: what was committed stays, and running again resumes."""
    from .engines import DEFAULT_ENGINE, open_engine
    from .query import default_workspace, query
    from .workspace import Workspace

    engine = engine or campaign.engine or DEFAULT_ENGINE
    address = address if address is not None else campaign.address
    options = {**campaign.engine_options, **(engine_options or {})} if engine == "ray" else dict(engine_options or {})
    devices = devices if devices is not None else campaign.devices
    root = Path(workspace or campaign.workspace or default_workspace())
    outcomes: list[QueryOutcome] = []
    start = time.perf_counter()
    interrupted = False
    with Workspace(root) as ws, open_engine(engine, ws, devices=devices, address=address, **options) as rt, \
            _Progress(len(campaign.queries), progress, stream) as bar:
        try:
            for q in campaign.queries:
                bar.starting(q)
                t0 = time.perf_counter()
                report = query(campaign.programs[q.program], q.region, q.signals, campaign.scope, runtime=rt,
                               sampling=campaign.sampling, timeouts=campaign.timeouts)
                outcome = QueryOutcome(q, _status(report), report.to_dict(), time.perf_counter() - t0)
                outcomes.append(outcome)
                bar.finished(outcome, len(outcomes))
                if on_query is not None:
                    on_query(outcome)
        except KeyboardInterrupt:
            interrupted = True
    return CampaignResult(campaign, engine, str(root), outcomes, time.perf_counter() - start, interrupted)


__all__ = ["CAMPAIGN_VERSION", "Campaign", "CampaignError", "CampaignQuery", "CampaignResult", "load_campaign",
           "run_campaign"]
