"""The ``argus`` command.

Each subcommand lives in its own module under ``argus_rt.commands`` and exposes
``register(subparsers)``; a module whose optional dependencies are missing is skipped with a
note instead of breaking the whole CLI.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, in the order `argus --help` lists them.
COMMAND_MODULES = ["demo", "build", "trace", "plan", "query", "workspace", "discover"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="argus", description="Measure GPU programs around semantic regions.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"argus_rt.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("argus_rt.commands"):
                continue  # subcommand not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
