"""The CUDA compiler as the tests see it: found the way Argus finds it (argus_rt.tools: $ARGUS_NVCC,
$CUDA_HOME, /usr/local/cuda, PATH), so a test never skips for an nvcc that Argus itself would use."""
from __future__ import annotations

import re

import pytest

from argus_rt import tools

NVCC = tools.tool_or_none("nvcc")  # Path or None
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc where argus_rt.tools looks")


def skip_without_tools(*names: str) -> None:
    """Skip the calling test unless argus_rt.tools finds every named tool (nvdisasm, cuobjdump, ...)."""
    missing = [n for n in names if tools.tool_or_none(n) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")


@pytest.fixture(scope="module", name="builds")
def megakernel_builds(tmp_path_factory):
    """builds(mode, flags=()) -> megakernel.build.build's result, compiled once per (mode, flags) per test module."""
    from megakernel.build import build

    out = {}

    def get(mode: int, flags: tuple[str, ...] = ()):
        if (mode, flags) not in out:
            out[mode, flags] = build(mode, build_dir=tmp_path_factory.mktemp(f"m{mode}"), extra_flags=flags)
        return out[mode, flags]

    return get


def cubin_sha256(result) -> str:
    """sha256 of a build result's cubin: the tests' check that a flag leaves the default binary byte-identical."""
    import hashlib
    from pathlib import Path

    return hashlib.sha256(Path(result.cubin).read_bytes()).hexdigest()


def default_tile_flags(extra: tuple[str, ...] = (), tiles=None) -> tuple[str, ...]:
    """``extra`` plus the option flags of ``tiles`` (default: the default decoder's, megakernel.dag.DEFAULT_TILES):
    the build a flag row's CPU tests compare against."""
    from megakernel.dag import DEFAULT_TILES
    from megakernel.runtime import option_flags

    return extra + option_flags(DEFAULT_TILES if tiles is None else tiles, extra)


def noearly_tile_flags(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """default_tile_flags of megakernel.dag.NOEARLY_TILES: the default before row 48, the base of rows 44-47."""
    from megakernel.dag import NOEARLY_TILES

    return default_tile_flags(extra, NOEARLY_TILES)


def main_spills(log: str) -> tuple[int, int]:
    """(spill store bytes, spill load bytes) of the megakernel's entry function in a ptxas -v log."""
    m = re.search(r"Function properties for argus_megakernel\n\s+\d+ bytes stack frame, (\d+) bytes spill stores, "
                  r"(\d+) bytes spill loads", log)
    return int(m.group(1)), int(m.group(2))


def parse_sass(lines: list[str]) -> list[tuple[int, str, str, str]]:
    """(address, guard predicate or '', opcode, operands) of each SASS line of sass_lines' output."""
    out = []
    for ln in lines:
        m = re.match(r"/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?(\S+)\s*(.*?)\s*;", ln)
        if m:
            out.append((int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4)))
    return out
