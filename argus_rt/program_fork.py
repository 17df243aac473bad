"""A new program version from an edit of an existing one: what an optimiser does between trials.

:func:`fork_program` copies the program's directory into the workspace (``forks/<version id>/``),
writes the edited files (kernel sources, a Triton module, or TTGIR the program reads) and merges
launch changes (``num_warps``, ``constexprs``, ``config``, ...) into its program file. It then
loads the copy as a program version whose ``parent`` is the edited one, and records it in the
workspace. The copy is staged under a temporary name and renamed into place only once it loads,
so a bad edit leaves nothing behind.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

from .errors import ArgusInputError

MAX_COPY_BYTES = 64 << 20  # a program directory larger than this is not a kernel's sources


class ForkError(ArgusInputError):
    """An edit that names a file outside the program, or a program that cannot be copied."""


def _inside(root: Path, rel: str) -> Path:
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute():
        raise ForkError(f"edit path {rel!r} must be a relative path inside the program directory")
    target = (root / rel).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ForkError(f"edit path {rel!r} leaves the program directory")
    return target


def fork_program(program, workspace_dir: Path, *, edits: dict | None = None, launch: dict | None = None,
                 spec_name: str | None = None):
    """The new :class:`ProgramVersion` (recorded in the workspace at ``workspace_dir``): ``program``
    with the files of ``edits`` ({relative path: new text}) replaced and ``launch``'s keys set.
    ``spec_name``: the program file in its directory (default ``argus_program.json``)."""
    from .program import PROGRAM_FILE, load_program
    from .workspace import Workspace

    if program.root is None:
        raise ForkError(f"program {program.label()} has no source directory to fork")
    if not edits and not launch:
        raise ForkError("a fork needs edits ({path: text}) or launch changes ({key: value})")
    root = Path(program.root)
    spec_name = spec_name or PROGRAM_FILE
    if launch is not None and not isinstance(launch, dict):
        raise ForkError(f"launch changes must be an object of launch keys, got {type(launch).__name__}")
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    if size > MAX_COPY_BYTES:
        raise ForkError(f"program directory {root} holds {size} bytes; forks copy at most {MAX_COPY_BYTES}")
    forks = Path(workspace_dir) / "forks"
    forks.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".fork-", dir=forks))
    try:
        copy = staging / "program"
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__", ".*"))
        for rel, text in (edits or {}).items():
            if not isinstance(text, str):
                raise ForkError(f"edit of {rel!r} must be the file's new text, got {type(text).__name__}")
            target = _inside(copy, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        if launch:
            spec_path = copy / spec_name
            spec = json.loads(spec_path.read_text(encoding="utf-8"))
            spec["launch"] = {**spec.get("launch", {}), **launch}
            spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        child = load_program(copy / spec_name)
        final = forks / child.id
        if not final.exists():  # else the same edit again: that version's directory is there already
            copy.rename(final)
        shutil.rmtree(staging)
        child = dataclasses.replace(child, parent=program.base_id, root=str(final))
        with Workspace(workspace_dir) as ws:
            ws.put_program(child)
        return child
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
