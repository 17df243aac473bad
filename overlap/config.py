"""The overlap knobs and the shape rules every path checks before touching a GPU.

S: number of communication chunks the peers' rows travel in (S = 1: one exchange).
R: SMs lent to communication. R > 0: NCCL point-to-point kernels on a process group whose
   communicator has ``max_ctas = min_ctas = R`` while the GEMM is held to SMs - R through the
   cuBLASLt SM carve-out. R = 0: peer copies on the copy engines through symmetric memory.
P: communication chunks per GEMM step, i.e. the GEMM waits on a communication barrier every P
   chunks and then multiplies the rows of those P chunks in one launch per peer.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import torch

#: dtypes the operator accepts (the GEMM runs in the input dtype; bf16 is the target).
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

#: R values an NCCL communicator accepts for ``max_ctas`` (NCCL caps channels at 64).
MAX_COMM_CTAS = 64


class OverlapShapeError(ValueError):
    """A shape, dtype or knob value the overlap operator cannot run with."""


@dataclass(frozen=True, order=True)
class OverlapConfig:
    """One point of the (S, R, P) space; validated on construction."""

    S: int
    R: int
    P: int = 1

    def __post_init__(self):
        for name in ("S", "R", "P"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise OverlapShapeError(f"{name} must be an int, got {v!r} ({type(v).__name__})")
        if self.S < 1:
            raise OverlapShapeError(f"S (communication chunks) must be >= 1, got {self.S}")
        if not 0 <= self.R <= MAX_COMM_CTAS:
            raise OverlapShapeError(f"R (SMs for communication) must be in 0..{MAX_COMM_CTAS}, got {self.R}")
        if self.P < 1 or self.S % self.P:
            valid = [p for p in range(1, self.S + 1) if self.S % p == 0]
            raise OverlapShapeError(f"P (chunks per GEMM step) must divide S={self.S}; got {self.P}, valid: {valid}")

    @property
    def steps(self) -> int:
        """GEMM steps on the peers' rows (each waits on one communication barrier)."""
        return self.S // self.P

    def key(self) -> str:
        return f"S{self.S}_R{self.R}_P{self.P}"

    @classmethod
    def from_key(cls, key: str) -> "OverlapConfig":
        parts = key.split("_")
        try:
            vals = {p[0]: int(p[1:]) for p in parts}
            return cls(vals["S"], vals["R"], vals["P"])
        except (KeyError, ValueError, IndexError):
            raise OverlapShapeError(f"config key must look like 'S4_R8_P1', got {key!r}") from None


def candidate_configs(s_values, r_values, p_values=(1, 2, 4, 8), m_shard: int | None = None) -> list[OverlapConfig]:
    """All valid (S, R, P) from the grids; S = 1 is always included. With ``m_shard``, only S dividing it."""
    s_set = sorted(set(s_values) | {1})
    out = []
    for s, r, p in product(s_set, sorted(set(r_values)), sorted(set(p_values))):
        if p > s or s % p or (m_shard is not None and m_shard % s):
            continue
        out.append(OverlapConfig(s, r, p))
    return out


def chunk_bounds(m_shard: int, S: int) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) of the S equal chunks of one rank's shard."""
    if S < 1:
        raise OverlapShapeError(f"S must be >= 1, got {S}")
    if m_shard % S:
        divisors = [d for d in range(1, min(m_shard, 64) + 1) if m_shard % d == 0]
        raise OverlapShapeError(
            f"M_shard={m_shard} rows cannot be split into S={S} equal chunks; S must divide M_shard "
            f"(divisors up to 64: {divisors})")
    c = m_shard // S
    return [(i * c, (i + 1) * c) for i in range(S)]


def split_global_m(m: int, world: int) -> int:
    """Rows per rank for a global M; raises when M does not divide by the world size."""
    if world < 1:
        raise OverlapShapeError(f"world size must be >= 1, got {world}")
    if m < 1 or m % world:
        raise OverlapShapeError(f"M={m} must be a positive multiple of the world size {world} "
                                f"(A is sharded by rows); nearest valid: {max(world, m - m % world)}")
    return m // world


def parse_shape(text: str) -> tuple[int, int, int]:
    """Parse ``"M,K,N"`` (global M) into three positive ints."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise OverlapShapeError(f"--shape must be M,K,N (three integers), got {text!r}")
    try:
        m, k, n = (int(p) for p in parts)
    except ValueError:
        raise OverlapShapeError(f"--shape must be M,K,N (three integers), got {text!r}") from None
    for name, v in zip("MKN", (m, k, n)):
        if v < 1:
            raise OverlapShapeError(f"{name} must be >= 1 in --shape, got {v}")
    return m, k, n


def check_operands(a_shard: torch.Tensor, b: torch.Tensor, cfg: OverlapConfig | None = None) -> tuple[int, int, int]:
    """Validate A_shard [M_shard, K] and B [K, N]; return (M_shard, K, N)."""
    if a_shard.dim() != 2 or b.dim() != 2:
        raise OverlapShapeError(f"A_shard and B must be 2-D, got A_shard {tuple(a_shard.shape)}, B {tuple(b.shape)}")
    if a_shard.dtype != b.dtype:
        raise OverlapShapeError(f"dtype mismatch: A_shard is {a_shard.dtype}, B is {b.dtype}; both must be one of "
                                f"{[str(d) for d in SUPPORTED_DTYPES]}")
    if a_shard.dtype not in SUPPORTED_DTYPES:
        raise OverlapShapeError(f"dtype {a_shard.dtype} not supported; valid: {[str(d) for d in SUPPORTED_DTYPES]}")
    if a_shard.device != b.device:
        raise OverlapShapeError(f"A_shard is on {a_shard.device}, B on {b.device}; both must be on one device")
    m_shard, k = a_shard.shape
    k2, n = b.shape
    if k != k2:
        raise OverlapShapeError(f"inner dimensions differ: A_shard is [{m_shard}, {k}], B is [{k2}, {n}]")
    if m_shard < 1 or n < 1 or k < 1:
        raise OverlapShapeError(f"empty operand: A_shard {tuple(a_shard.shape)}, B {tuple(b.shape)}")
    if not a_shard.is_contiguous() or not b.is_contiguous():
        raise OverlapShapeError("A_shard and B must be contiguous (row-major); call .contiguous() first")
    if cfg is not None:
        chunk_bounds(m_shard, cfg.S)
    return m_shard, k, n
