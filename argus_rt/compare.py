"""Compare two program versions with repeats, and say whether each difference exceeds run-to-run noise.

    import argus_rt
    cmp = argus_rt.compare("my_kernel", "pv-1a2b...", region="main/gemm", signals=["latency"], repeats=5)
    for row in cmp.rows:
        print(row["region"], row["metric"], row["difference"], row["verdict"])

``version_a`` / ``version_b`` are what the rest of the API names a program by: a
:class:`~argus_rt.program.ProgramVersion`, a program directory (or its ``argus_program.json``), the name
of a shipped example, or a workspace version id (``pv-...``, e.g. what ``fork`` made).

**How it runs.** Both versions are queried ``repeats`` times through the normal query path, so
evidence is reused from the workspace and published to it. Each repeat is a separate collection:
repeat ``i`` plans with ``sampling={"trial": i}``, and the trial index is part of every task id
(:func:`argus_rt.tasks.check_sampling`), so repeat 3 never reuses repeat 2's runs, while asking the
same comparison again (or with more repeats) reuses the repeats already collected. Trial 0 is a
plain query's sampling, so an earlier ``query`` of a version is its first repeat. The two versions
alternate (A B, B A, A B, ...) so that a slow drift of the machine does not fall on one side.

**The noise rule** (:func:`noise_rule`). The sample unit is one value per repeat: for each
(signal, region, metric) each version gives one number per repeat (its ``p50``, ``mean``,
``count``, ...). A trace signal such as ``latency`` comes from one traced launch per repeat; the
occurrences inside one launch are not independent repeats, so the rule never pools them: it uses
each repeat's summary value. Each version reports its median over repeats, min/max, and a
percentile bootstrap interval of that median. The difference is ``median(B) - median(A)`` (and the
ratio ``median(B) / median(A)``). Its interval is a percentile bootstrap: the repeats of A and of B
are resampled with replacement, independently, :data:`RESAMPLES` times (numpy, seeded per row
from :data:`SEED` and the row's key, so a comparison is reproducible), and the central
:data:`CONFIDENCE` of ``median(B*) - median(A*)`` is kept. The verdict is ``"differs"`` only if
that interval excludes 0, else ``"within noise"``; with fewer than :data:`MIN_REPEATS` values on
either side it is ``"insufficient repeats"`` (no interval). With few repeats a percentile bootstrap
is optimistic (the interval is too narrow), so use 5 or more for decisions.

**Never joined silently.** A row whose two sides are not the same quantity carries the verdict
``"incompatible: <why>"`` and no difference: a region present in one version only, a region whose
ID differs, any attributed value when the region trees differ at all (PC-keyed counts are split
between the regions that share a PC, so another tree splits them differently), values qualified
differently (observed vs attributed) or in different units, a signal one version's kind cannot
give, a ``warp_role`` scope that names different warps. A side with no value is
``"unanswered: <why>"``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ArgusInputError
from .program import ProgramVersion, load_program
from .recipes import get_recipe, signals, unsupported_reason
from .regions import UnknownRegionError
from .scope import Scope

COMPARE_VERSION = 1
DEFAULT_REPEATS = 5
MIN_REPEATS = 3  # fewer values on a side: "insufficient repeats"
MAX_REPEATS = 100
CONFIDENCE = 0.95
RESAMPLES = 10_000
SEED = 0
DIFFERS, WITHIN_NOISE, INSUFFICIENT = "differs", "within noise", "insufficient repeats"
RULE = {
    "sample": "one value per repeat (a separate collection); a trace signal's occurrences within one launch "
              "are not pooled",
    "statistic": "median over repeats",
    "difference": "median(B) - median(A); ratio median(B) / median(A)",
    "interval": "percentile bootstrap of median(B*) - median(A*), A and B resampled independently with replacement",
    "confidence": CONFIDENCE, "resamples": RESAMPLES, "seed": SEED, "min_repeats": MIN_REPEATS,
    "differs_if": "the interval excludes 0",
}
SUMMARY_CHARS = 12_000  # as the MCP query summary: about 3k tokens of JSON
SUMMARY_LATENCY_METRICS = ("count", "mean", "p50", "p99")
_ORDER = {DIFFERS: 0, "incompatible": 1, "unanswered": 2, INSUFFICIENT: 3, WITHIN_NOISE: 4}


class CompareError(ArgusInputError):
    """Bad input to a comparison (a version, the region, the signals, the repeats)."""


# ---- the rule ---------------------------------------------------------------------------------
def _seed_for(seed: int, key) -> int:
    digest = hashlib.blake2b(f"{seed}:{json.dumps(key, sort_keys=True)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def noise_rule(a, b, *, resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = SEED,
               min_repeats: int = MIN_REPEATS) -> dict:
    """The comparison of per-repeat values ``a`` (version A) and ``b`` (version B); see the module
    docstring. Returns ``{"a": spread, "b": spread, "difference", "ratio", "interval", "verdict"}``
    where a spread is ``{"n", "median", "min", "max", "interval"}`` (interval: bootstrap interval of
    the median, ``None`` below ``min_repeats``)."""
    import numpy as np

    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not len(xa) or not len(xb):
        raise ValueError("noise_rule needs at least one value on each side")
    med_a, med_b = float(np.median(xa)), float(np.median(xb))

    def spread(x, med, interval):
        return {"n": int(len(x)), "median": med, "min": float(x.min()), "max": float(x.max()), "interval": interval}

    out = {"difference": med_b - med_a, "ratio": (med_b / med_a) if med_a != 0 else None}
    if min(len(xa), len(xb)) < min_repeats:
        return {**out, "a": spread(xa, med_a, None), "b": spread(xb, med_b, None), "interval": None,
                "verdict": INSUFFICIENT}
    rng = np.random.default_rng(seed)
    boot_a = np.median(xa[rng.integers(0, len(xa), size=(resamples, len(xa)))], axis=1)
    boot_b = np.median(xb[rng.integers(0, len(xb), size=(resamples, len(xb)))], axis=1)
    tail = (1.0 - confidence) / 2.0

    def interval(x):
        lo, hi = np.quantile(x, [tail, 1.0 - tail])
        return [float(lo), float(hi)]

    diff = interval(boot_b - boot_a)
    verdict = DIFFERS if diff[0] > 0 or diff[1] < 0 else WITHIN_NOISE
    return {**out, "a": spread(xa, med_a, interval(boot_a)), "b": spread(xb, med_b, interval(boot_b)),
            "interval": diff, "verdict": verdict}


# ---- inputs -----------------------------------------------------------------------------------
def resolve_version(ref, workspace=None, *, allow_unsafe_flags: bool = False, noun: str = "version") -> ProgramVersion:
    """The :class:`ProgramVersion` that ``ref`` names: a version, a program directory or
    ``argus_program.json`` path, a shipped example's name, or a version id (``pv-...``) of
    ``workspace`` (a path or :class:`~argus_rt.workspace.Workspace`). ``noun``: what errors call ``ref``
    (the MCP tools name it "program")."""
    from .resources import examples_dir

    if isinstance(ref, ProgramVersion):
        return ref
    if not isinstance(ref, (str, os.PathLike)) or not str(ref):
        raise CompareError(f"{noun} {ref!r} must be a program directory, an example name or a workspace version id")
    text = str(ref)
    if text.startswith("pv-") and not Path(text).exists():
        from .query import default_workspace
        from .workspace import Workspace

        if workspace is not None and not isinstance(workspace, (str, os.PathLike)):
            return workspace.get_program(text)
        with Workspace(workspace or default_workspace(), create=False) as ws:
            return ws.get_program(text)
    if Path(text).exists():
        return load_program(text, allow_unsafe_flags=allow_unsafe_flags)
    shipped = examples_dir() / text
    if (shipped / "argus_program.json").is_file():
        return load_program(shipped, allow_unsafe_flags=allow_unsafe_flags)
    names = sorted(p.name for p in examples_dir().iterdir() if (p / "argus_program.json").is_file())
    raise CompareError(f"{noun} {text!r} is not a path, a shipped example ({', '.join(names)}) or a workspace "
                       "version id (pv-...)")


def check_repeats(repeats) -> int:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise CompareError(f"repeats {repeats!r} must be an integer 1..{MAX_REPEATS} (at least {MIN_REPEATS} "
                           "for a verdict)")
    return repeats


def _signal_list(sigs) -> list[str]:
    if isinstance(sigs, str):
        sigs = [s for s in sigs.split(",") if s]
    sigs = list(dict.fromkeys(sigs or ()))
    if not sigs:
        raise CompareError(f"a comparison needs at least one signal; valid signals: {', '.join(signals())}")
    for s in sigs:
        get_recipe(s)  # unknown: UnknownSignalError listing the valid signals
    return sigs


def trial_sampling(trial: int) -> dict:
    """The sampling of repeat ``trial`` (trial 0 is a plain query's)."""
    return {"trial": trial} if trial else {}


# ---- what is comparable -----------------------------------------------------------------------
@dataclass
class _Sides:
    """Both versions and what differs between them that makes rows incompatible."""

    a: ProgramVersion
    b: ProgramVersion
    names_a: set = field(init=False)
    names_b: set = field(init=False)

    def __post_init__(self) -> None:
        self.names_a, self.names_b = set(self.a.regions.names), set(self.b.regions.names)

    def tree_difference(self) -> str | None:
        """The regions only one version has, in words (``None``: the trees have the same names)."""
        if self.names_a == self.names_b:
            return None
        only_a, only_b = sorted(self.names_a - self.names_b), sorted(self.names_b - self.names_a)
        return f"only in A: {', '.join(only_a) or 'none'}; only in B: {', '.join(only_b) or 'none'}"

    def region_problem(self, region: str | None, qualification: str | None) -> str | None:
        """Why values of ``region`` are not the same quantity in both versions (``None``: they are)."""
        if region is not None:
            in_a, in_b = region in self.names_a, region in self.names_b
            if in_a != in_b:
                return f"region {region} is only in version {'A' if in_a else 'B'}"
            if in_a and self.a.regions[region].id != self.b.regions[region].id:
                return f"region {region} has ID 0x{self.a.regions[region].id:08x} in A, " \
                       f"0x{self.b.regions[region].id:08x} in B"
        # PC-keyed counts are split between the regions that share a PC (n(r, p)); with other
        # regions beside or below it a region's (or <unmapped>'s) share is another quantity
        if qualification == "attributed" and self.names_a != self.names_b:
            return f"the region trees differ ({self.tree_difference()}), so PC attribution splits differently"
        return None


def _resolve_region(pv: ProgramVersion, region: str | None):
    if region is None:
        return None, None
    try:
        return pv.regions[region].name, None
    except UnknownRegionError as exc:
        return None, str(exc)


def _row_key(v: dict) -> tuple:
    return (v["signal"], v["region"], v["metric"], json.dumps(v.get("scope") or {}, sort_keys=True),
            json.dumps(v.get("join") or {}, sort_keys=True))


# ---- the comparison ---------------------------------------------------------------------------
@dataclass
class Comparison:
    """The result of :func:`compare`: :meth:`to_dict` is the JSON document (``argus_compare_version``
    1), :meth:`summary` a compact one (the MCP answer), :meth:`print` the terminal view."""

    versions: dict
    query: dict
    rows: list[dict]
    rule: dict = field(default_factory=lambda: dict(RULE))
    unanswered: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trials: list[dict] = field(default_factory=list)
    execution: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"argus_compare_version": COMPARE_VERSION, "versions": self.versions, "query": self.query,
                "rule": self.rule, "rows": self.rows, "counts": self.counts(), "unanswered": self.unanswered,
                "notes": self.notes, "trials": self.trials, "execution": self.execution}

    def counts(self) -> dict:
        out: dict[str, int] = {}
        for row in self.rows:
            word = row["verdict"].split(":")[0]
            out[word] = out.get(word, 0) + 1
        return out

    def row(self, signal: str, region: str | None, metric: str | None) -> dict:
        hits = [r for r in self.rows if (r["signal"], r["region"], r["metric"]) == (signal, region, metric)]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} rows for ({signal}, {region}, {metric})")
        return hits[0]

    def summary(self, budget_chars: int = SUMMARY_CHARS) -> dict:
        """Small enough for a context window: no per-repeat values, no ``(inclusive)`` rows, latency's
        count/mean/p50/p99 only, numbers to 4 significant digits; rows that differ or cannot be
        compared first, then the rest, cut from the end until the JSON fits ``budget_chars``
        (``omitted`` counts what was left out)."""
        keep = []
        for row in self.rows:
            metric = str(row["metric"])
            if "(inclusive)" in metric:
                continue
            if row["signal"] == "latency" and row["metric"] is not None and metric not in SUMMARY_LATENCY_METRICS:
                continue
            keep.append(_brief(row))
        keep.sort(key=lambda r: _ORDER.get(r["verdict"].split(":")[0], 9))
        head = {"argus_compare_version": COMPARE_VERSION, "detail": "summary",
                "versions": {k: {"id": v["id"], "name": v["name"]} for k, v in self.versions.items()},
                "query": self.query,
                "rule": f"differs only if the {self.rule['confidence']:.0%} percentile-bootstrap interval of "
                        f"median(B)-median(A) over per-repeat values excludes 0; under {MIN_REPEATS} repeats: "
                        "insufficient repeats",
                "counts": self.counts(), "unanswered": _unique_unanswered(self.unanswered), "notes": self.notes,
                "collect_runs": self.execution.get("collect_runs")}
        n = len(keep)
        while True:
            out = {**head, "rows": keep[:n], "omitted": len(self.rows) - n}
            if n == 0 or len(json.dumps(out)) <= budget_chars:
                return out
            n = n * 3 // 4 if n > 8 else n - 1

    def print(self, console=None) -> None:
        from rich.markup import escape
        from rich.table import Table

        from .console import make_console

        console = console or make_console()
        va, vb = self.versions["a"], self.versions["b"]
        q = self.query
        table = Table(title=f"A {va['name']} {va['id']}  vs  B {vb['name']} {vb['id']}  /  "
                            f"{q.get('region') or '(all regions)'}  ({q['repeats']} repeats each)")
        for h in ("signal", "region", "metric", "unit", "A median [min, max]", "B median [min, max]", "B - A",
                  "B / A", f"{int(CONFIDENCE * 100)}% interval of B - A", "verdict"):
            table.add_column(h, overflow="fold")
        for r in self.rows:
            a, b = r.get("a"), r.get("b")
            table.add_row(*(escape(str(c)) for c in (
                r["signal"], r["region"] or "(program)", r["metric"] if r["metric"] is not None else "",
                r.get("unit") or "", _side(a), _side(b), _num(r.get("difference")), _num(r.get("ratio")),
                _interval(r.get("interval")), r["verdict"])))
        console.print(table)
        rule = self.rule
        console.print(f"rule: one value per repeat (separate collections); differs only if the "
                      f"{rule['confidence']:.0%} percentile-bootstrap interval ({rule['resamples']} resamples, seed "
                      f"{rule['seed']}) of median(B) - median(A) excludes 0; fewer than {MIN_REPEATS} repeats: "
                      "insufficient repeats", markup=False)
        for note in self.notes:
            console.print(f"note: {note}", markup=False)
        for u in _unique_unanswered(self.unanswered):
            console.print(f"[bold red]unmeasured[/] version {u['version'].upper()} {escape(u['signal'])} "
                          f"(trials {u['trials']}): {escape(u['reason'])}")
        ex = self.execution
        console.print(f"{ex.get('collect_runs', 0)} collection runs executed; counts {self.counts()}", markup=False)


