"""`argus mcp` on one GPU (no stand-ins): the SDK's stdio client launches the server, asks one real
``query`` and one ``compare`` of the CUDA example and a fork of it, and checks the answers.

The program is ``examples/cuda`` (nested_regions), the cheapest shipped example that answers ``latency``:
one nvcc build per version and one traced launch per repeat (the runner checks the kernel's output
against its plain PyTorch reference before anything is measured). The fork appends a comment to the
kernel source: a new version (new sources, its own build) of the same kernel. So, with 3 repeats:

* ``query`` answers latency for every region, observed, within the summary bound;
* ``compare`` reports per region and metric each version's median, [min, max] and n, the difference, its
  interval and a noise verdict, no row incompatible; occurrence counts are the same in every launch of
  both versions, so their rows are ``within noise`` with difference 0; the query's collection is version
  A's first repeat (5 new collection runs, not 6);
* both answers stay under the documented bounds (12,000 characters of JSON, about 3k tokens).

Expected wall time on an H200: about 20-40 s (server start, two nvcc builds, six traced launches; the
test prints the seconds and the answers' sizes).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REGION = "example"
REGIONS = {"example", "example/stage_a", "example/stage_b", "example/stage_b/inner"}
LATENCY_METRICS = {"count", "mean", "p50", "p99"}
REPEATS = 3  # the fewest that give a verdict (compare.MIN_REPEATS)


def _json(result) -> dict:
    assert not result.is_error, result.content[0].text if result.content else result
    return json.loads(result.content[0].text)


def check_query_answer(report: dict, region_names: set, bound: int) -> None:
    """A summary answer of latency: every region's count/mean/p50/p99, observed, positive, under ``bound``."""
    assert report["argus_report_version"] == 1 and report["detail"] == "summary", report
    assert report["unanswered"] == [], report["unanswered"]
    assert report["collect_runs"] >= 1  # measured now, not served from an earlier run
    values = report["values"]
    assert values and all(v["signal"] == "latency" for v in values)
    assert all(v["qualification"] == "observed" and v["unit"] for v in values), values
    got = {(v["region"], v["metric"]) for v in values}
    assert got == {(r, m) for r in region_names for m in LATENCY_METRICS}, sorted(got)
    assert all(v["value"] > 0 for v in values), values
    assert len(json.dumps(report)) <= bound


def check_compare_answer(answer: dict, ids: tuple[str, str], region_names: set, repeats: int, bound: int) -> None:
    """A summary comparison of two builds of one kernel: every row compared, with both sides' spreads."""
    from argus_rt.compare import DIFFERS, WITHIN_NOISE

    assert answer["argus_compare_version"] == 1 and answer["detail"] == "summary", answer
    assert (answer["versions"]["a"]["id"], answer["versions"]["b"]["id"]) == ids
    assert answer["query"]["repeats"] == repeats and answer["unanswered"] == [], answer["unanswered"]
    assert "percentile-bootstrap" in answer["rule"]
    rows = answer["rows"]
    assert {(r["region"], r["metric"]) for r in rows} == {(r, m) for r in region_names for m in LATENCY_METRICS}
    for row in rows:
        assert row["verdict"] in (DIFFERS, WITHIN_NOISE), row  # nothing incompatible or unanswered
        assert row["qualification"] == "observed"
        for side in ("a", "b"):
            s = row[side]
            assert s["n"] == repeats and s["min"] <= s["median"] <= s["max"], row
            assert len(s["interval"]) == 2
        scale = max(abs(row["a"]["median"]), abs(row["b"]["median"]))  # the summary keeps 4 significant digits
        assert abs(row["difference"] - (row["b"]["median"] - row["a"]["median"])) <= 1e-3 * scale + 1e-9, row
        lo, hi = row["interval"]
        assert lo <= hi and (row["verdict"] == DIFFERS) == (lo > 0 or hi < 0), row
        if row["metric"] == "count":  # the same kernel and launch: the same occurrences in every repeat
            assert row["difference"] == 0 and row["verdict"] == WITHIN_NOISE, row
    assert answer["collect_runs"] == 2 * repeats - 1  # A's first repeat is the query's collection
    assert len(json.dumps(answer)) <= bound


@pytest.mark.gpu
@pytest.mark.hopper  # the example builds for sm_90a
def test_one_query_and_one_compare_through_mcp(tmp_path):
    pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'argus-rt[mcp]')")
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from argus_rt.compare import SUMMARY_CHARS as COMPARE_CHARS
    from argus_rt.mcp_server import SUMMARY_CHARS as QUERY_CHARS

    source = (ROOT / "examples" / "cuda" / "nested_regions.cu").read_text(encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    params = StdioServerParameters(command=sys.executable, env=env, cwd=str(ROOT),
                                   args=["-m", "argus_rt.cli", "mcp", "--workspace", str(tmp_path / "ws")])
    seconds: dict[str, float] = {}

    async def session():
        async with Client(params, read_timeout_seconds=600) as client:
            async def call(tool, args):
                start = time.perf_counter()
                answer = _json(await client.call_tool(tool, args))
                seconds[tool] = round(time.perf_counter() - start, 1)
                return answer

            parent = (await call("list_regions", {"program": "cuda"}))["id"]
            report = await call("query", {"program": "cuda", "region": REGION, "signals": ["latency"]})
            child = await call("fork", {"program": "cuda",
                                        "edits": {"nested_regions.cu": source + "\n// fork: a comment, same kernel\n"}})
            assert child["parent"] == parent and child["id"] != parent
            answer = await call("compare", {"version_a": "cuda", "version_b": child["id"], "region": REGION,
                                            "signals": ["latency"], "repeats": REPEATS})
            return parent, child["id"], report, answer

    start = time.perf_counter()
    parent, child, report, answer = anyio.run(session)
    print(f"wall {time.perf_counter() - start:.1f} s, per tool {seconds}; query answer {len(json.dumps(report))} "
          f"chars, compare answer {len(json.dumps(answer))} chars; verdicts {answer['counts']}")
    check_query_answer(report, REGIONS, QUERY_CHARS)
    check_compare_answer(answer, (parent, child), REGIONS, REPEATS, COMPARE_CHARS)
