"""A proton program's launch is checked against the Triton launch schema its kind names (CPU)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from argus_rt.kinds.registry import find_kind
from argus_rt.program import ProgramError, load_program

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "triton_proton"


def _copy(tmp_path: Path, **launch) -> Path:
    tmp_path.mkdir()
    for name in ("argus_program.json", "regions.json", "softmax_scopes.py"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    spec = json.loads((tmp_path / "argus_program.json").read_text())
    spec["launch"].update(launch)
    (tmp_path / "argus_program.json").write_text(json.dumps(spec))
    return tmp_path


def test_the_proton_kind_names_the_triton_launch_schema():
    assert find_kind("proton").launch_schema == find_kind("triton").launch_schema == "program#/$defs/tritonLaunch"


def test_the_example_loads_and_a_bad_launch_is_one_line_naming_the_key(tmp_path):
    assert load_program(EXAMPLE).launch["kernel"] == "softmax_kernel"
    with pytest.raises(ProgramError, match=r"launch\.num_warps: 3 is not a warp count: 1, 2, 4, 8, 16 or 32") as info:
        load_program(_copy(tmp_path / "warps", num_warps=3))
    assert "\n" not in str(info.value)
    with pytest.raises(ProgramError, match=r"launch.*no_such_key"):
        load_program(_copy(tmp_path / "extra", no_such_key=1))
