"""The numba kind's compilers: their installed versions, and the numpy releases they cannot work with.

numba and numba-cuda type and lower NumPy calls themselves, so a numpy newer than they know breaks a
compile deep inside: numba-cuda 0.30.4 under numpy 2.5 fails every kernel with ``AttributeError:
module 'numpy' has no attribute 'row_stack'`` (it registers a typing of ``np.row_stack``, the alias of
``np.vstack`` that numpy 2.5 removed; NVIDIA/numba-cuda#907, closed unfixed: numba-cuda is in
maintenance mode). :func:`incompatibility` names such a pair and its fix in one line, from the
installed versions, before numba is imported.
"""
from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass

DISTS = ("numba", "numba-cuda", "llvmlite")


@dataclass(frozen=True)
class NumpyLimit:
    """Releases of ``dist`` that fail with numpy ``numpy_from`` and later: those before ``fixed_in``
    where a fixed release exists, else those up to ``bad_through`` (the newest known to fail)."""

    dist: str
    numpy_from: tuple[int, int]
    fix: str
    fixed_in: tuple[int, ...] | None = None
    bad_through: tuple[int, ...] | None = None

    def breaks(self, version: tuple[int, ...], numpy: tuple[int, ...]) -> bool:
        if numpy[:2] < self.numpy_from:
            return False
        return version < self.fixed_in if self.fixed_in is not None else version <= self.bad_through


KNOWN_LIMITS = (
    # numba 0.67.0 is the first to accept numpy 2.5 (numba/numba#10645); older ones refuse it at import.
    NumpyLimit("numba", (2, 5), "pip install 'numba>=0.67'", fixed_in=(0, 67)),
    # No numba-cuda release compiles under numpy 2.5 (0.30.4 is the newest, 2026-07).
    NumpyLimit("numba-cuda", (2, 5), "pip install 'numpy<2.5'", bad_through=(0, 30, 4)),
)


def installed() -> dict[str, str | None]:
    """The installed version of each of :data:`DISTS` (None: not installed)."""
    out = {}
    for dist in DISTS:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def compiler_version() -> str:
    """``"numba X numba-cuda Y llvmlite Z"`` (the kind's ``compiler`` hook; "unknown" for one not
    installed)."""
    return " ".join(f"{dist} {version or 'unknown'}" for dist, version in installed().items())


def release(version: str) -> tuple[int, ...]:
    """The release numbers a version string starts with: "0.30.4" -> (0, 30, 4), "2.5.0rc1" -> (2, 5, 0)."""
    m = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def incompatibility(versions: dict[str, str | None] | None = None, numpy_version: str | None = None) -> str | None:
    """``"numba-cuda 0.30.4 does not support numpy 2.5.2; pip install 'numpy<2.5'"`` where an installed
    compiler is known not to work with the installed numpy (:data:`KNOWN_LIMITS`); None otherwise."""
    if numpy_version is None:
        import numpy

        numpy_version = numpy.__version__
    versions = installed() if versions is None else versions
    for limit in KNOWN_LIMITS:
        version = versions.get(limit.dist)
        if version and limit.breaks(release(version), release(numpy_version)):
            return f"{limit.dist} {version} does not support numpy {numpy_version}; {limit.fix}"
    return None


def explain_missing_numpy_name(exc: BaseException) -> str | None:
    """For an ``AttributeError`` on numpy raised inside a compile (a numpy name this numba still uses and
    this numpy no longer has), one line naming the versions; None for any other error."""
    m = re.match(r"module 'numpy' has no attribute '(\w+)'", str(exc))
    if not isinstance(exc, AttributeError) or m is None:
        return None
    import numpy

    pair = ", ".join(f"{d} {v}" for d, v in installed().items() if v and d != "llvmlite")
    return (f"{pair} use numpy.{m.group(1)}, which numpy {numpy.__version__} does not have: this numba does not "
            "support this numpy (install a numba and numba-cuda released after it, or an older numpy)")
