"""Record a benchmark run: `benchmarks/results/<script>.json`, then re-render `docs/benchmarks.md`.

Every benchmark calls :func:`record` once at the end with the rows it measured in that run. The JSON
holds ``date``, ``gpu``, ``command``, ``commit``, ``versions`` (see :mod:`benchmarks.provenance`),
the table's ``title`` / ``columns`` / ``notes``, ``not_recorded`` (why a field is null) and ``rows``;
a timed row carries ``spread``: {measurement: :func:`spread` of its repeats}. When ``$OUT`` is set
(the device machine, whose working tree does not come back), the JSON and its rendered section are
also written there; copy the JSON into benchmarks/results/ and re-render:

    python -m benchmarks.record --render   # docs/benchmarks.md from benchmarks/results/*.json
    python -m benchmarks.record --check    # exit 1 if docs/benchmarks.md is not what the JSONs render
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from argus_rt.fsutil import atomic_write_text  # noqa: E402
from benchmarks import provenance, results_doc  # noqa: E402


def results_dir(root: Path) -> Path:
    return root / "benchmarks" / "results"


def doc_paths(root: Path) -> tuple[Path, Path]:
    """(docs/benchmarks.md, docs/benchmarks-history.md) under ``root``."""
    return root / "docs" / "benchmarks.md", root / "docs" / "benchmarks-history.md"


def gpu_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            n = torch.cuda.device_count()
            name = torch.cuda.get_device_name(0)
            return f"{n}x {name}" if n > 1 else name
    except ImportError:
        pass
    return "no GPU"


def utc_now() -> str:
    """The run's date; to the second, so two runs of one benchmark in one minute are told apart."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def spread(samples) -> dict:
    """min / median / max over a measurement's repeats, plus how many there were (n); units as given."""
    values = [float(v) for v in samples]
    if not values:
        raise ValueError("spread() needs at least one sample")
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def make_record(script: str, rows: list[dict], *, title: str, notes: str = "", columns: list[str] | None = None,
                gpu: str | None = None, not_recorded: dict[str, str] | None = None, root: Path = ROOT,
                command: str | None = None) -> dict:
    """The JSON payload of one run. ``not_recorded``: {field: why it is missing} the caller knows of,
    e.g. {"spread": "..."} when its timings keep only medians."""
    commit, commit_source, commit_missing = provenance.git_commit(root)
    versions, versions_missing = provenance.versions()
    missing = {**({"commit": commit_missing} if commit_missing else {}), **versions_missing, **(not_recorded or {})}
    return {
        "date": utc_now(),
        "gpu": gpu or gpu_name(),
        "command": command or "python " + " ".join([f"benchmarks/{script}.py"] + sys.argv[1:]),
        "commit": commit,
        "commit_source": commit_source,
        "versions": versions,
        "title": title,
        "columns": results_doc.table_columns(rows, columns),
        "notes": notes,
        "not_recorded": missing,
        "rows": rows,
    }


def record(script: str, rows: list[dict], *, title: str, notes: str = "", columns: list[str] | None = None,
           gpu: str | None = None, not_recorded: dict[str, str] | None = None, root: Path = ROOT,
           command: str | None = None) -> dict:
    """Write the run's JSON, re-render the docs (the previous run's section moves to the history); return the JSON.
    ``command``: the command line that made the rows (default: ``python benchmarks/<script>.py`` and this
    process's arguments), for a run that is not a script under benchmarks/."""
    payload = make_record(script, rows, title=title, notes=notes, columns=columns, gpu=gpu,
                          not_recorded=not_recorded, root=root, command=command)
    text = json.dumps(payload, indent=2) + "\n"
    atomic_write_text(results_dir(root) / f"{script}.json", text)  # creates the directories it needs
    results_doc.update_docs(results_dir(root), *doc_paths(root))
    section = results_doc.render_section(script, payload)
    print(section)
    out = os.environ.get("OUT")
    if out:
        atomic_write_text(Path(out) / f"{script}.json", text)
        atomic_write_text(Path(out) / f"{script}.md", section)
    return payload


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Render docs/benchmarks.md from benchmarks/results/*.json.")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--render", action="store_true", help="rewrite docs/benchmarks.md (replaced runs -> history)")
    mode.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md differs from a render")
    args = ap.parse_args(argv)
    doc, history = doc_paths(ROOT)
    if args.check:
        want = results_doc.render_doc(results_doc.load_records(results_dir(ROOT)))
        if not doc.exists() or doc.read_text(encoding="utf-8") != want:
            print(f"{doc} differs from what benchmarks/results/*.json render; run python -m benchmarks.record --render",
                  file=sys.stderr)
            return 1
        return 0
    for section in results_doc.update_docs(results_dir(ROOT), doc, history):
        print(f"moved to {history.name}: {section.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
