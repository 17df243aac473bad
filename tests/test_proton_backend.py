"""The Proton backend on the CPU (issue 20, item 3): Proton's Chrome trace -> Argus region occurrences ->
latency, config checks, and the one-line errors for a missing Proton and a kernel without scopes.

The traces here are written by :func:`proton_chrome_trace`, which follows Proton's writer in Triton 3.6
(``StreamChromeTraceWriter::writeKernel``, ``third_party/proton/common/lib/TraceDataIO/TraceWriter.cpp``):
per launch, per SM, per CTA, per warp, one ``ph: "X"`` event per scope record; ``ts`` is the record's
start cycle shifted by the CTA's init time, both float32 divided by the nominal 1000 MHz; ``dur`` is the
cycle count, float32 divided likewise; ``pid`` / ``tid`` / ``args`` as there. The GPU test
(tests/test_proton_backend_gpu.py) reads the file Proton itself writes.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from argus_rt.backends import proton as pb
from argus_rt.program import load_program
from argus_rt.runtime.handlers import TaskContext, get_handler
from argus_rt.tasks import Task

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "triton_proton"
KERNEL = "softmax_kernel"
# (scope, start, end) cycles from the CTA's first record, one warp; warps are shifted by their index
SCOPES = [("row", 0, 900), ("load", 20, 300), ("normalize", 310, 700), ("max", 320, 450), ("sum", 460, 650),
          ("store", 710, 880)]
REGIONS = {"row": "row", "load": "row/load", "normalize": "row/normalize", "max": "row/normalize/max",
           "sum": "row/normalize/sum", "store": "row/store"}


def _line_ids(events):
    """Proton's assignLineIds: each event on the first row where it overlaps nothing, by start cycle."""
    lines, out = [], {}
    for idx, (_s, start, end) in sorted(enumerate(events), key=lambda e: e[1][1]):
        row = next((i for i, ivs in enumerate(lines) if all(not (start < e and end > s) for s, e in ivs)), None)
        if row is None:
            row, lines = len(lines), lines + [[]]
        lines[row].append((start, end))
        out[idx] = row
    return [out[i] for i in range(len(events))]


def proton_chrome_trace(launches: int, ctas: int, warps: int, *, scopes=SCOPES, kernel=KERNEL, base_cycle=10_000,
                        drop=()) -> tuple[dict, list[dict]]:
    """(document, truth): a trace as Proton 3.6 writes it for ``launches`` launches (launch scope frames
    ``argus_launch_<k>``) of a ``ctas`` x ``warps`` kernel; ``truth`` the records' exact cycles. ``drop``:
    (launch, cta, warp) whose records are left out (a dropped buffer)."""
    freq = np.float32(1000.0)
    kernels = []  # per launch: [(sm, cta, init_ns, [(warp, [(scope, start, end)])])]
    for k in range(launches):
        blocks = []
        for cta in range(ctas):
            init_ns = 1_000_000 * k + 50 * cta  # globaltimer-like CTA start
            per_warp = [(w, [(s, base_cycle + 7 * cta + 3 * w + a, base_cycle + 7 * cta + 3 * w + b + w)
                             for s, a, b in scopes]) for w in range(warps) if (k, cta, w) not in drop]
            blocks.append((cta % 3, cta, init_ns, per_warp))
        kernels.append(blocks)
    min_init = min(b[2] for blocks in kernels for b in blocks)
    events, truth = [], []
    for k, blocks in enumerate(kernels):
        for sm in sorted({b[0] for b in blocks}):
            for _sm, cta, init_ns, per_warp in (b for b in blocks if b[0] == sm):
                block_min = min(s for _w, evs in per_warp for _n, s, _e in evs)
                for warp, evs in per_warp:
                    for (name, start, end), line in zip(evs, _line_ids(evs)):
                        ts = start + (init_ns - min_init) - block_min
                        events.append({
                            "cname": "thread_state_running", "name": name, "cat": kernel, "ph": "X",
                            "pid": f"{kernel} Core{sm} CTA{cta}", "tid": f"warp {warp} (line {line})",
                            "ts": float(np.float32(ts) / freq), "dur": float(np.float32(end - start) / freq),
                            "args": {"Finalization Time (ns)": 812, "Frequency (MHz)": 1000.0,
                                     "call_stack": ["ROOT", f"argus_launch_{k}", kernel]}})
                        truth.append({"launch": k, "cta": cta, "sm": sm, "warp": warp, "scope": name,
                                      "cycles": end - start})
    return {"displayTimeUnit": "ns", "traceEvents": events}, truth


@pytest.fixture(scope="module")
def program():
    return load_program(EXAMPLE)


