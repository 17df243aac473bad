"""`argus mcp`: the SDK's own client drives the server, in process and over stdio, with stand-in
collections (no GPU): every tool, its errors, the resources, and the size of a summary answer."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from argus_rt.mcp_server import SUMMARY_CHARS, build_server, summarise_report  # noqa: E402
from test_query import write_program_dir  # noqa: E402
from test_runtime_standins import demo_program, standins  # noqa: E402,F401

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TOOLS = {"list_programs", "list_regions", "plan", "query", "discover", "fork", "history", "compare"}


def _json(result) -> dict:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def _error(result) -> str:
    assert result.is_error
    return result.content[0].text


def test_every_tool_in_process(standins, tmp_path):  # noqa: F811
    program = write_program_dir(tmp_path / "prog", demo_program())
    server = build_server(tmp_path / "ws")

    async def session():
        async with Client(server) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            examples = _json(await client.call_tool("list_programs", {}))["examples"]
            assert {"cuda", "triton"} <= {e["program"] for e in examples}
            regions = _json(await client.call_tool("list_regions", {"program": str(program)}))
            assert {r["name"] for r in regions["regions"]} == {"main", "main/gemm", "main/gemm/load", "main/gemm/mma",
                                                              "main/epilogue"}
            assert regions["signal_scopes"]["latency"] and regions["signal_scopes"]["instruction_mix"] == []
            plan = _json(await client.call_tool("plan", {"program": str(program), "region": "gemm",
                                                         "signals": ["latency", "instruction_mix"]}))
            assert plan["tasks"]["collect"] == 2 and set(plan["targets"]) == {"latency", "instruction_mix"}
            args = {"program": str(program), "region": "gemm", "signals": ["latency", "instruction_mix"]}
            summary = _json(await client.call_tool("query", args))
            full = _json(await client.call_tool("query", {**args, "detail": "full"}))
            assert summary["detail"] == "summary" and summary["unanswered"] == [] and full["unanswered"] == []
            assert full["execution"]["collect_runs"] == 0  # the second query reused the first one's runs
            assert len(json.dumps(summary)) <= SUMMARY_CHARS
            assert {(v["signal"], v["region"], v["metric"]) for v in summary["values"]} <= {
                (v["signal"], v["region"], v["metric"]) for v in full["values"]}
            assert all(v["qualification"] in ("observed", "attributed", "derived") for v in summary["values"])
            history = _json(await client.call_tool("history", {"program": str(program)}))
            assert [v["answered"] for v in history["versions"]] == [["instruction_mix", "latency", "pc_region_map"]]
            listed = _json(await client.call_tool("list_programs", {}))["versions"]
            assert [v["id"] for v in listed] == [history["versions"][0]["id"]]
            # bad arguments: the value and what is valid, as a tool error
            assert "valid regions: main" in _error(await client.call_tool("query", {**args, "region": "nope"}))
            assert "valid: summary, full" in _error(await client.call_tool("query", {**args, "detail": "all"}))
            assert "not a path, a shipped example (" in _error(await client.call_tool("list_regions",
                                                                                       {"program": "nope"}))
            resources = {str(r.uri) for r in (await client.list_resources()).resources}
            assert resources == {"argus://schemas/report", "argus://recipes"}
            schema = json.loads((await client.read_resource("argus://schemas/report")).contents[0].text)
            assert "values" in schema["properties"]
            catalogue = json.loads((await client.read_resource("argus://recipes")).contents[0].text)
            assert "pc_region_map" not in catalogue and catalogue["instruction_mix"]["qualification"] == "attributed"

    anyio.run(session)
    # every query (bad-input ones included) ran on the server's one engine: its workers started once
    assert server.argus_engine.opened == 1
    server.argus_engine.close()


def test_discover_names_the_async_sites_of_a_triton_region(tmp_path):
    pytest.importorskip("triton")
    server = build_server(tmp_path / "ws")

    async def session():
        async with Client(server) as client:
            doc = _json(await client.call_tool("discover", {"program": "triton", "region": "tma_matmul/kloop"}))
            assert doc["format"] == "argus.async_sites/1" and {s["kind"] for s in doc["sites"]} >= {"tma_load"}
            assert "valid" in _error(await client.call_tool("discover", {"program": "triton", "region": "nope"}))

    anyio.run(session)


def test_discover_of_a_kind_without_async_discovery_names_the_kinds_with_it(tmp_path):
    """Discovery is the kind's hook (the registry's): a CUDA program gets one line naming the kinds that have it."""
    from argus_rt.kinds.registry import kinds_with

    server = build_server(tmp_path / "ws")

    async def session():
        async with Client(server) as client:
            return _error(await client.call_tool("discover", {"program": "cuda"}))

    message = anyio.run(session)
    with_hook = ", ".join(k for k in ("cuda", "triton", "cupy", "numba", "proton") if k in kinds_with({"discover_async_sites"}))
    assert message == ("Error executing tool discover: "  # the SDK's prefix of a tool error
                       f"program kind 'cuda' has no 'discover_async_sites' (kinds with one: {with_hook})")
    assert with_hook == "triton"


def test_fork_makes_a_linked_version_that_answers_queries(standins, tmp_path):  # noqa: F811
    program = write_program_dir(tmp_path / "prog", demo_program())
    ws = tmp_path / "ws"
    server = build_server(ws)

    async def session():
        async with Client(server) as client:
            parent = _json(await client.call_tool("list_regions", {"program": str(program)}))["id"]
            child = _json(await client.call_tool("fork", {"program": str(program),
                                                          "edits": {"demo.cu": "// synthetic, edited"},
                                                          "launch": {"note": "trial 2"}}))
            assert child["parent"] == parent and child["id"] != parent and child["launch"]["note"] == "trial 2"
            assert (Path(child["root"]) / "demo.cu").read_text() == "// synthetic, edited"
            assert (program / "demo.cu").read_text() == "// synthetic"  # the parent's files are untouched
            again = _json(await client.call_tool("fork", {"program": str(program), "edits": {"demo.cu": "// synthetic, edited"},
                                                          "launch": {"note": "trial 2"}}))
            assert again["id"] == child["id"]  # the same edit is the same version
            report = _json(await client.call_tool("query", {"program": child["id"], "region": "gemm"}))
            assert report["unanswered"] == []
            history = _json(await client.call_tool("history", {"program": str(program)}))
            assert [v["id"] for v in history["versions"]] == [child["id"]]
            assert history["versions"][0]["parent"] == parent and history["versions"][0]["answered"] == ["latency"]
            for bad, why in (({"../escape.cu": "x"}, "leaves the program directory"),
                             ({"/etc/passwd": "x"}, "must be a relative path"), ({}, "needs edits")):
                assert why in _error(await client.call_tool("fork", {"program": str(program), "edits": bad}))
            assert sorted(p.name for p in (ws / "forks").iterdir()) == [child["id"]]  # no half-made fork

    anyio.run(session)


def test_a_kernel_that_does_not_compile_is_a_tool_error_before_anything_runs(tmp_path, monkeypatch):
    """As `argus query` (argus_rt.query.check_compiles): query, plan and compare of a Triton program whose
    kernel does not compile answer a tool error naming the program and the compiler's message, not a
    report with the signal unanswered; no collection is planned into the workspace."""
    import shutil

    pytest.importorskip("triton")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))  # no passed check of another run reused
    root = tmp_path / "scale"
    shutil.copytree(ROOT / "examples" / "triton_minimal", root)
    src = root / "scale.py"
    src.write_text(src.read_text().replace("v * alpha", "v * alpha + undefined_name"))
    server = build_server(tmp_path / "ws")

    async def session():
        async with Client(server) as client:
            args = {"program": str(root), "region": "scale", "signals": ["latency"]}
            for tool, call in (("query", args), ("plan", args),
                               ("compare", {"version_a": str(root), "version_b": "triton_minimal", "region": "scale",
                                            "repeats": 3})):
                message = _error(await client.call_tool(tool, call))
                assert "compiling 'scale_kernel' of scale" in message and "undefined_name" in message, (tool, message)
                assert len(message.splitlines()) == 1, message

    anyio.run(session)
    assert not (tmp_path / "ws" / "forks").exists()
    if (tmp_path / "ws").exists():  # compare opens the workspace; nothing was planned into it
        from argus_rt.workspace import Workspace

        with Workspace(tmp_path / "ws", create=False) as ws:
            assert ws.tasks() == []

def test_summary_keeps_the_largest_values_and_counts_the_rest():
    values = [{"signal": "instruction_mix", "region": "r", "metric": f"OP{i}", "value": float(i), "unit": "i",
               "qualification": "attributed"} for i in range(400)]
    doc = {"argus_report_version": 1, "query": {}, "unanswered": [], "values": values, "execution": {}}
    small = summarise_report(doc, budget_chars=4000)
    assert len(json.dumps(small)) <= 4000 and small["omitted"] == 400 - len(small["values"]) > 0
    assert [v["value"] for v in small["values"]] == sorted((v["value"] for v in small["values"]), reverse=True)
    assert small["values"][0]["value"] == 399.0


def test_over_stdio_with_the_sdk_client(tmp_path):
    """What an MCP client does: launch `argus mcp` and talk JSON-RPC over its stdin/stdout. The
    server imports the stand-in backends (--import), so a query runs without a GPU."""
    program = write_program_dir(tmp_path / "prog", demo_program())
    env = {**os.environ, "ARGUS_STANDIN_WORKER": "1",
           "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    params = StdioServerParameters(command=sys.executable, env=env, cwd=str(tmp_path),
                                   args=["-m", "argus_rt.cli", "mcp", "--workspace", str(tmp_path / "ws"),
                                         "--import", "test_runtime_standins"])

    async def session():
        async with Client(params, read_timeout_seconds=120) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            report = _json(await client.call_tool("query", {"program": str(program), "region": "gemm",
                                                            "signals": ["latency"]}))
            assert report["unanswered"] == [] and report["values"]
            assert "valid regions" in _error(await client.call_tool("plan", {"program": str(program),
                                                                             "region": "nope"}))

    anyio.run(session)


def test_a_module_that_does_not_import_is_a_one_line_error(tmp_path, capsys):
    from argus_rt.cli import main

    assert main(["mcp", "--workspace", str(tmp_path / "ws"), "--import", "no_such_module_here"]) == 2
    assert "cannot import module 'no_such_module_here'" in capsys.readouterr().err
