"""Record a benchmark's figures: `benchmarks/results/<script>.json` and a table in `docs/benchmarks.md`.

Every benchmark calls :func:`record` once at the end with the rows it measured in that run.
When ``$OUT`` is set (the device machine), copies of both files are also written there, because
the device machine's working tree does not come back.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from argus_rt.fsutil import atomic_write_text  # noqa: E402


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


def spread(samples) -> dict:
    """min / median / max over a measurement's repeats, plus how many there were (n); units as given."""
    values = [float(v) for v in samples]
    if not values:
        raise ValueError("spread() needs at least one sample")
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    columns = columns or list(rows[0].keys())

    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return "unmeasured" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def record(script: str, rows: list[dict], *, title: str, notes: str = "", columns: list[str] | None = None,
           gpu: str | None = None) -> dict:
    """Write the JSON result and append the markdown table; return the JSON payload."""
    gpu = gpu or gpu_name()
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python " + " ".join([f"benchmarks/{script}.py"] + sys.argv[1:])
    payload = {"date": date, "gpu": gpu, "command": command, "rows": rows}
    json_path = ROOT / "benchmarks" / "results" / f"{script}.json"
    atomic_write_text(json_path, json.dumps(payload, indent=2) + "\n")
    table = markdown_table(rows, columns)
    md_path = ROOT / "docs" / "benchmarks.md"
    md_path.parent.mkdir(parents=True, exist_ok=True)
    section = f"\n## {title}\n\n{date}, {gpu}, `{command}`\n\n{table}\n"
    if notes:
        section += f"\n{notes}\n"
    with open(md_path, "a", encoding="utf-8") as fh:
        fh.write(section)
    print(table)
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(json_path, Path(out) / f"{script}.json")
        with open(Path(out) / f"{script}.md", "a", encoding="utf-8") as fh:
            fh.write(section)
    return payload
