"""Region report: versioned JSON round trip, views, and honest 'unmeasured' entries."""
from __future__ import annotations

import json

import pytest

from argus_rt.planner import plan_query
from argus_rt.report import REPORT_SCHEMA, REPORT_VERSION, Report, ReportError
from argus_rt.runtime.scheduler import Runtime
from argus_rt.workspace import Workspace
from test_runtime_standins import demo_program, standins  # noqa: F401


def _report(tmp_path, **standin):
    plan = plan_query(demo_program(**standin), "gemm", ["latency", "instruction_mix", "system_timeline"])
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""]) as rt:
        return Report.from_run(plan, rt.run(plan))


def test_report_round_trip_and_schema_fields(standins, tmp_path):
    rep = _report(tmp_path)
    data = json.loads(rep.to_json())
    assert data["argus_report_version"] == REPORT_VERSION
    for key in REPORT_SCHEMA["required"]:
        assert key in data
    item_required = REPORT_SCHEMA["properties"]["values"]["items"]["required"]
    for v in data["values"]:
        assert all(k in v for k in item_required)
        assert v["qualification"] in ("observed", "attributed", "derived")
        assert v["provenance"]["evidence"] and all(e["program_version"].startswith("pv-")
                                                   for e in v["provenance"]["evidence"])
    assert Report.from_json(rep.to_json()).to_dict() == rep.to_dict()
    assert rep.value("latency", "main/gemm", "mean") == pytest.approx(515.0)  # (500+510+520+530)/4
    assert rep.value("instruction_mix", "main/gemm/mma", "FFMA") == pytest.approx(3000.0)
    assert rep.execution["collect_runs"] == 3 and rep.unanswered == []  # trace, mapping run, systrace


def test_views_show_qualification_and_entropy(standins, tmp_path):
    rep = _report(tmp_path)
    md = rep.to_markdown()
    assert "| latency | main/gemm | mean | 515 | ns | observed |" in md
    assert "attributed" in md and "0.153" in md  # entropy of the load region (shared BAR PC)
    from io import StringIO

    from rich.console import Console

    buf = StringIO()
    rep.print(Console(file=buf, width=200))
    assert "main/gemm/load" in buf.getvalue()


def test_failed_signals_are_reported_unmeasured(standins, tmp_path):
    rep = _report(tmp_path, fail="ncu missing", only="pcmap")
    assert [u["signal"] for u in rep.unanswered] == ["instruction_mix"]
    assert "collect:pcmap failed: RuntimeError: ncu missing" in rep.unanswered[0]["reason"]
    assert rep.select("instruction_mix") == []
    assert "**unmeasured** `instruction_mix`" in rep.to_markdown()


def test_wrong_report_versions_are_refused():
    with pytest.raises(ReportError, match="unsupported report version 7"):
        Report.from_dict({"argus_report_version": 7})
    with pytest.raises(ReportError, match="lacks required"):
        Report.from_dict({"argus_report_version": REPORT_VERSION, "query": {}})
