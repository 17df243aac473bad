"""Run a test worker on several spawned ranks and collect what each put on the queue.

A worker is ``worker(rank, world, port, q)`` and puts one ``(rank, status, payload)`` tuple on ``q``.
"""
from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker, world: int, *, wait_s: float = 120.0, join_s: float = 10.0) -> dict:
    """``{rank: (status, payload)}``; ranks still alive ``join_s`` after the results are killed."""
    import torch.multiprocessing as mp

    from argus_rt.gpu_env import force_multicast_off

    force_multicast_off()  # spawned ranks inherit this process's environment, NCCL included
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, q)) for r in range(world)]
    for p in procs:
        p.start()
    out = {}
    try:
        for _ in range(world):
            rank, status, payload = q.get(timeout=wait_s)
            out[rank] = (status, payload)
    finally:
        for p in procs:
            p.join(timeout=join_s)
            if p.is_alive():
                p.kill()
    return out
