"""The ``argus`` command.

Each subcommand lives in its own module under ``argus_rt.commands`` and exposes
``register(subparsers)``; a module whose optional dependencies are missing is skipped with a
note instead of breaking the whole CLI.

Exit status: 0 success; 1 the command ran and found a failure (a build that failed, an unanswered
signal, an inconsistent workspace); 2 bad input (a usage error, or any error that says a value the
user gave is wrong: printed as one line ``argus <command>: <message>``, never a traceback);
130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from .commands.options import add_global_workspace
from .errors import input_error_classes, one_line

# Subcommand modules, in the order `argus --help` lists them.
COMMAND_MODULES = ["demo", "build", "trace", "plan", "query", "compare", "campaign", "workspace", "discover", "mcp"]

EPILOG = """\
environment:
  ARGUS_WORKSPACE   default workspace directory (else ./.argus_workspace)
  ARGUS_CACHE_DIR   Argus's build cache of cubins (else ~/.cache/argus)
  TRITON_CACHE_DIR  Triton's own kernel cache (else ~/.triton/cache)
  ARGUS_NVCC        the nvcc to build with (else $CUDA_HOME/bin/nvcc, PATH, /usr/local/cuda)
Both caches are safe to delete; docs/caches.md says what is in them.

exit status: 0 ok, 1 the command ran and found a failure, 2 bad input (one line on stderr), 130 interrupted
"""


def installed_version() -> str:
    """The installed distribution's version, else the package's own (a plain checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("argus-rt")
    except PackageNotFoundError:
        from . import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="argus", description="Measure GPU programs around semantic regions.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"argus {installed_version()}")
    add_global_workspace(parser)
    # a command that runs other command lines (`argus demo`) calls this entry point through its args,
    # so that it need not import the CLI above it
    parser.set_defaults(argus_main=main)
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
    args = parser.parse_args(argv)  # usage errors exit 2 here
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) left: stop quietly, and keep Python's exit-time flush quiet too
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout without a file descriptor (captured)
            pass
        return 1
    except Exception as exc:
        # a command adds input errors of its own with set_defaults(input_errors=(...))
        if not isinstance(exc, input_error_classes(getattr(args, "input_errors", ()))):
            raise
        print(f"argus {args.command}: {one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