def _scopes(program):
    from argus_rt.kinds.proton.scopes import region_of_scope

    return {s: (r.name, r.id) for s, r in region_of_scope(program).items()}


def _convert(program, doc, launches=2, ctas=4, warps=2, **kw):
    return pb.proton_occurrences(doc, _scopes(program), kernel=KERNEL, launches=launches, ctas=ctas, num_warps=warps,
                                 **kw)


def test_every_record_becomes_one_occurrence_with_its_exact_cycles(program):
    doc, truth = proton_chrome_trace(3, 4, 2)  # launch 0 is the warm-up
    occ = _convert(program, json.loads(json.dumps(doc)))  # through JSON, as the file is read
    cols = occ["columns"]
    kept = [t for t in truth if t["launch"] > 0]
    assert len(cols["region_id"]) == len(kept) == 2 * 4 * 2 * len(SCOPES)
    ids = {s: rid for s, (_r, rid) in _scopes(program).items()}
    got = sorted(zip(cols["launch"], cols["cta"], cols["sm"], cols["warp"], cols["region_id"],
                     np.subtract(cols["end"], cols["start"]).tolist()))
    want = sorted((t["launch"] - 1, t["cta"], t["sm"], t["warp"], ids[t["scope"]], t["cycles"]) for t in kept)
    assert got == want
    assert occ["problems"] == [] and not occ["incomplete"] and occ["nesting_violations"] == 0
    assert set(cols["coord"]) == {pb.COORD_NONE}


def test_the_launch_frame_is_found_wherever_it_sits_in_the_call_stack(program):
    doc, _ = proton_chrome_trace(2, 2, 2)
    want = _convert(program, doc, launches=1, ctas=2)["columns"]
    for ev in doc["traceEvents"]:  # no kernel frame after it, one more host scope before it
        ev["args"]["call_stack"] = ["ROOT", "outer", ev["args"]["call_stack"][1]]
    assert _convert(program, doc, launches=1, ctas=2)["columns"] == want


def test_the_scopes_nest_as_the_regions_do_and_a_child_outside_its_parent_is_a_problem(program):
    doc, _ = proton_chrome_trace(2, 2, 2)
    assert _convert(program, doc, launches=1, ctas=2)["nesting_violations"] == 0
    moved = [("row", 0, 400)] + SCOPES[1:]  # store (710..880) now ends after row
    doc, _ = proton_chrome_trace(2, 2, 2, scopes=moved)
    occ = _convert(program, doc, launches=1, ctas=2)
    assert occ["nesting_violations"] == 2 * 2 * 2  # normalize and store, per warp of each CTA
    assert "outside every occurrence of their parent region" in occ["problems"][0]


def test_missing_warp_records_make_the_trace_incomplete(program):
    doc, _ = proton_chrome_trace(2, 2, 2, drop={(1, 1, 0)})
    occ = _convert(program, doc, launches=1, ctas=2)
    assert occ["incomplete"] and "records of 3 (launch, CTA, warp) of 4" in occ["problems"][0]


