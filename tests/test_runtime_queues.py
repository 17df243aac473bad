"""runtime.queues.drain, and the pool shutdown that uses it: queued work is dropped, never run."""
from __future__ import annotations

import queue
import threading
import time

from argus_rt.runtime.queues import drain
from argus_rt.runtime.thread_pool import CpuThreadPool


def test_drain_takes_what_is_queued_oldest_first_and_never_waits():
    q: queue.Queue = queue.Queue()
    items = [("job", i) for i in range(5)] + [None]
    for item in items:
        q.put(item)
    assert drain(q) == items
    assert q.empty()
    start = time.monotonic()
    assert drain(q) == []
    assert time.monotonic() - start < 0.5  # an empty queue returns at once, it does not block


def test_thread_pool_shutdown_drops_the_tasks_still_queued():
    pool = CpuThreadPool(workers=1)
    busy, release = threading.Event(), threading.Event()
    ran: list[str] = []
    pool.submit("first", lambda: (busy.set(), release.wait(10), ran.append("first")))
    assert busy.wait(10)  # the one thread is taken: the next two wait in the queue
    pool.submit("second", ran.append, "second")
    pool.submit("third", ran.append, "third")
    pool.shutdown()
    release.set()
    time.sleep(0.3)
    assert ran == ["first"]
