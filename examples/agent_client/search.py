"""The fixed-budget search both policies run; they differ only in the order they try knob moves.

A **trial** is one configuration measured at every tuning shape (one ``fork`` + one ``query`` per
shape). Trial 1 is the program's own configuration, the baseline of every speedup. Its score is
the geometric mean over the tuning shapes of ``time(start) / time(config)``; a configuration that
fails at any tuning shape (no fork, a failed collection, a reference-check failure) is a failed
trial: it uses its slot of the budget and is never accepted (its remaining shapes are not run).

Local search: from the incumbent, the candidates are one-step moves of one knob (``BK`` 64 -> 128),
then, once those are all tried, one-step moves of two knobs, then the rest of the space nearest
first; configurations already tried, or that cannot run at some tuning shape without going out of
bounds (:meth:`KernelSpec.valid`; these are never run and use no budget), are skipped. A candidate
becomes the incumbent when its score beats the incumbent's by more than ``min_gain`` (relative), so
run-to-run noise does not walk the search.

* policy ``time`` (a): moves in a seeded random order (seeded by kernel, seed and incumbent, so both
  policies see the same order from the same incumbent);
* policy ``regions`` (b): the same order, re-sorted stably so that the moves the incumbent's
  :class:`~.evidence.Diagnosis` names (the kernel's ``remedies`` for its bottleneck) come first.
  The diagnosis is asked once per incumbent, on the first tuning shape; its queries are not trials.

Held-out shapes are measured after the search, for the start and the best configuration only.

Deadline (``stop_at``, a :func:`time.monotonic` instant): before each trial the search estimates
what the trial (and a diagnosis, if one is due) and the held-out measurements would cost, from the
measurements it has made so far; if that would end past ``stop_at`` it stops there, so the trials
left are *not run* (``SearchResult.not_run``) and the held-out shapes are still measured for the
best configuration it has.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass, field
from itertools import product
from typing import Protocol

from .evidence import Diagnosis
from .kernels import KernelSpec, shape_label

POLICIES = ("time", "regions")


class SearchError(RuntimeError):
    """The search cannot start (the baseline itself fails) or was asked for something impossible."""


@dataclass
class Measurement:
    shape: str
    time_ns: float | None            # kernel_time's untraced_median; None: failed
    failure: str | None = None
    version: str | None = None       # the fork's program version id
    rel_error: float | None = None   # against the PyTorch reference, as the collection checked it
    seconds: float = 0.0             # client wall time of this fork + query


@dataclass
class Trial:
    index: int                       # 1-based
    config: dict
    move: str
    measurements: list[Measurement]
    score: float | None              # geomean speedup over the start on the tuning shapes
    accepted: bool
    best_score: float                # the incumbent's score after this trial
    seconds: float

    @property
    def failure(self) -> str | None:
        return next((f"{m.shape}: {m.failure}" for m in self.measurements if m.failure), None)


@dataclass
class SearchResult:
    kernel: str
    policy: str
    budget: int
    tuning: list[str]
    held_out: list[str]
    trials: list[Trial]
    best_trial: int
    stopped: str
    diagnoses: list[dict] = field(default_factory=list)  # {"after_trial", "config", ...Diagnosis}
    shape_speedups: list[dict] = field(default_factory=list)  # per shape: start/best ns, speedup, held_out
    diagnosis_seconds: float = 0.0
    not_run: list[int] = field(default_factory=list)  # trial indices the deadline left out

    @property
    def best_config(self) -> dict:
        return self.trials[self.best_trial - 1].config

    def to_dict(self) -> dict:
        doc = asdict(self)
        for t, d in zip(self.trials, doc["trials"]):
            d["failure"] = t.failure
        return doc


class Evaluator(Protocol):
    async def measure(self, config: dict, shape: dict) -> Measurement: ...
    async def diagnose(self, config: dict, shape: dict) -> tuple[Diagnosis, float]: ...


def config_key(config: dict) -> tuple:
    return tuple(sorted(config.items()))


def candidate_moves(spec: KernelSpec, incumbent: dict, tuning: list[dict], tried: set) -> list[tuple]:
    """Untried, in-bounds candidates nearest the incumbent, each (((knob, steps), ...), config): one knob
    one step; else two knobs one step each; else the rest of the space by total steps (so the budget
    is spent unless every in-bounds configuration has been tried)."""
    tiers: dict = {}
    for values in product(*(k.values for k in spec.knobs)):
        config = dict(zip((k.name for k in spec.knobs), values))
        if config_key(config) in tried or any(spec.valid(config, s) for s in tuning):
            continue
        move = tuple((k.name, k.index(config[k.name]) - k.index(incumbent[k.name])) for k in spec.knobs
                     if config[k.name] != incumbent[k.name])
        steps = sum(abs(d) for _, d in move)
        tier = len(move) if steps == len(move) <= 2 else 2 + steps
        tiers.setdefault(tier, []).append((move, config))
    return tiers[min(tiers)] if tiers else []


def order_moves(spec: KernelSpec, moves: list[tuple], incumbent: dict, policy: str, seed: int,
                diagnosis: Diagnosis | None) -> list[tuple]:
    """Policy (a)'s seeded random order; policy (b) moves the diagnosis' remedies to the front."""
    rng = random.Random(f"{spec.name}:{seed}:{config_key(incumbent)}")
    moves = sorted(moves, key=lambda m: m[0])
    rng.shuffle(moves)
    if policy == "time" or diagnosis is None or diagnosis.bottleneck is None:
        return moves
    remedies = list(spec.remedies.get(diagnosis.bottleneck, ()))

    def rank(move) -> int:
        parts = [(knob, 1 if d > 0 else -1) for knob, d in move[0]]
        return min((remedies.index(p) for p in parts if p in remedies), default=len(remedies))
    return sorted(moves, key=rank)


def move_label(move) -> str:
    return ", ".join(f"{knob} {d:+d}" for knob, d in move)


class CostEstimate:
    """Device seconds of what the search has yet to do, from what it has done (memoised answers, ~0 s,
    do not count: they would make the next real measurement look free)."""

    def __init__(self) -> None:
        self.measurements: list[float] = []
        self.diagnoses: list[float] = []

    @staticmethod
    def _mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    def seconds(self, measurements: int, diagnoses: int = 0) -> float:
        return measurements * self._mean(self.measurements) + diagnoses * self._mean(self.diagnoses)


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


async def run_search(spec: KernelSpec, evaluator: Evaluator, tuning: list[dict], held_out: list[dict], *,
                     budget: int, policy: str, seed: int = 0, min_gain: float = 0.02, log=print,
                     on_trial=None, stop_at: float | None = None, clock=time.monotonic) -> SearchResult:
    """The search (module docstring); ``log`` gets one line per trial and diagnosis, ``on_trial`` each
    :class:`Trial` as it ends (the CLI appends it to a progress file, so a cut-off run keeps it);
    ``stop_at``: the deadline on ``clock`` (module docstring)."""
    if policy not in POLICIES:
        raise SearchError(f"policy {policy!r} unknown; valid: {', '.join(POLICIES)}")
    if budget < 1:
        raise SearchError(f"--budget {budget}: needs at least 1 trial (the starting configuration)")
    labels = [shape_label(s) for s in tuning]
    cost = CostEstimate()

    async def measure_all(config: dict) -> tuple[list[Measurement], float]:
        """Every tuning shape, stopping at the first that fails (the trial has failed: save the device)."""
        start, out = clock(), []
        for shape in tuning:
            t0 = clock()
            out.append(await evaluator.measure(config, shape))
            if clock() - t0 > 0.05:
                cost.measurements.append(clock() - t0)
            if out[-1].time_ns is None:
                break
        return out, clock() - start

    start_cfg = spec.start
    base, secs = await measure_all(start_cfg)
    if any(m.time_ns is None for m in base):
        raise SearchError(f"{spec.name}: the starting configuration fails, so there is no baseline: "
                          + "; ".join(f"{m.shape}: {m.failure}" for m in base if m.failure))
    base_ns = {m.shape: m.time_ns for m in base}
    trials = [Trial(1, start_cfg, "start", base, 1.0, True, 1.0, secs)]
    if on_trial:
        on_trial(trials[0])
    log(f"[{spec.name} {policy}] trial 1 start {start_cfg}: " + ", ".join(f"{m.shape} {m.time_ns:.0f} ns" for m in base)
        + f" ({secs:.1f} s)")
    incumbent, best, best_trial = start_cfg, 1.0, 1
    tried = {config_key(start_cfg)}
    diagnoses: list[dict] = []
    diagnosis, diag_for, diag_seconds = None, None, 0.0
    stopped, not_run = "budget spent", []
    while len(trials) < budget:
        diagnosis_due = policy == "regions" and diag_for != config_key(incumbent)
        if stop_at is not None and clock() + cost.seconds(len(tuning) + 2 * len(held_out), diagnosis_due) > stop_at:
            not_run = list(range(len(trials) + 1, budget + 1))
            stopped = (f"deadline: trials {not_run[0]}-{budget} not run" if len(not_run) > 1
                       else f"deadline: trial {budget} not run")
            log(f"[{spec.name} {policy}] {stopped} (a trial and the held-out shapes would end past it)")
            break
        if diagnosis_due:
            diagnosis, took = await evaluator.diagnose(incumbent, tuning[0])
            diag_for, diag_seconds = config_key(incumbent), diag_seconds + took
            cost.diagnoses.append(took)
            diagnoses.append({"after_trial": len(trials), "config": incumbent, "seconds": took, **diagnosis.to_dict()})
            log(f"[{spec.name} {policy}] diagnosis of {incumbent}: {diagnosis.bottleneck} ({diagnosis.rule})")
        moves = candidate_moves(spec, incumbent, tuning, tried)
        if not moves:
            stopped = "every in-bounds configuration has been tried"
            break
        move, config = order_moves(spec, moves, incumbent, policy, seed, diagnosis)[0]
        tried.add(config_key(config))
        measured, secs = await measure_all(config)
        ok = all(m.time_ns is not None for m in measured)
        score = geomean(base_ns[m.shape] / m.time_ns for m in measured) if ok else None
        accepted = score is not None and score > best * (1 + min_gain)
        if accepted:
            incumbent, best, best_trial = config, score, len(trials) + 1
        trial = Trial(len(trials) + 1, config, move_label(move), measured, score, accepted, best, secs)
        trials.append(trial)
        if on_trial:
            on_trial(trial)
        log(f"[{spec.name} {policy}] trial {trial.index} {trial.move}: "
            + (f"speedup {score:.3f}" if ok else f"FAILED ({trial.failure})")
            + (" accepted" if accepted else "") + f" ({secs:.1f} s)")
    speedups = [{"shape": m.shape, "held_out": False, "start_ns": base_ns[m.shape], "best_ns": m.time_ns,
                 "speedup": base_ns[m.shape] / m.time_ns, "failure": None}
                for m in trials[best_trial - 1].measurements]
    for shape in held_out:  # never seen by the search: measured once it is over
        s, b = await evaluator.measure(start_cfg, shape), await evaluator.measure(incumbent, shape)
        ok = s.time_ns is not None and b.time_ns is not None
        speedups.append({"shape": s.shape, "held_out": True, "start_ns": s.time_ns, "best_ns": b.time_ns,
                         "speedup": s.time_ns / b.time_ns if ok else None,
                         "failure": None if ok else (s.failure and f"start: {s.failure}") or f"best: {b.failure}"})
    return SearchResult(spec.name, policy, budget, labels, [shape_label(s) for s in held_out], trials, best_trial,
                        stopped, diagnoses, speedups, diag_seconds, not_run)
