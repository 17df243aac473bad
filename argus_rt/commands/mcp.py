"""`argus mcp`: serve Argus's region queries to agents over the Model Context Protocol.

stdio by default (what MCP clients launch); ``--http PORT`` serves streamable HTTP on 127.0.0.1
only. The tools and resources are described in :mod:`argus_rt.mcp_server`; docs/agents.md shows a
client configuration."""
from __future__ import annotations

from ..errors import ArgusInputError
from .options import add_workspace, workspace_path


def register(sub) -> None:
    p = sub.add_parser("mcp", help="serve region queries as MCP tools (stdio, or streamable HTTP on loopback)")
    add_workspace(p)
    p.add_argument("--http", type=int, default=None, metavar="PORT",
                   help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first: it registers recipes, backends or handlers of your own (repeatable)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..mcp_server import build_server

    if args.http is not None and not 1 <= args.http <= 65535:
        raise ArgusInputError(f"--http port {args.http} must be 1..65535")
    server = build_server(workspace_path(args), imports=args.imports)
    try:
        if args.http is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host="127.0.0.1", port=args.http)
    finally:
        server.argus_engine.close()  # the workers the queries shared
    return 0
