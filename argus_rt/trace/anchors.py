"""Cycles to nanoseconds for the anchored-timestamp build (-DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED).

Each ring holds clock64 stamps (cycles of its SM) and two (globaltimer ns, clock64) anchor pairs:
``first`` (taken when the warp claimed the ring) and ``last`` (the latest of records 1, 2, 4, 8,
16 and every 32nd).
A ring's stamps become ns as ``first_timer + (cycles - first_clock) * ns_per_cycle``. The rate
comes from, in order of preference:

  ring    the ring's own two anchors, when they are at least MIN_SPAN_NS apart;
  sm      a least-squares line through every anchor of that SM (clock64 is one counter per SM);
  launch  one rate shared by all SMs (one clock domain), fitted with a separate offset per SM.

The rate is an average over the anchored interval: if the SM clock changes inside it (DVFS), ns
between anchors are off by the change; the 32-record anchor period bounds how long that can last.

The timer advances in 32 ns steps, so two anchors bound a span to within about 2 x 32 ns; a span
of MIN_SPAN_NS (6.4 us) keeps that error at 1%. When no source reaches it, the rate of the widest
span is used and the trace says so (``approximate``); when even that is below MIN_USABLE_SPAN_NS,
no honest conversion exists and :class:`ClockConversionError` is raised.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ClockConversionError

TIMER_STEP_NS = 32
MIN_SPAN_NS = 100 * 2 * TIMER_STEP_NS  # 1% of the span covers two timer steps
MIN_USABLE_SPAN_NS = 10 * 2 * TIMER_STEP_NS  # below this the rate would be off by more than 10%
# SM clocks between 0.1 and 10 GHz: a rate outside comes from damaged anchors, not from a GPU.
MIN_NS_PER_CYCLE, MAX_NS_PER_CYCLE = 0.1, 10.0


@dataclass(frozen=True)
class RingAnchors:
    """Anchor pairs of one ring (ns from %globaltimer, cycles from clock64 of SM ``sm``)."""

    ring: int
    sm: int
    first_timer: int
    first_clock: int
    last_timer: int
    last_clock: int
    claims: int = 1  # CTA instances that appended here; > 1: later anchors may come from another SM

    @property
    def span_ns(self) -> int:
        return self.last_timer - self.first_timer

    @property
    def span_cycles(self) -> int:
        return self.last_clock - self.first_clock


@dataclass(frozen=True)
class RingRate:
    """How one ring's cycles become ns: offset anchor, rate (ns per cycle) and its source."""

    first_timer: int
    first_clock: int
    ns_per_cycle: float
    source: str  # "ring", "sm" or "launch"


def _line_fit(clock: np.ndarray, timer: np.ndarray, group: np.ndarray) -> float | None:
    """Slope (ns per cycle) of timer vs clock with one intercept per group; None if undefined."""
    num = den = 0.0
    for g in np.unique(group):
        sel = group == g
        c = clock[sel] - clock[sel].mean()
        t = timer[sel] - timer[sel].mean()
        num += float((c * t).sum())
        den += float((c * c).sum())
    if den <= 0.0 or num <= 0.0:
        return None
    return num / den


def _timer_span(timer: np.ndarray, group: np.ndarray) -> int:
    """Widest anchor timer range within one group (the clock counters of groups are unrelated)."""
    return max((int(timer[group == g].max() - timer[group == g].min()) for g in np.unique(group)), default=0)


