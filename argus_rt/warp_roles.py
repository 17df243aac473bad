"""Warp roles: which warps of a CTA do which job (``producer``, ``consumer``, ...).

A program declares them in ``argus_program.json`` as ``"warp_roles": {role: [warp index within a CTA,
...]}``; the program schema checks the names and the index range (0-31). :func:`check_warp_roles` checks
what a schema cannot: no warp in two roles, and no warp past the CTA's warps when the launch says how
many there are (:func:`warps_per_cta`). :func:`role_of_warp` is the reverse map the timeline labels warps
with (``CTA 3 warp 1 (producer)``). A Triton kernel's warp-specialized partitions give roles of their own,
read from its compiled TTGIR: :func:`argus_rt.kinds.triton.warp_partitions.partition_warp_roles`.
"""
from __future__ import annotations

import math
import re
from typing import Mapping

from .errors import ArgusInputError

ROLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # the schema's propertyNames pattern
WARP_SIZE = 32
MAX_WARPS_PER_CTA = 32  # 1024 threads, the CUDA limit
EXAMPLE = '{"producer": [0], "consumer": [1, 2, 3]}'


class WarpRoleError(ArgusInputError):
    """A warp-role declaration that names a bad role, a bad warp, or one warp twice."""


def warps_per_cta(launch: Mapping) -> int | None:
    """Warps of one CTA of a CUDA launch with a ``block`` (threads rounded up to whole warps); None when the
    launch does not fix it (a runner's launch, a Triton kernel: warp specialization adds warps to
    ``num_warps``)."""
    block = launch.get("block") if isinstance(launch, Mapping) else None
    if not isinstance(block, (list, tuple)) or not block or not all(isinstance(d, int) and d > 0 for d in block):
        return None
    return math.ceil(math.prod(block) / WARP_SIZE)


def check_warp_roles(roles: Mapping | None, warps: int | None = None) -> dict[str, list[int]]:
    """The declaration as ``{role: sorted warps}``, or :class:`WarpRoleError` in one line naming the bad
    role or warp and what is valid. ``warps``: the CTA's warp count when known (warps 0 .. warps-1)."""
    if roles is None:
        return {}
    if not isinstance(roles, Mapping):
        raise WarpRoleError(f"warp_roles: {roles!r} is not an object of role names to warp indices, e.g. {EXAMPLE}")
    limit = warps if warps is not None else MAX_WARPS_PER_CTA
    owner: dict[int, str] = {}
    out = {}
    for name in sorted(roles):
        if not isinstance(name, str) or not ROLE_NAME.match(name):
            raise WarpRoleError(f"warp_roles: role name {name!r} is not an identifier (letters, digits, '_', not "
                                f"starting with a digit), e.g. {EXAMPLE}")
        listed = roles[name]
        if not isinstance(listed, (list, tuple)) or not listed:
            raise WarpRoleError(f"warp_roles.{name}: {listed!r} is not a non-empty array of warp indices within a "
                                f"CTA, e.g. {EXAMPLE}")
        for w in listed:
            if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < limit:
                what = (f"the CTA has {warps} warps: valid are 0-{warps - 1}" if warps is not None
                        else f"valid are 0-{MAX_WARPS_PER_CTA - 1}")
                raise WarpRoleError(f"warp_roles.{name}: warp {w!r} is not a warp of the CTA; {what}")
            if w in owner and owner[w] != name:
                raise WarpRoleError(f"warp_roles: warp {w} is in both {owner[w]!r} and {name!r}; a warp has at most "
                                    "one role")
            owner[w] = name
        out[name] = sorted(set(listed))
    return out


def role_of_warp(roles: Mapping | None) -> dict[int, str]:
    """{warp index within a CTA: its role} of a declaration (checked: a warp in two roles is refused)."""
    return {w: name for name, warps in check_warp_roles(roles).items() for w in warps}
