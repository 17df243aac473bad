"""Options that several subcommands share, and the one way each of them is declared.

``--workspace`` is global: ``argus --workspace W query ...``, ``argus query --workspace W ...`` and
``argus workspace stats --workspace W`` all work. argparse copies a subparser's defaults over the
values the main parser already parsed, so every parser below the top declares it with
``default=SUPPRESS`` (absent unless given there) and the main parser holds the one default.
"""
from __future__ import annotations

import argparse

WORKSPACE_HELP = "workspace directory (default $ARGUS_WORKSPACE or ./.argus_workspace)"


def add_global_workspace(parser: argparse.ArgumentParser) -> None:
    """The main parser's ``--workspace``: the only place with a default (None)."""
    parser.add_argument("--workspace", default=None, metavar="DIR", help=WORKSPACE_HELP)


def add_workspace(parser: argparse.ArgumentParser, help: str = WORKSPACE_HELP) -> None:
    """``--workspace`` on a subcommand (or an action of one): overrides the global one when given."""
    parser.add_argument("--workspace", default=argparse.SUPPRESS, metavar="DIR", help=help)


def workspace_path(args):
    """The workspace the user named (anywhere on the line), or None."""
    return getattr(args, "workspace", None)
