"""Process groups keyed by R, the number of SMs (CTAs) NCCL may use for communication.

R > 0 on NCCL: a new group whose communicator config has ``max_ctas = min_ctas = R``
(``ProcessGroupNCCL.Options().config``), with a high-priority internal stream. This holds the
limit per communicator; the process-wide ``NCCL_MAX_CTAS`` is never touched. R = 0 uses no NCCL
group for data (copy engines carry it), so it maps to the parent group.
On gloo (CPU tests) R has no hardware meaning: every R gets a plain gloo group so the code path
and the collective ordering stay the same.
"""
from __future__ import annotations

import torch.distributed as dist

from .config import MAX_COMM_CTAS, OverlapShapeError


def nccl_options(r: int):
    """``ProcessGroupNCCL.Options`` with max_ctas = min_ctas = r and a high-priority stream."""
    from torch.distributed import distributed_c10d as c10d

    opts = c10d.ProcessGroupNCCL.Options(is_high_priority_stream=True)
    opts.config.max_ctas = r
    opts.config.min_ctas = r
    return opts


class CommGroupPool:
    """One process group per R over the ranks of ``parent``. Creating groups is collective:
    every rank must build the pool with the same R values (sorted here, so order matches)."""

    def __init__(self, r_values, parent=None):
        self.parent = parent if parent is not None else dist.group.WORLD
        self.backend = dist.get_backend(self.parent)
        self.ranks = dist.get_process_group_ranks(self.parent)
        self._groups = {}
        for r in sorted(set(int(r) for r in r_values)):
            if not 0 <= r <= MAX_COMM_CTAS:
                raise OverlapShapeError(f"R must be in 0..{MAX_COMM_CTAS}, got {r}")
            if r == 0:
                self._groups[0] = self.parent
            elif self.backend == "nccl":
                self._groups[r] = dist.new_group(self.ranks, backend="nccl", pg_options=nccl_options(r))
            else:
                self._groups[r] = dist.new_group(self.ranks, backend=self.backend)

    @property
    def r_values(self) -> list[int]:
        return sorted(self._groups)

    def group(self, r: int):
        try:
            return self._groups[r]
        except KeyError:
            raise OverlapShapeError(f"no communication group for R={r}; this pool has R in {self.r_values}") from None
