"""Region reports: a versioned JSON document for programs and agents, plus terminal and markdown views.

Schema (``argus_report_version`` 1; the JSON Schema is ``argus_rt/schemas/report.schema.json``,
:data:`REPORT_SCHEMA`, and :func:`validate_report` checks a document against it)::

    {"argus_report_version": 1,
     "query": {"program", "program_name", "region", "signals", "scope", "sampling"},
     "values": [value, ...],            # see argus_rt.synthesis: signal, region, metric, value, unit,
                                        # qualification, provenance, scope, ambiguity, samples, notes
     "unanswered": [{"signal", "reason"}],   # signals whose tasks failed: unmeasured, never guessed
     "execution": {"tasks": {"done": n, "reused": n, "failed": n, "blocked": n},
                   "collect_runs": n executed, "wall_s": s},
     "runs": [{"collect", "requests", "effects", "why_separate"}]}   # the plan's run partition

``qualification``: ``observed`` (measured with region identity), ``attributed`` (PC-keyed data
lifted through the PC-to-region map; ``ambiguity.entropy_nats`` says how shared), ``derived``
(inferred from transformed runs, e.g. forced-wait probes).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from .console import make_console
from .errors import ArgusInputError
from .schema_check import load_schema
from .schema_check import validator as schema_validator

REPORT_VERSION = 1
# The published JSON Schema (draft 2020-12) of this version, shipped as package data
# (read and compiled once, by argus_rt.schema_check).
REPORT_SCHEMA = load_schema("report")


def validate_report(data: dict) -> None:
    """Raise :class:`ReportError` unless ``data`` is a valid version-:data:`REPORT_VERSION` report
    (checked against :data:`REPORT_SCHEMA` with the ``jsonschema`` library)."""
    errors = sorted(schema_validator("report").iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        raise ReportError(f"report does not match {REPORT_SCHEMA['$id']}: {len(errors)} error(s); first at "
                          f"{where}: {first.message}")


class ReportError(ArgusInputError):
    """A report document of another version or shape."""


@dataclass
class Report:
    query: dict
    values: list[dict]
    unanswered: list[dict] = field(default_factory=list)
    execution: dict = field(default_factory=dict)
    runs: list[dict] = field(default_factory=list)

    # ---- building -------------------------------------------------------------------------
    @classmethod
    def from_run(cls, plan, result) -> "Report":
        """Collect the target facts of ``plan`` from a :class:`RunResult`."""
        values, unanswered = [], []
        for signal, tid in plan.targets.items():
            res = result.results.get(tid)
            if res is None or res.status not in ("done", "reused"):
                why = res.error if res is not None and res.error else "not run"
                unanswered.append({"signal": signal, "reason": _root_cause(result, tid) or why})
                continue
            doc = res.outputs["facts"].read_json()
            values.extend(doc["values"])
        statuses = {s: result.count(s) for s in ("done", "reused", "failed", "blocked")}
        # where the wall time went: each task that ran, slowest first (reused tasks took no time)
        ran = sorted((r for r in result.results.values() if r.status in ("done", "failed")),
                     key=lambda r: (-r.seconds, r.task_id))
        task_seconds = [{"task": r.task_id, "kind": r.kind, "op": r.op, "status": r.status,
                         "seconds": round(r.seconds, 4)} for r in ran]
        return cls(query=plan.query, values=values, unanswered=unanswered,
                   execution={"tasks": statuses, "collect_runs": result.executed.get("collect", 0),
                              "wall_s": round(result.wall_s, 4), "task_seconds": task_seconds}, runs=plan.runs)

    # ---- JSON -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"argus_report_version": REPORT_VERSION, "query": self.query, "values": self.values,
                "unanswered": self.unanswered, "execution": self.execution, "runs": self.runs}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "Report":
        version = data.get("argus_report_version") if isinstance(data, dict) else None
        if version != REPORT_VERSION:
            raise ReportError(f"unsupported report version {version!r}; this Argus reads {REPORT_VERSION}")
        missing = [k for k in REPORT_SCHEMA["required"] if k not in data]
        if missing:
            raise ReportError(f"report lacks required key(s) {missing}")
        return cls(query=data["query"], values=data["values"], unanswered=data["unanswered"],
                   execution=data["execution"], runs=data["runs"])

    @classmethod
    def from_json(cls, text: str) -> "Report":
        return cls.from_dict(json.loads(text))

    # ---- access ---------------------------------------------------------------------------
    def select(self, signal: str | None = None, region: str | None = None, metric: str | None = None) -> list[dict]:
        return [v for v in self.values if (signal is None or v["signal"] == signal)
                and (region is None or v["region"] == region) and (metric is None or v["metric"] == metric)]

    def value(self, signal: str, region: str | None, metric: str) -> float | None:
        hits = self.select(signal, region, metric)
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} values for ({signal}, {region}, {metric})")
        return hits[0]["value"]

    # ---- views ----------------------------------------------------------------------------
    def rows(self) -> list[list[str]]:
        out = []
        for v in self.values:
            amb = v.get("ambiguity") or {}
            out.append([v["signal"], v["region"] or "(program)", v["metric"], _fmt(v["value"]), v["unit"],
                        v["qualification"], f"{amb['entropy_nats']:.3f}" if "entropy_nats" in amb else "",
                        v["provenance"].get("method", ""), "; ".join(v.get("notes", []))])
        return out

    HEADER = ["signal", "region", "metric", "value", "unit", "qualification", "entropy (nats)", "method", "notes"]

    def to_markdown(self) -> str:
        q = self.query
        lines = [f"# Argus report: {q.get('program_name', q.get('program'))} / {q.get('region') or '(all regions)'}",
                 "", f"signals: {', '.join(q.get('signals', []))}; scope: {json.dumps(q.get('scope', {}))}", "",
                 "| " + " | ".join(self.HEADER) + " |", "|" + "---|" * len(self.HEADER)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in self.rows()]
        lines += self.side_by_side_markdown()
        for u in self.unanswered:
            lines.append(f"\n**unmeasured** `{u['signal']}`: {u['reason']}")
        ex = self.execution
        lines.append(f"\n{ex.get('collect_runs', 0)} collection runs executed; tasks {ex.get('tasks', {})}; "
                     f"{ex.get('wall_s', 0)} s")
        return "\n".join(lines) + "\n"

    def side_by_side(self) -> dict[str, tuple[dict, dict]]:
        """Per signal with a -lineinfo view: ({region: attributed total}, {file: total}).

        Region totals sum the signal's per-region values (all opcode families for instruction_mix);
        both columns count the same executions, split by region identity vs by source file."""
        out: dict[str, tuple[dict, dict]] = {}
        for v in self.values:
            join = v.get("join") or {}
            if "source_file" in join:
                out.setdefault(v["signal"], ({}, {}))[1][join["source_file"]] = v["value"]
        for v in self.values:
            if v["signal"] in out and v["region"] is not None and v["qualification"] == "attributed" \
                    and not v["metric"].endswith("(inclusive)") and v["value"] is not None:
                regions = out[v["signal"]][0]
                regions[v["region"]] = regions.get(v["region"], 0.0) + v["value"]
        return out

    def side_by_side_markdown(self) -> list[str]:
        lines = []
        for signal, (regions, files) in sorted(self.side_by_side().items()):
            lines += ["", f"**{signal}: regions (count-weighted through n(r,p)) vs plain source files (-lineinfo)**",
                      "", "| region | value | source file | value |", "|---|---|---|---|"]
            r_rows, f_rows = sorted(regions.items()), sorted(files.items())
            for i in range(max(len(r_rows), len(f_rows))):
                r = r_rows[i] if i < len(r_rows) else ("", None)
                f = f_rows[i] if i < len(f_rows) else ("", None)
                lines.append(f"| {r[0]} | {_fmt(r[1]) if r[0] else ''} | {f[0]} | {_fmt(f[1]) if f[0] else ''} |")
        return lines

    def print(self, console=None) -> None:
        """Rich tables on ``console`` (default: stdout, terminal-sized on a tty, never wrapped in a pipe).
        Names, notes and reasons are printed as they are, never read as rich markup."""
        from rich.markup import escape
        from rich.table import Table

        if console is None:
            console = make_console()
        q = self.query
        if not self.values:
            console.print(f"{q.get('program_name', '')} / {q.get('region') or '(all regions)'}: no values measured")
        table = Table(title=f"{q.get('program_name', '')} / {q.get('region') or '(all regions)'}  "
                            f"scope: {json.dumps(q.get('scope', {}))}")
        for h in self.HEADER:
            table.add_column(h, overflow="fold")
        for row in self.rows():
            table.add_row(*(escape(cell) for cell in row))
        if self.values:
            console.print(table)
        for signal, (regions, files) in sorted(self.side_by_side().items()):
            side = Table(title=f"{signal}: regions (n(r,p)) vs plain source files (-lineinfo)")
            for h in ("region", "value", "source file", "value"):
                side.add_column(h)
            r_rows, f_rows = sorted(regions.items()), sorted(files.items())
            for i in range(max(len(r_rows), len(f_rows))):
                r = r_rows[i] if i < len(r_rows) else None
                f = f_rows[i] if i < len(f_rows) else None
                side.add_row(r[0] if r else "", _fmt(r[1]) if r else "", f[0] if f else "", _fmt(f[1]) if f else "")
            console.print(side)
        for u in self.unanswered:
            console.print(f"[bold red]unmeasured[/] {escape(u['signal'])}: {escape(u['reason'])}")
        ex = self.execution
        console.print(f"{ex.get('collect_runs', 0)} collection runs executed; tasks {ex.get('tasks', {})}")


def _fmt(value) -> str:
    if value is None:
        return "unmeasured"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value)}"
    return f"{value:.4g}"


def _root_cause(result, tid: str) -> str | None:
    """The first failed task under ``tid`` (what to fix), e.g. 'collect:ncu failed: ...'."""
    seen, stack = set(), [tid]
    plan = result.plan
    while stack:
        cur = stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        res = result.results.get(cur)
        if res is not None and res.status == "failed":
            return f"{res.kind}:{res.op} failed: {res.error}"
        stack.extend(plan.tasks[cur].deps if cur in plan.tasks else ())
    return None
