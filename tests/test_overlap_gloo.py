"""Chunking and reassembly of the overlap operator on the gloo backend, real processes.

Each scenario spawns the ranks once and reports through a queue; the reference is the plain
serial path: all-gather the shards, then one matmul.
"""
from __future__ import annotations

import os
import sys
import traceback

import pytest
import torch

from tests.rank_procs import run_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _init(rank, world, port, timeout_s=30.0):
    sys.path.insert(0, ROOT)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    from overlap.safety import init_distributed

    return init_distributed("gloo", timeout_s=timeout_s)


def _reassembly_worker(rank, world, port, q):
    try:
        _init(rank, world, port)
        import torch.distributed as dist

        from overlap.config import candidate_configs
        from overlap.op import AllGatherMatmul, serial_all_gather_matmul

        m_shard, k, n = 24, 16, 12
        rt = AllGatherMatmul(r_values=(0, 8))
        results = {}
        for trial in range(2):  # fresh random inputs per trial
            a = torch.randn(m_shard, k, generator=torch.Generator().manual_seed(100 * trial + rank))
            b = torch.randn(k, n, generator=torch.Generator().manual_seed(100 * trial + 77))
            # Plain reference: every rank's shard gathered by hand, then one matmul.
            shards = [torch.empty_like(a) for _ in range(world)]
            dist.all_gather(shards, a)
            plain = torch.cat(shards) @ b
            serial = serial_all_gather_matmul(a, b)
            for cfg in candidate_configs([1, 2, 3, 4, 6, 8], [0, 8], [1, 2, 3, 4], m_shard):
                out = torch.full((world * m_shard, n), float("nan"))
                y = rt(a, b, cfg, out=out)
                err = float((y - plain).abs().max()) if not torch.isnan(y).any() else float("inf")
                results[(trial, cfg.key())] = err
            results[(trial, "serial")] = float((serial - plain).abs().max())
        q.put((rank, "ok", results))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - report to the parent instead of hanging it
        q.put((rank, "error", traceback.format_exc()))


def _bad_shape_worker(rank, world, port, q):
    try:
        _init(rank, world, port)
        import torch.distributed as dist

        from overlap.config import OverlapConfig, OverlapShapeError
        from overlap.op import AllGatherMatmul

        rt = AllGatherMatmul(r_values=(0,))
        msgs = []
        for a, b, cfg in ((torch.randn(10, 4), torch.randn(4, 3), OverlapConfig(4, 0, 1)),
                          (torch.randn(8, 4, dtype=torch.float64), torch.randn(4, 3), OverlapConfig(1, 0, 1)),
                          (torch.randn(8, 4), torch.randn(4, 3), OverlapConfig(2, 16, 1))):
            try:
                rt(a, b, cfg)
                msgs.append("no error")
            except OverlapShapeError as exc:
                msgs.append(str(exc))
        q.put((rank, "ok", msgs))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        q.put((rank, "error", traceback.format_exc()))


def _failure_worker(rank, world, port, q):
    try:
        _init(rank, world, port, timeout_s=10.0)
        from overlap.config import OverlapConfig
        from overlap.op import AllGatherMatmul

        rt = AllGatherMatmul(r_values=(0,), timeout_s=5.0)
        if rank == 1:
            q.put((rank, "died", "rank 1 exits before the exchange"))
            q.close()
            q.join_thread()  # flush the message before the abrupt exit
            os._exit(3)
        a, b = torch.randn(8, 4), torch.randn(4, 3)
        try:
            rt(a, b, OverlapConfig(2, 0, 1))
            q.put((rank, "ok", "no error: the peer's death went unnoticed"))
        except Exception as exc:  # noqa: BLE001 - the point: an error, not a hang
            q.put((rank, "raised", repr(exc)[:300]))
    except Exception:  # noqa: BLE001
        q.put((rank, "error", traceback.format_exc()))


@pytest.mark.parametrize("world", [2, 3])
def test_chunked_exchange_reassembles_exactly_the_serial_result(world):
    out = run_ranks(_reassembly_worker, world)
    for rank in range(world):
        status, payload = out[rank]
        assert status == "ok", payload
        assert len(payload) > 20
        # fp32 matmuls of the same rows in a different grouping: equal up to rounding of the sum order.
        bad = {k: v for k, v in payload.items() if not v <= 1e-4}
        assert not bad, bad


def test_bad_shapes_raise_on_every_rank_before_any_exchange():
    out = run_ranks(_bad_shape_worker, 2)
    for rank in range(2):
        status, msgs = out[rank]
        assert status == "ok", msgs
        assert "M_shard=10" in msgs[0] and "S=4" in msgs[0]
        assert "float64" in msgs[1] and "float32" in msgs[1]
        assert "R=16" in msgs[2] and "[0]" in msgs[2]


def test_a_dead_rank_ends_in_an_error_not_a_hang():
    out = run_ranks(_failure_worker, 2, wait_s=90.0)
    assert out[1][0] == "died"
    assert out[0][0] == "raised", out[0]