def _sig(x):
    return None if x is None else float(f"{x:.4g}")


def _brief(row: dict) -> dict:
    out = {k: row[k] for k in ("signal", "region", "metric", "unit", "qualification") if row.get(k) is not None}
    for side in ("a", "b"):
        s = row.get(side)
        if s:
            out[side] = {"median": _sig(s["median"]), "min": _sig(s["min"]), "max": _sig(s["max"]), "n": s["n"]}
            if s.get("interval"):
                out[side]["interval"] = [_sig(x) for x in s["interval"]]
    if row.get("difference") is not None:
        out["difference"] = _sig(row["difference"])
        out["ratio"] = _sig(row.get("ratio"))
        if row.get("interval"):
            out["interval"] = [_sig(x) for x in row["interval"]]
    out["verdict"] = row["verdict"]
    return out


def _unique_unanswered(items: list[dict]) -> list[dict]:
    merged: dict[tuple, dict] = {}
    for u in items:
        entry = merged.setdefault((u["version"], u["signal"], u["reason"]),
                                  {"version": u["version"], "signal": u["signal"], "reason": u["reason"], "trials": []})
        entry["trials"].append(u["trial"])
    return list(merged.values())


def _num(x) -> str:
    if x is None:
        return ""
    return f"{int(x)}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:.4g}"


