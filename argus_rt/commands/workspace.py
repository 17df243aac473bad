"""`argus workspace`: inspect and maintain a workspace (programs, tasks, forks, consistency).

Every action works on an existing workspace only: a mistyped ``--workspace`` is refused with
``no workspace at PATH`` instead of creating an empty one there.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..workspace_check import repair, verify
from .options import add_workspace, workspace_path
from .output import human_stream, json_add_argument, write_json

ACTIONS = {
    "stats": "counts and bytes",
    "programs": "program versions and their bases",
    "tasks": "task records",
    "fork": "start a branch at an earlier program version",
    "branches": "branch heads",
    "verify": "check the index (SQLite integrity check), every record and every blob",
    "repair": "drop what verify finds broken (no runtime may be using it); those tasks run again",
    "clean": "remove staging leftovers of killed tasks (no runtime may be using it)",
}


def register(sub) -> None:
    p = sub.add_parser("workspace", help="inspect a workspace: stats, programs, tasks, fork, verify, repair, clean")
    _shared_options(p)
    wsub = p.add_subparsers(dest="action", metavar="ACTION")
    actions = {name: wsub.add_parser(name, help=text) for name, text in ACTIONS.items()}
    for action in actions.values():
        _shared_options(action)  # `argus workspace stats --workspace W --json -` works too
    actions["tasks"].add_argument("--failed", action="store_true", help="only failed tasks")
    actions["fork"].add_argument("program", help="program version id (pv-...)")
    actions["fork"].add_argument("branch", help="branch name")
    p.set_defaults(func=run)


def _shared_options(parser) -> None:
    add_workspace(parser)
    json_add_argument(parser, "the action's result", default=argparse.SUPPRESS)


def open_existing(path):
    """Open the workspace at ``path`` without creating anything; WorkspaceError where there is none."""
    from ..workspace import Workspace

    return Workspace.open_existing(Path(path))


def run(args) -> int:
    from ..query import default_workspace

    action = args.action or "stats"
    json_out = getattr(args, "json_out", None)
    out = human_stream(args)
    root = workspace_path(args) or default_workspace()
    if action == "repair":  # works on an index too damaged to open
        doc, lines, code = _repair(root)
    else:
        with open_existing(root) as ws:
            doc, lines, code = _ACTIONS[action](ws, args)
    if json_out:
        write_json(json_out, doc)
    for line in lines:
        print(line, file=out)
    return code


def _stats(ws, args):
    import json

    stats = ws.stats()
    return stats, [json.dumps(stats, indent=1)], 0


def _programs(ws, args):
    programs = ws.programs()
    return programs, [f"{p['id']}  {p['name']}:{p['variant']}  base={p['base']}  parent={p['parent']}"
                      for p in programs], 0


def _tasks(ws, args):
    tasks = [t for t in ws.tasks() if not args.failed or t["status"] == "failed"]
    return tasks, [f"{t['id']}  {t['kind']}:{t['op']}  {t['status']}  attempts={t['attempts']}" for t in tasks], 0


def _fork(ws, args):
    ws.fork(args.program, args.branch)
    return {"branch": args.branch, "program": args.program}, [f"branch {args.branch} -> {args.program}"], 0


def _branches(ws, args):
    heads = ws.branches()
    return heads, [f"{name}  {pid}" for name, pid in heads.items()], 0


def _verify(ws, args):
    problems = verify(ws)
    summary = "consistent" if not problems else f"{len(problems)} problem(s)"
    return {"consistent": not problems, "problems": problems}, problems + [summary], 0 if not problems else 1


def _repair(root):
    done, left = repair(Path(root))
    summary = f"{len(done)} repair(s); " + ("consistent" if not left else f"{len(left)} problem(s) left")
    return {"repaired": done, "consistent": not left, "problems": left}, done + left + [summary], 0 if not left else 1


def _clean(ws, args):
    removed = ws.clean_staging()
    return {"removed_staging_dirs": removed}, [f"removed {removed} staging dir(s)"], 0


_ACTIONS = {"stats": _stats, "programs": _programs, "tasks": _tasks, "fork": _fork, "branches": _branches,
            "verify": _verify, "clean": _clean}
