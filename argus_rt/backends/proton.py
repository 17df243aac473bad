"""Proton's instrumentation mode as Argus's region trace of a ``kind="proton"`` program.

The adapter (backend ``trace`` for the ``proton`` kind, named in its kind registry entry) runs one
Proton session in a process of its own (:mod:`argus_rt.backends.proton_run`), reads the Chrome-trace
file Proton writes, and publishes every scope record as an Argus region occurrence,
``argus.region_intervals/1``, so the ``latency`` recipe's synthesis answers per scope, *observed*.
The document says where the occurrences come from (``"source": {"tool": "proton", "triton",
"mode", "file", "format"}``) and the Proton file itself is published beside it (``proton_trace``).

Proton's Chrome-trace file, as Triton 3.6 and 3.7 write it (``StreamChromeTraceWriter`` in
``third_party/proton/common/lib/TraceDataIO/TraceWriter.cpp``; Proton ships no reader for it, it is
plain JSON): ``{"displayTimeUnit": "ns", "traceEvents": [event, ...]}``, one event per scope record
per CTA and per warp (granularity ``warp``)::

    {"cname": color, "name": scope name, "cat": kernel name, "ph": "X",
     "pid": "<kernel> Core<SM id> CTA<CTA index>", "tid": "warp <warp index> (line <row>)",
     "ts": float32(cycle + (CTA init time - first CTA init time) - CTA's first cycle) / freq,
     "dur": float32(end cycle - start cycle) / freq,
     "args": {"Finalization Time (ns)": int, "Frequency (MHz)": freq (1000), "call_stack": [frames]}}

``ts`` and ``dur`` are SM clock cycles divided by a nominal ``Frequency (MHz)`` of 1000 (Proton's
presentation: cycles shown as ns, in microseconds), so ``cycles = value * freq``; durations are exact
cycle counts, starts are exact within one CTA and aligned across CTAs by their init timestamps.
``call_stack`` is Proton's host context of the launch (``ROOT``, the host scopes open at the launch,
the kernel name); the host scope the session runner opens around launch k puts ``argus_launch_<k>``
in it, which is how records are told apart by launch. The
``(line <row>)`` of ``tid`` is only the row Proton's viewer draws the slice on.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

from ..evidence import RegionIntervals
from ..fsutil import atomic_write_text
from ..kinds.errors import ProgramRunError, ReferenceMismatchError
from ..trace.layout import COORD_NONE  # the occurrence has no loop coordinate
from .base import BackendAdapter, BackendUnavailableError, refuse_unknown_keys

_PID = re.compile(r"^(?P<kernel>.+) Core(?P<sm>\d+) CTA(?P<cta>\d+)$")
_TID = re.compile(r"^warp (?P<warp>\d+) \(line \d+\)$")
# Proton instrumentation-mode options (triton/profiler/hooks/instrumentation.py, _interpret_mode), and the
# values this adapter needs where the trace's meaning depends on them: one record per warp, every warp, cycles.
MODE_NAMES = ("default",)
MODE_OPTIONS = ("metric_type", "buffer_type", "buffer_strategy", "buffer_size", "granularity",
                "sampling_strategy", "sampling_options", "optimizations")
MODE_REQUIRED = {"metric_type": "cycle", "granularity": "warp", "sampling_strategy": "none", "sampling_options": ""}
SESSION_TIMEOUT_S = 1800  # compile, two kernel builds and 1 + N launches; the worker's own task timeout is the real bound


class ProtonTraceError(ValueError):
    """A Proton trace that does not have the documented format, or records no declared scope has."""


def check_mode(mode) -> None:
    """Raise ``ValueError`` unless ``mode`` is None or a Proton mode string this adapter can read:
    ``default[:key=value]...`` with keys from :data:`MODE_OPTIONS` and :data:`MODE_REQUIRED` kept."""
    if mode is None:
        return
    if not isinstance(mode, str) or not mode:
        raise ValueError(f"proton config 'mode' must be a Proton mode string such as 'default:buffer_size=8192', "
                         f"got {mode!r}")
    name, *opts = mode.split(":")
    if name not in MODE_NAMES:
        raise ValueError(f"proton mode {name!r} is not supported; valid: {', '.join(MODE_NAMES)} (its options: "
                         f"{', '.join(MODE_OPTIONS)})")
    for opt in opts:
        key, eq, value = opt.partition("=")
        if not eq or key not in MODE_OPTIONS:
            raise ValueError(f"proton mode option {opt!r} is not key=value with a key among {', '.join(MODE_OPTIONS)}")
        if key in MODE_REQUIRED and value != MODE_REQUIRED[key]:
            raise ValueError(f"proton mode option {key}={value!r}: Argus reads Proton's trace as one record per warp "
                             f"of every warp in cycles, so {key} must be {MODE_REQUIRED[key]!r}")


def read_proton_trace(path: Path) -> dict:
    """Proton's Chrome-trace file as JSON (Proton offers no other reader); :class:`ProtonTraceError`
    when it is not a ``{"traceEvents": [...]}`` document."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProtonTraceError(f"{path}: not a readable JSON file ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ProtonTraceError(f"{path}: a Proton trace is a JSON object with a 'traceEvents' list")
    return doc


