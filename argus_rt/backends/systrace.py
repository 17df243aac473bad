"""System tracing: kernel, copy, stream and NCCL phases on one timeline.

Default tool: **torch.profiler** (Kineto over CUPTI), in-process. :func:`profile_callable` runs a
Python callable under the profiler and saves Kineto's Chrome-trace JSON; :func:`parse_kineto_trace`
turns that JSON into events, published as :class:`~argus_rt.evidence.SystemTimeline` evidence. Kineto writes ``ts``/``dur`` in microseconds
with nanosecond decimals; Argus stores integer nanoseconds. Categories:

* ``kernel``  device kernels (``cat == "kernel"``), except NCCL's, which are ``nccl``
* ``nccl``    kernels named ``nccl*`` (e.g. ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``)
* ``memcpy`` / ``memset``  device copies and fills
* ``annotation``  GPU-side user ranges (``record_function``, ``nccl:all_reduce``)

**nsys**: used only when an ``nsys`` executable exists *and* can make a report. On our H200 machines
it is not on PATH; the copy inside Nsight Compute (``/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys``)
writes a ``.qdstrm`` stream but cannot import it into a report ("Unable to retrieve the importer
version"). :func:`check_nsys_output` recognises that and raises :class:`NsysNoReportError`, so the
planner falls back to the profiler timeline and the report says why.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..evidence import SystemTimeline
from ..gpu_env import multicast_off_env
from .base import (
    BackendAdapter,
    BackendError,
    BackendUnavailableError,
    refuse_unknown_keys,
    register_backend,
)

CATEGORIES = ("kernel", "nccl", "memcpy", "memset", "annotation")
_KINETO_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
                      "gpu_user_annotation": "annotation"}
TOOLS = ("torch_profiler", "nsys")


class SystraceError(BackendError):
    """A system trace that cannot be read; the message says what is wrong."""


class NsysNoReportError(BackendUnavailableError):
    """nsys ran but produced no report (only a .qdstrm stream): it cannot be used here."""


@dataclass(frozen=True)
class TimelineEvent:
    name: str
    category: str  # one of CATEGORIES
    start_ns: int
    end_ns: int
    device: int
    stream: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def parse_kineto_trace(doc: dict) -> list[TimelineEvent]:
    """Device-side events of a Kineto Chrome trace (``torch.profiler`` ``export_chrome_trace``), by start."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise SystraceError("not a Kineto/Chrome trace: expected a JSON object with a 'traceEvents' list")
    events = []
    for n, e in enumerate(doc["traceEvents"]):
        if e.get("ph") != "X" or e.get("cat") not in _KINETO_CATEGORIES:
            continue
        try:
            start = round(float(e["ts"]) * 1000.0)
            end = start + round(float(e["dur"]) * 1000.0)
        except (KeyError, TypeError, ValueError):
            raise SystraceError(f"trace event {n} ({e.get('name')!r}) lacks numeric 'ts'/'dur'") from None
        args = e.get("args", {})
        cat = _KINETO_CATEGORIES[e["cat"]]
        name = str(e.get("name", ""))
        if cat == "kernel" and name.lower().startswith("nccl"):
            cat = "nccl"
        events.append(TimelineEvent(name, cat, start, end, int(args.get("device", e.get("pid", 0)) or 0),
                                    int(args.get("stream", e.get("tid", 0)) or 0)))
    if not any(ev.category in ("kernel", "nccl") for ev in events):
        raise SystraceError("the trace holds no device kernels: was CUDA activity enabled (ProfilerActivity.CUDA)?")
    return sorted(events, key=lambda ev: (ev.start_ns, ev.end_ns))


def timeline_evidence(events: list[TimelineEvent], *, tool: str, notes: str = "") -> SystemTimeline:
    """The typed timeline of ``events`` (one column per :class:`TimelineEvent` field)."""
    columns = {"name": np.array([e.name for e in events], dtype="U"),
               "category": np.array([e.category for e in events], dtype="U"),
               **{f: np.array([getattr(e, f) for e in events], dtype=np.int64)
                  for f in ("start_ns", "end_ns", "device", "stream")}}
    return SystemTimeline(events=columns, tool=tool, notes=notes)


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0)


def phase_summary(events: list[TimelineEvent]) -> dict:
    """Per-category busy time (ns, union over streams), per-stream counts, and NCCL/compute overlap (ns)."""
    out: dict = {"categories": {}, "streams": {}}
    for cat in CATEGORIES:
        evs = [(e.start_ns, e.end_ns) for e in events if e.category == cat]
        if evs:
            out["categories"][cat] = {"count": len(evs), "busy_ns": _union_ns(evs),
                                      "sum_ns": sum(e - s for s, e in evs)}
    for e in events:
        if e.category in ("kernel", "nccl", "memcpy", "memset"):
            key = f"{e.device}:{e.stream}"
            s = out["streams"].setdefault(key, {"count": 0, "busy_ns": 0})
            s["count"] += 1
            s["busy_ns"] += e.duration_ns
    comp = [(e.start_ns, e.end_ns) for e in events if e.category == "kernel"]
    comm = [(e.start_ns, e.end_ns) for e in events if e.category == "nccl"]
    both = _union_ns(comp) + _union_ns(comm) - _union_ns(comp + comm)
    out["nccl_compute_overlap_ns"] = both
    return out


