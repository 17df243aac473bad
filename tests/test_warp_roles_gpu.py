"""On a Hopper GPU: the Perfetto timeline of a warp-specialized kernel with declared warp roles
(tests/fixtures/ws_pipeline: warp 0 produces, warps 1-3 consume, through named barriers), made by
``argus query --perfetto``. The traced run's outputs are checked against the program's PyTorch reference
by the CUDA kind before anything is decoded (a failed check fails the query).

Checks: every load slice is on warp 0 and says ``producer``, every compute slice on warps 1-3 and says
``consumer``, each CTA's four warp tracks are named with their role, each consumer's compute of tile t
begins after the producer's load of tile t ended (the barrier the consumer waits at comes after the load's END: a
stamp dated before the barrier's release fails this), the file is valid against the schema and nested.
``ARGUS_PERFETTO_EXAMPLE=PATH`` also writes the default markers' timeline there. Run with the default (shared-cursor)
markers and, as a separate case, the register cursor (-DWS_REG_CURSOR=1: ARGUS_WARP_STATE() as the kernel's first
statement). The lean case of earlier runs built the shared cursor that is now the default.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from argus_rt.cli import main
from argus_rt.schema_check import validator
from argus_rt.trace.chrome import nesting_problems

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]
PROGRAM = Path(__file__).parent / "fixtures" / "ws_pipeline"
ROLE = {0: "producer", 1: "consumer", 2: "consumer", 3: "consumer"}


FLAGS = {"default": [], "register": ["-DWS_REG_CURSOR=1"]}


def _program(tmp_path: Path, markers: str) -> Path:
    """The fixture, or a copy built with the markers' extra flags."""
    if not FLAGS[markers]:
        return PROGRAM
    program = tmp_path / f"ws_pipeline_{markers}"
    shutil.copytree(PROGRAM, program)
    spec = json.loads((program / "argus_program.json").read_text())
    spec["flags"] = [*spec["flags"], *FLAGS[markers]]
    (program / "argus_program.json").write_text(json.dumps(spec, indent=2))
    return program


@pytest.mark.parametrize("markers", list(FLAGS))
def test_a_warp_specialized_kernel_s_timeline_names_each_warp_s_role(markers, tmp_path, capsys):
    program = _program(tmp_path, markers)
    out = tmp_path / "ws_pipeline.json"
    rc = main(["query", str(program), "--signals", "latency", "--workspace", str(tmp_path / "ws"), "--no-progress",
               "--perfetto", str(out)])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert [e.message for e in validator("chrome_trace").iter_errors(doc)] == [] and nesting_problems(doc) == []
    spec = json.loads((PROGRAM / "argus_program.json").read_text())["launch"]
    ctas, tiles = spec["grid"][0], spec["args"][2]["int32"]
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    warp = {e["tid"]: e["tid"] % 64 for e in slices}
    by_name: dict = {}
    for e in slices:
        assert e["args"]["warp_role"] == ROLE[warp[e["tid"]]], e
        by_name.setdefault(e["name"], []).append(e)
    assert len(by_name["pipeline/load"]) == ctas * tiles and {warp[e["tid"]] for e in by_name["pipeline/load"]} == {0}
    assert len(by_name["pipeline/compute"]) == ctas * tiles * 3
    assert {warp[e["tid"]] for e in by_name["pipeline/compute"]} == {1, 2, 3}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert len(threads) == 4 * ctas
    assert all(name == f"CTA {tid // 64} warp {tid % 64} ({ROLE[tid % 64]})" for (_, tid), name in threads.items())
    load_end = {(e["tid"] // 64, e["args"]["iteration"]): e["ts"] + e["dur"] for e in by_name["pipeline/load"]}

    def early(e) -> float:  # us by which a compute slice begins before its tile's load ended (1e-6: float rounding)
        return load_end[(e["tid"] // 64, e["args"]["iteration"])] - e["ts"]

    too_early = [e for e in by_name["pipeline/compute"] if early(e) > 1e-6]
    # a consumer never computes a tile before its load ended; on failure: which tiles, and by how much (us)
    assert too_early == [], (len(too_early), sorted({e["args"]["iteration"] for e in too_early})[:8],
                             [(e["pid"], e["tid"], e["args"]["iteration"], round(early(e), 3)) for e in too_early[:6]])
    print(f"{len(slices)} slices on {len(threads)} warp tracks; {ctas} CTAs x {tiles} tiles")
    target = os.environ.get("ARGUS_PERFETTO_EXAMPLE")
    if target and markers == "default":
        shutil.copyfile(out, target)