def _event_fields(ev, i: int, launch_scope: str) -> tuple:
    """(scope name, kernel, sm, cta, warp, launch frame, ts, dur, freq) of trace event ``i``; the launch
    frame is the one call-stack frame that starts with ``launch_scope``."""
    if not isinstance(ev, dict):
        raise ProtonTraceError(f"traceEvents[{i}] is {type(ev).__name__}, not an event object")
    if ev.get("ph") != "X":
        raise ProtonTraceError(f"traceEvents[{i}] has ph {ev.get('ph')!r}; Proton writes each scope record as a "
                               "complete event ('X')")
    pid, tid = _PID.match(str(ev.get("pid", ""))), _TID.match(str(ev.get("tid", "")))
    if pid is None or tid is None:
        raise ProtonTraceError(f"traceEvents[{i}]: pid {ev.get('pid')!r} / tid {ev.get('tid')!r} are not "
                               "'<kernel> Core<sm> CTA<cta>' / 'warp <w> (line <n>)'")
    args = ev.get("args") or {}
    stack, freq = args.get("call_stack"), args.get("Frequency (MHz)")
    ts, dur = ev.get("ts"), ev.get("dur")
    frames = [str(f) for f in stack if str(f).startswith(launch_scope)] if isinstance(stack, list) else []
    if len(frames) != 1:
        raise ProtonTraceError(f"traceEvents[{i}]: args.call_stack {stack!r} does not hold exactly one launch scope "
                               f"frame {launch_scope}<k>")
    for key, value in (("ts", ts), ("dur", dur), ("args.Frequency (MHz)", freq)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ProtonTraceError(f"traceEvents[{i}]: {key} is {value!r}, not a number")
    if dur < 0 or freq <= 0:
        raise ProtonTraceError(f"traceEvents[{i}]: dur {dur} / frequency {freq} MHz must not be negative")
    return (ev.get("name"), ev.get("cat"), int(pid["sm"]), int(pid["cta"]), int(tid["warp"]), frames[0],
            float(ts), float(dur), float(freq))


def _float32_step_cycles(value: float, freq: float) -> float:
    """Cycles between adjacent float32 values at ``value`` (Proton writes ts and dur as float32)."""
    import numpy as np

    return float(np.spacing(np.float32(abs(value)))) * freq


def proton_occurrences(doc: dict, region_of_scope: dict[str, tuple[str, int]], *, kernel: str, launches: int,
                       ctas: int, num_warps: int, launch_scope: str = "argus_launch_", warmup_launches: int = 1) -> dict:
    """``argus.region_intervals/1`` columns and checks from a Proton trace document (module docstring).

    ``region_of_scope``: {scope name: (qualified region name, region id)}. Launch frames
    ``<launch_scope>0`` .. ``<launch_scope>{warmup_launches - 1}`` are warm-up launches and dropped;
    the others become ``launch`` 0 .. ``launches - 1``. Returns ``{"columns", "problems", "incomplete",
    "tolerance_cycles", "nesting_violations"}``; problems are records missing for a (launch, CTA, warp)
    that ran (Proton's buffer dropped them: ``incomplete``) and occurrences that do not lie inside an
    occurrence of their parent region on the same warp (beyond ``tolerance_cycles``, the float32 rounding
    of Proton's ``ts``). Raises :class:`ProtonTraceError` for any record of another kernel, scope or launch."""
    names = {rid: name for name, (_region, rid) in region_of_scope.items()}
    parent_of = {}
    by_region = {region: rid for region, rid in region_of_scope.values()}
    for region, rid in by_region.items():
        parent = region.rpartition("/")[0]
        parent_of[rid] = by_region.get(parent) if parent else None
    cols: dict[str, list] = {k: [] for k in ("region_id", "start", "end", "sm", "cta", "warp", "coord", "launch")}
    tolerance = 0.0
    for i, ev in enumerate(doc["traceEvents"]):
        scope, cat, sm, cta, warp, frame, ts, dur, freq = _event_fields(ev, i, launch_scope)
        if cat != kernel:
            raise ProtonTraceError(f"traceEvents[{i}] is a record of kernel {cat!r}; the session launched {kernel!r} only")
        if scope not in region_of_scope:
            raise ProtonTraceError(f"traceEvents[{i}] records scope {scope!r}, which is no declared region; scopes: "
                                   f"{', '.join(sorted(region_of_scope))}")
        k = frame[len(launch_scope):]
        if not k.isdigit() or int(k) >= warmup_launches + launches:
            raise ProtonTraceError(f"traceEvents[{i}]: call-stack frame {frame!r} is not a launch scope "
                                   f"{launch_scope}0..{warmup_launches + launches - 1}")
        if int(k) < warmup_launches:
            continue
        start = round(ts * freq)
        tolerance = max(tolerance, 2 * _float32_step_cycles(ts, freq))
        for key, v in (("region_id", region_of_scope[scope][1]), ("start", start), ("end", start + round(dur * freq)),
                       ("sm", sm), ("cta", cta), ("warp", warp), ("coord", COORD_NONE), ("launch", int(k) - warmup_launches)):
            cols[key].append(v)
    problems: list[str] = []
    seen = {(la, c, w) for la, c, w in zip(cols["launch"], cols["cta"], cols["warp"])}
    want = launches * ctas * num_warps
    if len(seen) != want:
        problems.append(f"records of {len(seen)} (launch, CTA, warp) of {want} ({launches} launches x {ctas} CTAs x "
                        f"{num_warps} warps): Proton dropped some (a larger buffer_size keeps them)")
    violations = _nesting_violations(cols, parent_of, math.ceil(tolerance))
    if violations:
        first = violations[0]
        problems.append(f"{len(violations)} occurrences lie outside every occurrence of their parent region on the same "
                        f"warp (first: {names.get(first[0], first[0])!r} at launch {first[1]}, CTA {first[2]}, warp {first[3]})")
    return {"columns": cols, "problems": problems, "incomplete": len(seen) != want,
            "tolerance_cycles": math.ceil(tolerance), "nesting_violations": len(violations)}


def _nesting_violations(cols: dict, parent_of: dict, tolerance: int) -> list[tuple]:
    """(region id, launch, cta, warp) of each occurrence not inside one of its parent's on its warp."""
    groups: dict[tuple, list[int]] = {}
    for row, key in enumerate(zip(cols["launch"], cols["cta"], cols["warp"])):
        groups.setdefault(key, []).append(row)
    out = []
    for (launch, cta, warp), rows in groups.items():
        for r in rows:
            parent = parent_of.get(cols["region_id"][r])
            if parent is None:
                continue
            inside = any(cols["region_id"][p] == parent and cols["start"][p] - tolerance <= cols["start"][r]
                         and cols["end"][r] <= cols["end"][p] + tolerance for p in rows)
            if not inside:
                out.append((cols["region_id"][r], launch, cta, warp))
    return out


def region_intervals_document(occ: dict, source: dict, *, launches: int, max_rel_err: float | None) -> dict:
    """The published ``argus.region_intervals/1`` document of :func:`proton_occurrences`' result."""
    return {"format": "argus.region_intervals/1", "clock": "cycles", "columns": occ["columns"], "coord_kind": None,
            "launches": launches, "dropped": 0, "incomplete": occ["incomplete"], "problems": occ["problems"],
            "granularity": "warp", "reference_check": {"max_rel_err": max_rel_err}, "source": source,
            "nesting": {"tolerance_cycles": occ["tolerance_cycles"], "violations": occ["nesting_violations"]},
            "notes": [f"occurrences are Proton {source['triton']} instrumentation-mode scope records "
                      f"(mode {source['mode']!r}, file {source['file']}), one per scope per warp, in SM cycles"]}


class ProtonScopeTrace(BackendAdapter):
    """Backend ``trace`` for ``kind="proton"`` programs: Proton's instrumentation mode, its scopes as
    region occurrences (module docstring). Config: ``mode`` (optional), a Proton mode string checked
    by :func:`check_mode`; default: Proton's default mode."""

    name = "trace"
    effects = frozenset({"perturbs_timing"})  # Proton's records add clock reads and stores to the kernel
    outputs = ("region_intervals",)
    VALID_KEYS = ("mode",)

    def validate_config(self, config: dict) -> None:
        refuse_unknown_keys(config, self.VALID_KEYS, "proton trace config")
        check_mode(config.get("mode"))

    def available(self) -> tuple[bool, str]:
        import importlib.util

        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        if importlib.util.find_spec("triton") is None or importlib.util.find_spec("triton.profiler") is None:
            return False, "Proton (triton.profiler, part of Triton >= 3.6) is not installed"
        return torch.cuda.is_available(), f"no CUDA GPU visible to torch {torch.__version__}"

    def collect(self, ctx) -> dict[str, Path]:
        import dataclasses

        from ..gpu_env import child_env
        from ..kinds.proton.scopes import region_of_scope

        self.validate_config(ctx.config)
        outdir = Path(ctx.outdir)
        launches = int(ctx.sampling.get("repeats", 1))
        prog = dataclasses.replace(ctx.program, root=str(Path(ctx.program.root).resolve())) \
            if ctx.program.root else ctx.program
        program_json = outdir / "program.json"
        atomic_write_text(program_json, json.dumps(prog.to_dict()))
        argv = [sys.executable, "-m", "argus_rt.backends.proton_run", "--program", str(program_json),
                "--outdir", str(outdir), "--launches", str(launches)]
        if ctx.config.get("mode"):
            argv += ["--mode", ctx.config["mode"]]
        proc = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=SESSION_TIMEOUT_S)
        if proc.returncode != 0:
            raise _session_error(outdir, proc)
        result = json.loads((outdir / "result.json").read_text(encoding="utf-8"))
        trace_path = outdir / result["trace_file"]
        scopes = {scope: (region.name, region.id) for scope, region in region_of_scope(ctx.program).items()}
        occ = proton_occurrences(read_proton_trace(trace_path), scopes, kernel=result["kernel"], launches=launches,
                                 ctas=result["ctas"], num_warps=result["num_warps"],
                                 launch_scope=result["launch_scope"], warmup_launches=result["warmup_launches"])
        source = {"tool": "proton", "triton": result["triton"], "mode": result["mode"], "file": result["trace_file"],
                  "format": result["format"], "output": "proton_trace"}
        doc = region_intervals_document(occ, source, launches=launches, max_rel_err=result["max_rel_err"])
        return {**ctx.publish(RegionIntervals.from_document(doc, "Proton trace")), "proton_trace": trace_path}


def _session_error(outdir: Path, proc) -> Exception:
    """The exception a failed session process stands for, from its ``error.json`` (else its stderr)."""
    try:
        err = json.loads((outdir / "error.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        tail = "; ".join(ln for ln in proc.stderr.strip().splitlines()[-3:])
        return ProgramRunError(f"the Proton session process exited {proc.returncode}: {tail or 'no output'}")
    kind = {"unavailable": BackendUnavailableError, "reference": ReferenceMismatchError}.get(err.get("error"),
                                                                                              ProgramRunError)
    return kind(f"Proton session: {err.get('message')}")