def _side(s) -> str:
    return f"{_num(s['median'])} [{_num(s['min'])}, {_num(s['max'])}]" if s else ""


def _interval(iv) -> str:
    return f"[{_num(iv[0])}, {_num(iv[1])}]" if iv else ""


def _trace_note(sigs: list[str], kinds: set) -> list[str]:
    from .planner import resolve_recipes

    traced = []
    for s in sigs:
        backends = {e.backend for k in kinds for r in resolve_recipes([s], k) for e in r.evidence}
        if "trace" in backends:
            traced.append(s)
    if not traced:
        return []
    return [f"{', '.join(traced)}: each repeat is one traced launch; the region occurrences within a launch are not "
            "independent repeats, so the rule compares each repeat's summary value (count, mean, p50, ...), one "
            "sample per repeat"]


def _incompatibilities(pa: ProgramVersion, pb: ProgramVersion, region: str | None, sigs: list[str],
                       scope: Scope) -> tuple[str | None, list[str], dict]:
    """(the region's qualified name, reasons that make every row incompatible, {signal: why one side's
    kind cannot give it}). What only one side has is an incompatible row, not an error; what neither
    has is an error naming the valid choices."""
    (name_a, err_a), (name_b, err_b) = _resolve_region(pa, region), _resolve_region(pb, region)
    if err_a and err_b:  # in neither version: the valid regions, as a query says them
        raise CompareError(err_a if err_a == err_b else f"version A: {err_a}; version B: {err_b}")
    whole: list[str] = []
    if err_a or err_b:
        whole.append(f"region {region!r} is only in version {'B' if err_a else 'A'}")
    elif name_a != name_b:
        whole.append(f"region {region!r} is {name_a} in version A but {name_b} in version B")
    if scope.warp_role is not None:
        wa, wb = pa.warp_roles.get(scope.warp_role), pb.warp_roles.get(scope.warp_role)
        if wa is not None and wb is not None and wa != wb:
            whole.append(f"warp_role {scope.warp_role!r} is warps {wa} in version A but {wb} in version B")
        elif (wa is None) != (wb is None):
            whole.append(f"warp_role {scope.warp_role!r} is declared only by version {'A' if wa else 'B'}")
    kind_problem = {}
    for s in sigs:
        why_a, why_b = unsupported_reason(s, pa.kind), unsupported_reason(s, pb.kind)
        if why_a and why_b:  # neither side can: the planner's one-line error names the valid signals
            from .query import make_plan

            make_plan(pa, region, [s], scope)
        if why_a or why_b:
            kind_problem[s] = f"signal {s} {why_a or why_b}; version {'A' if why_a else 'B'} is " \
                              f"{pa.kind if why_a else pb.kind}"
    return name_a or name_b, whole, kind_problem


