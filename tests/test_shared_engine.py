"""SharedEngine (argus_rt/engines/shared.py): one engine for many runs, opened on the first, closed
and reopened after a run that broke it, kept after bad input, closed with its workspace."""
from __future__ import annotations

import threading

import pytest

from argus_rt.engines.shared import SharedEngine
from argus_rt.errors import ArgusInputError


class FakeEngine:
    def __init__(self, log):
        self.log, self.ws = log, self
        self.log.append("open")

    def close(self):  # the engine's and (ws is self) its workspace's close
        self.log.append("close")


def test_runs_share_one_engine_and_a_broken_run_gets_a_fresh_one(tmp_path):
    log = []
    shared = SharedEngine(tmp_path, opener=lambda _dir: FakeEngine(log))
    assert log == []  # nothing starts before a run needs it
    first = shared.run(lambda e: e)
    assert shared.run(lambda e: e) is first and shared.opened == 1
    with pytest.raises(ArgusInputError):  # bad input: the engine is fine, it stays
        shared.run(lambda e: (_ for _ in ()).throw(ArgusInputError("region 'x' unknown")))
    assert shared.run(lambda e: e) is first and log == ["open"]
    with pytest.raises(RuntimeError):  # anything else: closed (engine and workspace), reopened on the next run
        shared.run(lambda e: (_ for _ in ()).throw(RuntimeError("worker died")))
    assert log == ["open", "close", "close"]
    assert shared.run(lambda e: e) is not first and shared.opened == 2
    shared.close()
    shared.close()  # closing twice is harmless
    assert log == ["open", "close", "close", "open", "close", "close"]


def test_runs_are_serialised(tmp_path):
    shared = SharedEngine(tmp_path, opener=lambda _dir: FakeEngine([]))
    inside, overlaps = [], []

    def job(_engine):
        overlaps.append(len(inside))
        inside.append(1)
        threading.Event().wait(0.01)
        inside.pop()

    threads = [threading.Thread(target=shared.run, args=(job,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [0, 0, 0, 0]
