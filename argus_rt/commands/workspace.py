"""`argus workspace`: inspect and maintain a workspace (programs, tasks, forks, consistency)."""
from __future__ import annotations

import json
import sys


def register(sub) -> None:
    p = sub.add_parser("workspace", help="inspect a workspace: stats, programs, tasks, fork, verify, clean")
    p.add_argument("--workspace", default=None, help="directory (default $ARGUS_WORKSPACE or ./.argus_workspace)")
    wsub = p.add_subparsers(dest="action", metavar="ACTION")
    wsub.add_parser("stats", help="counts and bytes")
    wsub.add_parser("programs", help="program versions and their bases")
    t = wsub.add_parser("tasks", help="task records")
    t.add_argument("--failed", action="store_true", help="only failed tasks")
    f = wsub.add_parser("fork", help="start a branch at an earlier program version")
    f.add_argument("program", help="program version id (pv-...)")
    f.add_argument("branch", help="branch name")
    wsub.add_parser("branches", help="branch heads")
    wsub.add_parser("verify", help="check every recorded output against its blob")
    wsub.add_parser("clean", help="remove staging leftovers of killed tasks (no runtime may be using it)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..query import default_workspace
    from ..workspace import Workspace, WorkspaceError

    with Workspace(args.workspace or default_workspace()) as ws:
        action = args.action or "stats"
        try:
            if action == "stats":
                print(json.dumps(ws.stats(), indent=1))
            elif action == "programs":
                for p in ws.programs():
                    print(f"{p['id']}  {p['name']}:{p['variant']}  base={p['base']}  parent={p['parent']}")
            elif action == "tasks":
                for t in ws.tasks():
                    if not args.failed or t["status"] == "failed":
                        print(f"{t['id']}  {t['kind']}:{t['op']}  {t['status']}  attempts={t['attempts']}")
            elif action == "fork":
                ws.fork(args.program, args.branch)
                print(f"branch {args.branch} -> {args.program}")
            elif action == "branches":
                for name, pid in ws.branches().items():
                    print(f"{name}  {pid}")
            elif action == "verify":
                problems = ws.verify()
                for line in problems:
                    print(line)
                print("consistent" if not problems else f"{len(problems)} problem(s)")
                return 0 if not problems else 1
            elif action == "clean":
                print(f"removed {ws.clean_staging()} staging dir(s)")
        except WorkspaceError as exc:
            print(f"argus workspace: {exc}", file=sys.stderr)
            return 2
    return 0
