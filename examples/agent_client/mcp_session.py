"""The client's only way to Argus: ``argus mcp`` over stdio, driven by the official MCP SDK client.

:func:`argus_server` launches ``python -m argus_rt.cli mcp --workspace W --import
examples.agent_client.kernel_time`` (plus ``--import`` of a stand-in module in tests), and
:class:`ArgusTools` calls its tools: a tool error comes back as :class:`ToolCallError` with the
server's one-line message, which the client records as the trial's failure.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

from .kernels import ROOT

KERNEL_TIME_MODULE = "examples.agent_client.kernel_time"
READ_TIMEOUT_S = 600  # a query with probes and a mapping run takes minutes on a cold machine


class ToolCallError(RuntimeError):
    """An MCP tool answered with an error (bad argument, compile or fork failure)."""


class ArgusTools:
    """Typed calls of the tools the client uses; each returns the tool's JSON answer."""

    def __init__(self, client) -> None:
        self.client = client
        self.calls: list[tuple[str, float]] = []  # (tool, seconds), for the trial cost report

    async def call(self, tool: str, args: dict) -> dict:
        start = time.perf_counter()
        result = await self.client.call_tool(tool, args)
        self.calls.append((tool, time.perf_counter() - start))
        text = result.content[0].text if result.content else ""
        if result.is_error:
            raise ToolCallError(f"{tool}: {text}")
        return json.loads(text)

    async def fork(self, program: str, edits: dict, launch: dict) -> dict:
        return await self.call("fork", {"program": program, "edits": edits, "launch": launch})

    async def query(self, program: str, region: str, signals: list[str], scope: dict | None = None) -> dict:
        args = {"program": program, "region": region, "signals": signals}
        if scope:
            args["scope"] = scope
        return await self.call("query", args)

    async def plan(self, program: str, region: str, signals: list[str]) -> dict:
        return await self.call("plan", {"program": program, "region": region, "signals": signals})


def server_parameters(workspace: Path, imports: tuple[str, ...] = (), env: dict | None = None):
    from mcp.client.stdio import StdioServerParameters

    args = ["-m", "argus_rt.cli", "mcp", "--workspace", str(workspace)]
    for module in (KERNEL_TIME_MODULE, *imports):
        args += ["--import", module]
    env = dict(os.environ if env is None else env)
    # the server and its workers import examples.agent_client.kernel_time by name: the checkout's root
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(ROOT))


@contextlib.asynccontextmanager
async def argus_server(workspace: Path, imports: tuple[str, ...] = (), env: dict | None = None):
    """An :class:`ArgusTools` on a fresh ``argus mcp`` process (stopped on exit)."""
    from mcp import Client

    async with Client(server_parameters(workspace, imports, env), read_timeout_seconds=READ_TIMEOUT_S) as client:
        yield ArgusTools(client)