def _scope(scope) -> Scope:
    if scope is None:
        return Scope()
    return scope if isinstance(scope, Scope) else Scope.from_dict(scope)


def compare(version_a, version_b, region: str | None = None, signals=("latency",), scope=None, *,
            repeats: int = DEFAULT_REPEATS, workspace=None, devices: list[str] | None = None,
            progress: bool = False, timeouts: dict | None = None, cpu_pool: str = "process",
            resamples: int = RESAMPLES, seed: int = SEED, runtime=None) -> Comparison:
    """Run both versions ``repeats`` times and compare them per (signal, region, metric) with the
    noise rule; see the module docstring. ``region``, ``signals``, ``scope``, ``workspace``,
    ``devices``, ``timeouts``, ``cpu_pool`` and ``runtime`` (an open engine to run on: then its
    workspace is the one used) are as for :func:`argus_rt.query.query`."""
    from .query import default_workspace, make_plan
    from .query import query as run_query
    from .runtime.scheduler import Runtime
    from .workspace import Workspace

    repeats = check_repeats(repeats)
    _check_resamples(resamples)
    sigs, scope = _signal_list(signals), _scope(scope)
    if runtime is not None:
        workspace = runtime.ws
    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace or default_workspace())
    try:
        pa, pb = resolve_version(version_a, ws), resolve_version(version_b, ws)
        _, whole, kind_problem = _incompatibilities(pa, pb, region, sigs, scope)
        asked = [s for s in sigs if s not in kind_problem]
        reports: dict[str, list] = {"a": [], "b": []}
        trials: list[dict] = []
        started = time.perf_counter()
        if asked and not whole:
            for pv in (pa, pb):  # both validated before any run: a bad scope is one line, not a half-run
                make_plan(pv, region, asked, scope)
            with contextlib.nullcontext(runtime) if runtime is not None else \
                    Runtime(ws, devices=devices, progress=progress, cpu_pool=cpu_pool) as rt:
                for trial in range(repeats):
                    for side in (("a", "b") if trial % 2 == 0 else ("b", "a")):  # A B, B A, ...: drift cancels
                        rep = run_query(pa if side == "a" else pb, region, asked, scope, runtime=rt,
                                        sampling=trial_sampling(trial), timeouts=timeouts)
                        reports[side].append(rep)
                        trials.append({"version": side, "trial": trial,
                                       "collect_runs": rep.execution.get("collect_runs", 0),
                                       "collect": sorted({r["collect"] for r in rep.runs})})
        out = compare_reports(pa, pb, reports["a"], reports["b"], region=region, signals=sigs, scope=scope,
                              repeats=repeats, resamples=resamples, seed=seed)
        out.trials = sorted(trials, key=lambda t: (t["version"], t["trial"]))
        out.execution = {"collect_runs": sum(t["collect_runs"] for t in trials), "reports": len(trials),
                         "wall_s": round(time.perf_counter() - started, 4)}
        return out
    finally:
        if ws is not workspace:
            ws.close()


