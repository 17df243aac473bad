"""Kernel latency from CUDA events, each timed launch queued behind a GPU busy-wait.

With the GPU idle, a start event fires at once and the interval also holds the host's launch
latency (tens of microseconds from Python). Queued behind ~200 us of `torch.cuda._sleep`, the launch
is on the stream before its start event fires, so the events time the kernel. Contenders are
interleaved (order reversed every other round) so they share clock and power states.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable

SLEEP_CYCLES = 400_000  # ~200 us at H200 clocks: longer than one host enqueue of event + launch + event


def interleaved_event_times(runs: dict[Hashable, tuple[Callable[[], None] | None, Callable[[], None]]], reps: int, *,
                            warmup: int = 3, sync_every: int = 16) -> dict[Hashable, list[tuple[float, bool]]]:
    """Time each run ``reps`` times; ``runs``: name -> (prepare or None, launch).

    ``prepare`` (e.g. arming a trace session) runs before the busy-wait and is not timed. Returns, per
    name, (event latency in us, queued) pairs; ``queued`` says the host had enqueued the launch before
    the busy-wait ended (only then is the latency free of host launch time)."""
    import torch

    samples: dict[Hashable, list] = {name: [] for name in runs}
    names = list(runs)
    for r in range(reps + warmup):
        for name in (names if r % 2 == 0 else names[::-1]):
            prepare, launch = runs[name]
            if prepare is not None:
                prepare()
            ea, e0, e1 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            t0 = time.perf_counter()
            ea.record()
            torch.cuda._sleep(SLEEP_CYCLES)
            e0.record()
            launch()
            e1.record()
            host_us = (time.perf_counter() - t0) * 1e6
            if r >= warmup:
                samples[name].append((ea, e0, e1, host_us))
        if r % sync_every == sync_every - 1:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return {name: [(e0.elapsed_time(e1) * 1e3, host_us < ea.elapsed_time(e0) * 1e3) for ea, e0, e1, host_us in evs]
            for name, evs in samples.items()}


def median_us(samples: list[tuple[float, bool]]) -> float:
    return statistics.median(us for us, _ in samples)