@pytest.mark.parametrize("edit, message", [
    (lambda e: e.update(name="prologue"), "records scope 'prologue', which is no declared region; scopes: load, max"),
    (lambda e: e.update(cat="other_kernel"), "record of kernel 'other_kernel'"),
    (lambda e: e.update(ph="B"), "has ph 'B'"),
    (lambda e: e.update(pid="softmax_kernel SM3"), "are not '<kernel> Core<sm> CTA<cta>'"),
    (lambda e: e["args"].update(call_stack=["ROOT", "warmup", KERNEL]), "does not hold exactly one launch scope"),
    (lambda e: e["args"].update(call_stack=["ROOT", "argus_launch_9", KERNEL]), "frame 'argus_launch_9' is not a launch"),
    (lambda e: e["args"].update(call_stack=["ROOT", "argus_launch_x", KERNEL]), "frame 'argus_launch_x' is not a launch"),
    (lambda e: e.update(dur="12"), "dur is '12', not a number"),
])
def test_a_record_that_is_not_what_proton_writes_is_refused(program, edit, message):
    doc, _ = proton_chrome_trace(2, 1, 1)
    edit(doc["traceEvents"][-1])
    with pytest.raises(pb.ProtonTraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _convert(program, doc, launches=1, ctas=1, warps=1)


def test_a_file_that_is_not_a_proton_trace_is_one_line(tmp_path):
    bad = tmp_path / "proton.chrome_trace"
    bad.write_text("[1, 2]")
    with pytest.raises(pb.ProtonTraceError, match="a Proton trace is a JSON object with a 'traceEvents' list"):
        pb.read_proton_trace(bad)
    bad.write_text("{")
    with pytest.raises(pb.ProtonTraceError, match="not a readable JSON file"):
        pb.read_proton_trace(bad)


def test_the_latency_synthesis_answers_each_scope_observed_in_cycles_naming_proton(program, tmp_path):
    doc, truth = proton_chrome_trace(3, 4, 2)
    occ = _convert(program, doc)
    source = {"tool": "proton", "triton": "3.6.0", "mode": "default:metric_type=cycle", "file": "proton.chrome_trace",
              "format": "chrome_trace", "output": "proton_trace"}
    evidence = pb.region_intervals_document(occ, source, launches=2, max_rel_err=1e-3)
    assert evidence["source"]["tool"] == "proton" and "Proton 3.6.0" in evidence["notes"][0]
    collect = Task(kind="collect", op="trace", program=program.id, device="gpu")
    synth = Task(kind="synthesize", op="latency", program=program.id, region="row", deps=(collect.id,),
                 config={"signal": "latency", "unit": "ns", "qualification": "observed"})
    path = tmp_path / "ri.json"
    path.write_text(json.dumps(evidence))
    (tmp_path / "out").mkdir()
    ctx = TaskContext(task=synth, program=program, programs=lambda pid: program, outdir=tmp_path / "out",
                      inputs={f"{collect.id}/region_intervals": path}, deps={collect.id: collect})
    facts = json.loads(Path(get_handler("synthesize", "latency")(ctx)["facts"]).read_text())
    means = {v["region"]: v for v in facts["values"] if v["metric"] == "mean"}
    assert set(means) == set(REGIONS.values())
    for scope, region in REGIONS.items():
        cycles = [t["cycles"] for t in truth if t["launch"] > 0 and t["scope"] == scope]
        assert means[region]["value"] == pytest.approx(np.mean(cycles))
        assert means[region]["unit"] == "cycles" and means[region]["qualification"] == "observed"
    for v in facts["values"]:  # every value, counts too, names Proton as the tool behind its occurrences
        prov = v["provenance"]
        assert prov["method"] == ("proton scope records (triton 3.6.0, mode default:metric_type=cycle, "
                                  "file proton.chrome_trace)"), prov
        assert prov["evidence"] == [{"task": collect.id, "backend": "trace", "program_version": program.id,
                                     "source": source}]


def test_latency_provenance_without_a_source_is_argus_s_region_trace():
    from argus_rt.synthesis import occurrences_method

    assert occurrences_method({"format": "argus.region_intervals/1"}) == "region trace"
    assert occurrences_method({"source": {"tool": "proton"}}) == "proton scope records"
    assert occurrences_method({"method": "imported", "source": {"tool": "proton"}}) == "imported"


@pytest.mark.parametrize("mode", [None, "default", "default:buffer_size=8192:buffer_type=global",
                                  "default:metric_type=cycle:granularity=warp:optimizations=clock32"])
def test_valid_modes_pass(mode):
    pb.ProtonScopeTrace().validate_config({} if mode is None else {"mode": mode})


@pytest.mark.parametrize("config, message", [
    ({"capacity": 64}, r"unknown proton trace config key\(s\) \['capacity'\]; valid: mode"),
    ({"mode": "mma"}, "proton mode 'mma' is not supported; valid: default"),
    ({"mode": "default:granularity=warp_group"}, "granularity must be 'warp'"),
    ({"mode": "default:sampling_strategy=selective"}, "sampling_strategy must be 'none'"),
    ({"mode": "default:buffersize=1"}, "'buffersize=1' is not key=value with a key among metric_type"),
    ({"mode": 3}, "must be a Proton mode string"),
])
def test_bad_config_is_one_line_naming_the_valid_ones(config, message):
    with pytest.raises(ValueError, match=message):
        pb.ProtonScopeTrace().validate_config(config)


def test_missing_proton_is_said_plainly(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.startswith("triton") else real(name, *a))
    ok, why = pb.ProtonScopeTrace().available()
    assert not ok and why == "Proton (triton.profiler, part of Triton >= 3.6) is not installed"


def test_a_failed_session_keeps_its_category(tmp_path):
    from argus_rt.backends.base import BackendUnavailableError
    from argus_rt.kinds.errors import ProgramRunError, ReferenceMismatchError

    class Proc:
        returncode, stderr = 1, "Traceback\nRuntimeError: boom\n"

    assert isinstance(pb._session_error(tmp_path, Proc()), ProgramRunError)
    assert "exited 1: Traceback; RuntimeError: boom" in str(pb._session_error(tmp_path, Proc()))
    for category, cls in (("unavailable", BackendUnavailableError), ("reference", ReferenceMismatchError)):
        (tmp_path / "error.json").write_text(json.dumps({"error": category, "message": "why"}))
        err = pb._session_error(tmp_path, Proc())
        assert type(err) is cls and str(err) == "Proton session: why"


def test_the_session_process_without_a_gpu_says_so(tmp_path, program):
    """The isolated session process itself (what the adapter runs), here where torch has no GPU."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the GPU test runs the session")
    (tmp_path / "program.json").write_text(json.dumps(program.to_dict()))
    argv = [sys.executable, "-m", "argus_rt.backends.proton_run", "--program", str(tmp_path / "program.json"),
            "--outdir", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 1
    err = json.loads((tmp_path / "error.json").read_text())
    assert err["error"] == "unavailable" and err["message"].startswith("no CUDA GPU visible to torch")


# ---- the program side: scopes found by Proton's own analysis, checked against the manifest -------------

def test_the_example_scopes_are_its_regions(program):
    from argus_rt.kinds.proton.scopes import check_program, kernel_scopes

    assert {s.name: s.region for s in kernel_scopes(program)} == REGIONS
    check_program(program)
    assert program.kind == "proton" and program.compiler.startswith("triton ")


def _scope_program(tmp_path, body: str, regions: list[str]):
    from argus_rt.regions import RegionTree

    (tmp_path / "k.py").write_text(
        "import triton\nimport triton.language as tl\nimport triton.profiler.language as pl\n\n"
        "@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n" + "".join(f"    {ln}\n" for ln in body.splitlines()))
    tree = RegionTree("k")
    for name in regions:
        tree.add(name)
    tree.save(tmp_path / "regions.json")
    (tmp_path / "argus_program.json").write_text(json.dumps({
        "name": "k", "kind": "proton", "sources": ["k.py"], "regions": "regions.json",
        "launch": {"module": "k.py", "kernel": "k", "args": {"x_ptr": {"tensor": "float32", "shape": [128]}},
                   "constexprs": {"BLOCK": 128}, "num_warps": 4, "capability": 90}}))
    return load_program(tmp_path)


def test_a_kernel_without_scopes_is_refused_at_plan_time(tmp_path):
    from argus_rt.kinds.proton.scopes import ProtonScopeError, check_program

    prog = _scope_program(tmp_path, "offs = tl.arange(0, BLOCK)\ntl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)",
                          ["k"])
    with pytest.raises(ProtonScopeError, match=r"kernel 'k' of k.py has no Proton scopes \(pl.enter_scope"):
        check_program(prog)


def test_a_manifest_that_is_not_the_scope_tree_names_the_difference(tmp_path):
    from argus_rt.kinds.proton.scopes import ProtonScopeError, check_program

    body = ('pl.enter_scope("outer")\noffs = tl.arange(0, BLOCK)\nwith pl.scope("inner"):\n'
            '    x = tl.load(x_ptr + offs)\ntl.store(x_ptr + offs, x + 1)\npl.exit_scope("outer")')
    check_program(_scope_program(tmp_path, body, ["outer", "outer/inner"]))
    (tmp_path / "b").mkdir()
    with pytest.raises(ProtonScopeError, match="scopes not in the manifest: outer/inner; manifest regions with no "
                                               "scope: inner"):
        check_program(_scope_program(tmp_path / "b", body, ["outer", "inner"]))


def test_proton_scope_analysis_results_are_checked():
    from argus_rt.kinds.proton.scopes import ProtonScopeError, scopes_from_proton

    got = scopes_from_proton([(0, "a"), (1, "b"), (2, "c")], [(1, 0), (2, 1)], "k")
    assert [(s.name, s.region) for s in got] == [("a", "a"), ("b", "a/b"), ("c", "a/b/c")]
    with pytest.raises(ProtonScopeError, match="scope 'b' is opened at two places \\('a/b' and 'c/b'\\)"):
        scopes_from_proton([(0, "a"), (1, "b"), (2, "c"), (3, "b")], [(1, 0), (3, 2)], "k")
    with pytest.raises(ProtonScopeError, match="cannot be an Argus region"):
        scopes_from_proton([(0, "load x")], [], "k")
    with pytest.raises(ProtonScopeError, match="gives no name"):
        scopes_from_proton([(0, "a")], [(0, 7)], "k")


def test_the_example_plans_latency_through_the_proton_adapter(program):
    from argus_rt.backends.base import get_backend
    from argus_rt.query import make_plan

    plan = make_plan(program, "row", ["latency"])
    collects = [t for t in plan.tasks.values() if t.kind == "collect"]
    assert [t.op for t in collects] == ["trace"]
    assert type(get_backend("trace", "proton")) is pb.ProtonScopeTrace