def _check_resamples(resamples) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 100:
        raise CompareError(f"resamples {resamples!r} must be an integer >= 100")


def compare_reports(version_a: ProgramVersion, version_b: ProgramVersion, reports_a: list, reports_b: list, *,
                    region: str | None = None, signals=None, scope=None, repeats: int | None = None,
                    resamples: int = RESAMPLES, seed: int = SEED) -> Comparison:
    """The comparison of reports already made: ``reports_a`` / ``reports_b`` are one
    :class:`~argus_rt.report.Report` per repeat of each version (separate collections), for the
    same ``region``, ``signals`` and ``scope``. :func:`compare` runs the repeats and calls this."""
    _check_resamples(resamples)
    scope = _scope(scope)
    sigs = _signal_list(signals if signals is not None else
                        [s for rep in [*reports_a, *reports_b] for s in rep.query.get("signals", [])])
    region_name, whole, kind_problem = _incompatibilities(version_a, version_b, region, sigs, scope)
    rows, unanswered = _rows(_Sides(version_a, version_b), {"a": list(reports_a), "b": list(reports_b)}, sigs,
                             region_name or region, whole, kind_problem, resamples=resamples, seed=seed)
    asked = [s for s in sigs if s not in kind_problem]
    notes = _trace_note(asked, {version_a.kind, version_b.kind}) if asked and not whole else []
    if version_a.id == version_b.id:
        notes.append("A and B are the same program version: every difference is run-to-run noise")
    tree = _Sides(version_a, version_b).tree_difference()
    if tree:
        notes.append(f"the region trees differ ({tree}): rows of those regions, and every attributed row, are "
                     "marked incompatible")
    versions = {side: {"id": pv.id, "name": pv.name, "kind": pv.kind, "parent": pv.parent, "root": pv.root}
                for side, pv in (("a", version_a), ("b", version_b))}
    query = {"region": region_name or region, "signals": sigs, "scope": scope.to_dict(),
             "repeats": repeats if repeats is not None else max(len(reports_a), len(reports_b))}
    return Comparison(versions=versions, query=query, rows=rows, rule={**RULE, "resamples": resamples, "seed": seed},
                      unanswered=unanswered, notes=notes)


