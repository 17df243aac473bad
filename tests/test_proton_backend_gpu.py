"""The Proton backend on a GPU (issue 20, item 3, "The Proton backend's GPU test passes").

``argus query examples/triton_proton --signals latency`` end to end: the kernel carries Proton scopes
only, Argus runs it under Proton's instrumentation mode (after checking it against its PyTorch
reference, Proton off and on), reads the Chrome-trace file Proton wrote and answers latency per scope.
Checked here: every scope is answered, observed, in cycles, with a positive mean; the values cite a
collection whose evidence names Proton (version, mode, file) and whose Proton file is kept; every
(launch, CTA, warp) recorded every scope once; and the occurrences nest as the regions do (each child
inside its parent on its warp, siblings one after another, so a parent lasts at least its children's sum).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton.profiler")

from argus_rt.evidence import RegionIntervals  # noqa: E402
from argus_rt.program import load_program  # noqa: E402
from argus_rt.workspace import Workspace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "triton_proton"
CHILDREN = {"row": ["row/load", "row/normalize", "row/store"], "row/normalize": ["row/normalize/max", "row/normalize/sum"]}


@pytest.mark.gpu
def test_proton_scopes_answer_latency_observed_and_nested(tmp_path):
    program = load_program(EXAMPLE)
    out, ws = tmp_path / "report.json", tmp_path / "ws"
    cmd = [sys.executable, "-m", "argus_rt.cli", "query", str(EXAMPLE), "--signals", "latency",
           "--workspace", str(ws), "--json", str(out), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    report = json.loads(out.read_text())
    assert report["unanswered"] == []
    means = {v["region"]: v for v in report["values"] if v["signal"] == "latency" and v["metric"] == "mean"}
    assert set(means) == {r.name for r in program.regions}
    for v in means.values():
        assert v["qualification"] == "observed" and v["unit"] == "cycles" and v["value"] > 0, v

    cited = {ev["task"] for v in means.values() for ev in v["provenance"]["evidence"]}
    assert len(cited) == 1
    outputs = Workspace(ws, create=False).outputs(cited.pop())
    doc = RegionIntervals.from_records(outputs).document(lists=True)
    source = doc["source"]
    import triton

    assert source["tool"] == "proton" and source["triton"] == triton.__version__
    assert source["mode"].startswith("default:") and source["format"] == "chrome_trace"  # str(InstrumentationMode)
    # the workspace stores the published file content-addressed; the evidence names the file Proton wrote
    assert source["file"].endswith(".chrome_trace") and source["output"] == "proton_trace"
    assert json.loads(Path(outputs["proton_trace"].path).read_text())["traceEvents"]
    assert doc["problems"] == [] and not doc["incomplete"] and doc["nesting"]["violations"] == 0
    assert doc["reference_check"]["max_rel_err"] < 1e-2

    cols = {k: np.asarray(v) for k, v in doc["columns"].items()}
    ids = {r.name: r.id for r in program.regions}
    n_ctas, n_warps = program.launch["shapes"]["N_ROWS"], program.launch["num_warps"]  # one CTA per row
    for name, rid in ids.items():  # one record per scope per (launch, CTA, warp)
        sel = cols["region_id"] == rid
        assert sel.sum() == doc["launches"] * n_ctas * n_warps, name
        assert (cols["end"][sel] > cols["start"][sel]).all(), name
    tol = doc["nesting"]["tolerance_cycles"]
    key = cols["launch"] * (n_ctas * n_warps) + cols["cta"] * n_warps + cols["warp"]
    order = np.argsort(key, kind="stable")
    for parent, children in CHILDREN.items():
        p = {int(k): (s, e) for k, s, e, r in zip(key[order], cols["start"][order], cols["end"][order],
                                                  cols["region_id"][order]) if r == ids[parent]}
        total = dict.fromkeys(p, 0)
        for child in children:
            for k, s, e in zip(key[cols["region_id"] == ids[child]], cols["start"][cols["region_id"] == ids[child]],
                               cols["end"][cols["region_id"] == ids[child]]):
                ps, pe = p[int(k)]
                assert ps - tol <= s and e <= pe + tol, (child, parent, int(k))
                total[int(k)] += e - s
        assert all(pe - ps + tol >= total[k] for k, (ps, pe) in p.items()), parent