def fit_rates(anchors: list[RingAnchors]) -> tuple[dict[int, RingRate], list[str]]:
    """Rate of every ring (keyed by ring index) and the approximations made, as problem strings."""
    if not anchors:
        return {}, []
    # Rings appended by several CTA instances may hold anchors of two SMs: keep them out of every fit;
    # they are converted with their first anchor and a fitted rate (the decoder flags them).
    single = [a for a in anchors if a.claims == 1]
    for a in single:
        if a.span_ns < 0 or a.span_cycles < 0:
            raise ClockConversionError(
                f"ring {a.ring} (SM {a.sm}): latest anchor ({a.last_timer} ns, {a.last_clock} cycles) is before the "
                f"first ({a.first_timer} ns, {a.first_clock} cycles); the anchors cannot convert its cycles"
            )
    if not single:
        single = [RingAnchors(a.ring, a.sm, a.first_timer, a.first_clock, a.first_timer, a.first_clock) for a in anchors]
    sm = np.array([a.sm for a in single] * 2, dtype=np.int64)
    clock = np.array([a.first_clock for a in single] + [a.last_clock for a in single], dtype=np.float64)
    timer = np.array([a.first_timer for a in single] + [a.last_timer for a in single], dtype=np.float64)
    # Centre before fitting: raw counters (~1e12 cycles, ~1e18 ns) would lose float64 precision.
    clock -= clock.min()
    timer -= timer.min()

    sm_rate: dict[int, float] = {}
    for s in np.unique(sm):
        sel = sm == s
        if _timer_span(timer[sel], sm[sel]) >= MIN_SPAN_NS:
            rate = _line_fit(clock[sel], timer[sel], sm[sel])
            if rate is not None:
                sm_rate[int(s)] = rate
    launch_span = _timer_span(timer, sm)
    launch_rate = _line_fit(clock, timer, sm)

    rates: dict[int, RingRate] = {}
    problems: list[str] = []
    approx_rings = []
    for a in anchors:
        if a.claims == 1 and a.span_ns >= MIN_SPAN_NS and a.span_cycles > 0:
            rate, source = a.span_ns / a.span_cycles, "ring"
        elif a.sm in sm_rate:
            rate, source = sm_rate[a.sm], "sm"
        elif launch_rate is not None and launch_span >= MIN_USABLE_SPAN_NS:
            rate, source = launch_rate, "launch"
            if launch_span < MIN_SPAN_NS:
                approx_rings.append(a.ring)
        else:
            raise ClockConversionError(
                f"ring {a.ring} (SM {a.sm}): cannot convert cycles to ns: the widest anchor span of any SM is "
                f"{launch_span} ns, below the {MIN_USABLE_SPAN_NS} ns needed for 10% (and {MIN_SPAN_NS} ns for 1%) "
                f"at {TIMER_STEP_NS} ns timer steps; record more (anchors come at records 1, 2, 4, 8, 16 and every 32nd) or arm a "
                f"globaltimer build"
            )
        if not MIN_NS_PER_CYCLE <= rate <= MAX_NS_PER_CYCLE:
            raise ClockConversionError(
                f"ring {a.ring} (SM {a.sm}): its {source} anchors give {rate:.4g} ns per cycle, a {1 / rate:.4g} GHz "
                f"SM clock, outside the plausible {1 / MAX_NS_PER_CYCLE:g}-{1 / MIN_NS_PER_CYCLE:g} GHz: damaged anchors"
            )
        rates[a.ring] = RingRate(a.first_timer, a.first_clock, rate, source)
    if approx_rings:
        problems.append(
            f"approximate: {len(approx_rings)} ring(s) (first: ring {approx_rings[0]}) converted cycles to ns with a rate "
            f"fitted over only {launch_span} ns of anchors (< {MIN_SPAN_NS} ns): ns times may be off by more than 1%"
        )
    return rates, problems


def cycles_to_ns(cycles: np.ndarray, rate: RingRate) -> np.ndarray:
    """Convert one ring's clock64 stamps to globaltimer ns (uint64)."""
    delta = cycles.astype(np.int64) - np.int64(rate.first_clock)
    ns = np.rint(delta.astype(np.float64) * rate.ns_per_cycle).astype(np.int64) + np.int64(rate.first_timer)
    # Only stamps of another SM's counter (appended rings, flagged by the decoder) can fall below 0.
    return np.maximum(ns, 0).astype(np.uint64)