def _rows(sides: _Sides, reports: dict, sigs: list[str], region, whole: list[str], kind_problem: dict, *,
          resamples: int, seed: int) -> tuple[list[dict], list[dict]]:
    unanswered = []
    why_unanswered: dict[tuple[str, str], str] = {}
    series: dict[tuple, dict] = {}  # row key -> {"a": [value per trial], "b": [...], "first": value}
    for side in ("a", "b"):
        for trial, rep in enumerate(reports[side]):
            for u in rep.unanswered:
                unanswered.append({"version": side, "trial": trial, "signal": u["signal"], "reason": u["reason"]})
                why_unanswered.setdefault((side, u["signal"]), u["reason"])
            for v in rep.values:
                entry = series.setdefault(_row_key(v), {"a": [], "b": [], "qual": {"a": set(), "b": set()},
                                                        "unit": {"a": set(), "b": set()}, "first": v})
                if v["value"] is not None:
                    entry[side].append(v["value"])
                entry["qual"][side].add(v["qualification"])
                entry["unit"][side].add(v.get("unit"))
    rows = []
    for s in sigs:
        if s in kind_problem or whole:
            why = "; ".join(whole) if whole else kind_problem[s]
            rows.append({"signal": s, "region": region, "metric": None, "verdict": f"incompatible: {why}"})
        elif not any(k[0] == s for k in series):
            reasons = [f"version {side.upper()}: {why_unanswered.get((side, s), 'no values')}" for side in ("a", "b")]
            rows.append({"signal": s, "region": region, "metric": None, "verdict": "unanswered: " + "; ".join(reasons)})
    for key in sorted(series, key=lambda k: (sigs.index(k[0]) if k[0] in sigs else len(sigs), str(k[1]), k[2:])):
        entry = series[key]
        first = entry["first"]
        row = {"signal": first["signal"], "region": first["region"], "metric": first["metric"], "unit": first.get("unit"),
               "qualification": first["qualification"]}
        if first.get("scope"):
            row["scope"] = first["scope"]
        if first.get("join"):
            row["join"] = first["join"]
        quals = entry["qual"]
        problem = None
        if quals["a"] and quals["b"] and (quals["a"] != quals["b"] or len(quals["a"]) > 1):
            problem = f"qualified {'/'.join(sorted(quals['a']))} in A but {'/'.join(sorted(quals['b']))} in B"
        elif entry["unit"]["a"] and entry["unit"]["b"] and entry["unit"]["a"] != entry["unit"]["b"]:
            problem = f"unit {'/'.join(map(str, sorted(entry['unit']['a'], key=str)))} in A but " \
                      f"{'/'.join(map(str, sorted(entry['unit']['b'], key=str)))} in B"
        problem = problem or sides.region_problem(first["region"], first["qualification"])
        values = {side: entry[side] for side in ("a", "b")}
        if problem:
            row.update({"values": values, "verdict": f"incompatible: {problem}"})
        elif not values["a"] or not values["b"]:
            missing = "a" if not values["a"] else "b"
            why = why_unanswered.get((missing, first["signal"]), "no value for this metric")
            row.update({"values": values, "verdict": f"unanswered: version {missing.upper()}: {why}"})
        else:
            result = noise_rule(values["a"], values["b"], resamples=resamples, seed=_seed_for(seed, list(key)))
            row.update({"a": result["a"], "b": result["b"], "difference": result["difference"],
                        "ratio": result["ratio"], "interval": result["interval"], "values": values,
                        "verdict": result["verdict"]})
        rows.append(row)
    return rows, unanswered


class _CallableModule(types.ModuleType):
    """``argus_rt.compare(a, b, ...)`` calls :func:`compare`; ``argus_rt.compare.noise_rule`` and
    ``import argus_rt.compare`` keep working (as ``argus_rt.query``)."""

    def __call__(self, *args, **kwargs) -> Comparison:
        return compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
