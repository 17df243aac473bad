"""Where command output goes: consoles that never wrap a table in a pipe, and ``--json FILE``.

On a terminal, rich fits tables to the window. In a pipe or a log there is no window: a console
there is :data:`argus_rt.console.PIPE_WIDTH` columns wide, so every table takes the width of its content and no cell
is cut or folded mid-word (a fixed 80 columns used to turn two long region names into the same
``example/stage…``). Colours are dropped when the stream is not a terminal.

``--json FILE`` writes a command's JSON document to FILE, or to stdout when FILE is ``-``; then
stdout carries only the JSON and the human-readable view goes to stderr. The other file outputs
(``--chrome``, ``--markdown``, ``-o``) take ``-`` the same way, one of them at a time.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..console import make_console

STDOUT = "-"
RULE_WIDTH = 100  # a section rule in a pipe (a rule spans the whole console width otherwise)


def rule(console, title: str) -> None:
    """A section heading: rich's rule on a terminal, a fixed-width one in a pipe."""
    if console.is_terminal:
        console.rule(title)
        return
    bar = "─" * max(3, (RULE_WIDTH - len(title) - 2) // 2)
    console.print(f"{bar} {title} {bar}", markup=False)


def json_add_argument(parser, what: str, *, default=None) -> None:
    """``--json FILE`` (``-``: stdout) on ``parser``; the value lands in ``args.json_out``
    (``default=argparse.SUPPRESS`` where a nested parser declares it again, see options.py)."""
    parser.add_argument("--json", dest="json_out", metavar="FILE", default=default,
                        help=f"write {what} as JSON to FILE ('-': stdout, and the text view goes to stderr)")


# argparse dests of the options that take a FILE where "-" means stdout
STDOUT_OPTIONS = {"json_out": "--json", "chrome": "--chrome", "markdown": "--markdown", "output": "--output"}


def stdout_claims(args) -> list[str]:
    """The options of this command line that write to stdout (``-``); more than one is refused."""
    from ..errors import ArgusInputError

    claims = [flag for dest, flag in STDOUT_OPTIONS.items() if getattr(args, dest, None) == STDOUT]
    if len(claims) > 1:
        raise ArgusInputError(f"only one output can go to stdout ('-'), got {' and '.join(claims)}")
    return claims


def human_stream(args):
    """Where the human-readable view goes: stderr when an output (``--json -``, ...) claims stdout."""
    return sys.stderr if stdout_claims(args) else sys.stdout


def human_console(args):
    return make_console(human_stream(args))


def write_text(target: str, text: str) -> None:
    """Write ``text`` to ``target``: a file path (atomically, mode 0644 under umask 022) or ``-`` for stdout."""
    from ..fsutil import atomic_write_text

    text = text if text.endswith("\n") else text + "\n"
    if target == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        atomic_write_text(Path(target), text)


def write_json(target: str, doc) -> None:
    """Write the JSON document ``doc`` to ``target`` (a path, or ``-`` for stdout)."""
    write_text(target, json.dumps(doc, indent=1, sort_keys=True))