def profile_callable(fn: Callable[[], object], outdir: str | os.PathLike, *, name: str = "kineto") -> Path:
    """Run ``fn`` once under torch.profiler (CPU + CUDA activities); save and return the Chrome trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        raise BackendUnavailableError(f"torch.profiler CUDA tracing needs a GPU; torch {torch.__version__} sees none")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    path = Path(outdir) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    prof.export_chrome_trace(str(tmp))
    os.replace(tmp, path)
    return path


# ---- nsys ------------------------------------------------------------------------------------

def find_nsys() -> Path | None:
    """An ``nsys`` executable: PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-systems*, or the copy in
    Nsight Compute; None when there is none."""
    cands = [shutil.which("nsys") or "", "/usr/local/cuda/bin/nsys"]
    cands += sorted(glob.glob("/opt/nvidia/nsight-systems*/bin/nsys"), reverse=True)
    cands += sorted(glob.glob("/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys"), reverse=True)
    for c in cands:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c)
    return None


def check_nsys_output(log: str, produced: list[str | os.PathLike]) -> Path:
    """The report nsys made (``.nsys-rep``/``.qdrep``), or :class:`NsysNoReportError` saying why not."""
    reports = [Path(p) for p in produced if str(p).endswith((".nsys-rep", ".qdrep"))]
    if reports:
        return reports[0]
    streams = [Path(p).name for p in produced if str(p).endswith(".qdstrm")]
    if "importer version" in log or "Importer error" in log or streams:
        raise NsysNoReportError(
            "nsys wrote only a raw .qdstrm stream (" + (", ".join(streams) or "none kept")
            + ") and could not import it into a report (its QdstrmImporter is missing or failed); "
            "system tracing uses torch.profiler instead"
        )
    raise NsysNoReportError("nsys produced no report; its output ended with: " + log.strip()[-300:])


def run_nsys(argv: list[str], outdir: str | os.PathLike, *, timeout_s: float = 300.0) -> Path:
    """Profile ``argv`` with nsys; return the report path or raise :class:`NsysNoReportError`."""
    nsys = find_nsys()
    if nsys is None:
        raise BackendUnavailableError("nsys is not installed (not on PATH, not in /opt/nvidia)")
    stem = Path(outdir) / "nsys_trace"
    proc = subprocess.run([str(nsys), "profile", "--force-overwrite", "true", "-o", str(stem)] + list(argv),
                          capture_output=True, text=True, timeout=timeout_s, env=multicast_off_env())
    produced = glob.glob(str(stem) + ".*") + glob.glob(str(Path(outdir) / "*.qdstrm"))
    return check_nsys_output(proc.stdout + proc.stderr, produced)


class SystraceAdapter(BackendAdapter):
    """System timeline of one program run.

    Config: ``tool`` ("torch_profiler", default, or "nsys"). The program is run in-process through
    ``program.launch["python"]`` = ``"module:function"`` (a callable doing one step); the nsys tool
    runs ``program.launch["argv"]`` instead.
    """

    name = "systrace"
    effects = frozenset({"exclusive_profiler"})
    outputs = ("system_timeline", "kineto_trace")
    VALID_KEYS = ("tool",)

    def validate_config(self, config: dict) -> None:
        refuse_unknown_keys(config, self.VALID_KEYS, "systrace config")
        tool = config.get("tool", "torch_profiler")
        if tool not in TOOLS:
            raise ValueError(f"systrace tool {tool!r} unknown; valid: {', '.join(TOOLS)}")

    def available(self) -> tuple[bool, str]:
        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        return (torch.cuda.is_available(), "no CUDA GPU visible to torch")

    def collect(self, ctx) -> dict[str, Path]:
        self.validate_config(ctx.config)
        outdir = Path(ctx.outdir)
        launch = getattr(ctx.program, "launch", {}) or {}
        if ctx.config.get("tool") == "nsys":
            report = run_nsys([str(a) for a in launch.get("argv", [])], outdir)
            return {"nsys_report": report}
        target = launch.get("python")
        if not target or ":" not in target:
            raise ValueError("systrace needs program.launch['python'] = 'module:function' (one step of the program)")
        import importlib

        mod_name, fn_name = target.split(":", 1)
        fn = getattr(importlib.import_module(mod_name), fn_name)
        raw = profile_callable(fn, outdir)
        events = parse_kineto_trace(json.loads(raw.read_text()))
        return {**ctx.publish(timeline_evidence(events, tool="torch_profiler")), "kineto_trace": raw}


register_backend(SystraceAdapter())
