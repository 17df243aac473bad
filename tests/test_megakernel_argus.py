"""The megakernel as an Argus program (examples/megakernel), on the CPU: it loads, plans every signal,
its three variants build with nvcc, the marker-only SASS maps PCs to regions through the opcode
switch, and the runner protocol refuses what it must. The GPU query is tests/test_megakernel_argus_gpu.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from argus_rt.evidence import RegionIntervals
from argus_rt.kinds.cuda.run import (
    CudaLaunch,
    ProgramRunError,
    ReferenceMismatchError,
    intervals_document,
)
from argus_rt.kinds.cuda.runner import RunnerContext, run_with_runner
from argus_rt.program import ProgramError, load_program
from argus_rt.query import make_plan
from argus_rt.resources import csrc_dir
from argus_rt.trace.intervals import coordinate_columns
from megakernel.regions import REGION_LEAVES, coordinate, region_tree
from toolchain import needs_nvcc

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "megakernel"
SIGNALS = ("latency", "instruction_mix", "barrier_count", "stall_reasons")


@pytest.fixture(scope="module")
def program():
    return load_program(EXAMPLE)


def test_program_loads_with_the_megakernels_regions_and_every_kernel_source(program):
    spec = json.loads((EXAMPLE / "argus_program.json").read_text())
    assert program.kind == "cuda" and program.launch["runner"] == "argus_runner.py:run"
    assert [(r.name, r.id) for r in program.regions] == [(r.name, r.id) for r in region_tree()]
    shipped = {f"csrc:megakernel/{p.name}" for p in (csrc_dir() / "megakernel").iterdir() if p.is_file()}
    assert shipped <= set(spec["sources"]), "every kernel file is part of the program version's content hash"
    launch = CudaLaunch.from_program(program)
    assert launch.kernel == "argus_megakernel" and launch.arch == "sm_90a" and launch.runner


def test_generated_files_match_megakernel():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mk_generate", EXAMPLE / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.stale_files() == [], "run python examples/megakernel/generate.py"


def test_editing_a_kernel_file_makes_a_new_program_version(tmp_path, program, monkeypatch):
    import argus_rt.resources as resources

    fake = tmp_path / "csrc"
    shutil.copytree(csrc_dir(), fake)
    monkeypatch.setattr(resources, "csrc_dir", lambda: fake)
    assert load_program(EXAMPLE).id == program.id
    (fake / "megakernel" / "gemv.cuh").write_text("// edited\n")
    assert load_program(EXAMPLE).id != program.id


def test_shipped_sources_stay_inside_csrc(tmp_path):
    spec = json.loads((EXAMPLE / "argus_program.json").read_text())
    spec["sources"] = ["csrc:../pyproject.toml"]
    (tmp_path / "argus_program.json").write_text(json.dumps(spec))
    with pytest.raises(ProgramError, match="outside"):
        load_program(tmp_path)


def test_coord_fields_unpack_the_kernels_coordinate(program):
    fields = CudaLaunch.from_program(program).coord_fields
    packed = np.array([coordinate(s, l) for s, l in [(0, 0), (7, 21), (131, 255), (1023, 3)]])
    cols = coordinate_columns(packed, fields)
    assert cols["step"].tolist() == [0, 7, 131, 1023] and cols["layer"].tolist() == [0, 21, 255, 3]


@pytest.mark.parametrize("region", [None, "gemm", "core_loop"])
def test_plans_all_four_signals(program, region):
    plan = make_plan(program, region, SIGNALS)
    assert set(plan.targets) == set(SIGNALS)
    ops = {t.op for t in plan.tasks.values() if t.kind == "collect"}
    assert ops == {"trace", "pcmap"}  # one Nsight Compute run: the mapping run gives every per-PC counter


def test_cli_plan(program):
    from argus_rt.cli import main

    assert main(["plan", str(EXAMPLE), "--region", "gemm", "--signals", ",".join(SIGNALS)]) == 0


def test_latency_reports_per_layer_and_step_and_scopes_by_layer(tmp_path, program):
    from argus_rt.runtime.handlers import TaskContext, get_handler
    from argus_rt.tasks import Task

    rng = np.random.default_rng(7)
    n = 600
    ids = [r.id for r in program.regions if r.name != "decode"]
    step, layer = rng.integers(4, 8, n), rng.integers(0, 22, n)
    start = rng.integers(0, 10**6, n)
    dur = rng.integers(100, 5000, n)
    coord = np.array([coordinate(int(s), int(l)) for s, l in zip(step, layer)])
    fields = CudaLaunch.from_program(program).coord_fields
    rows = {"region_id": np.array(rng.choice(ids, n)), "start": start, "end": start + dur, "sm": rng.integers(0, 132, n),
            "cta": rng.integers(0, 264, n), "warp": rng.integers(0, 8, n), "coord": coord}

    class Intervals:  # what argus_rt.trace.pair_intervals returns, reduced to what the document reads
        unit, incomplete, problems = "ns", False, []

    Intervals.rows = rows
    doc = intervals_document(Intervals(), None, None, fields)
    assert doc["coord_fields"] == {"layer": [0, 8], "step": [8, 24]}
    gemm = region_tree()["decode/gemm"].id
    collect = Task(kind="collect", op="trace", program=program.id, device="gpu")
    path = tmp_path / "ri.json"
    path.write_text(json.dumps(doc))
    for scope in ({}, {"layer": 3}):
        synth = Task(kind="synthesize", op="latency", program=program.id, region="decode/gemm", scope=scope,
                     deps=(collect.id,), config={"signal": "latency", "unit": "ns", "qualification": "observed"})
        out = tmp_path / f"out-{synth.id}"
        out.mkdir()
        ctx = TaskContext(task=synth, program=program, programs=lambda pid: program,
                          inputs={f"{collect.id}/region_intervals": path}, outdir=out, deps={collect.id: collect})
        facts = json.loads(Path(get_handler("synthesize", "latency")(ctx)["facts"]).read_text())
        facts["values"] = [v for v in facts["values"] if v["region"] == "decode/gemm"]  # not its detail regions
        sel = rows["region_id"] == gemm
        if scope:
            sel &= layer == 3
        mean = next(v["value"] for v in facts["values"] if v["metric"] == "mean")
        assert mean == pytest.approx(dur[sel].mean())
        by_layer = {v["join"]["layer"]: v["value"] for v in facts["values"] if v["metric"] == "mean_by_layer"}
        want = {int(l): dur[sel & (layer == l)].mean() for l in np.unique(layer[sel])}
        assert by_layer == pytest.approx(want)
        by_step = {v["join"]["step"] for v in facts["values"] if v["metric"] == "mean_by_step"}
        assert by_step == {int(s) for s in np.unique(step[sel])}


# ---- the runner protocol, with a stand-in runner (no GPU) -------------------------------------------
def _runner_program(tmp_path, body: str, rtol=0.01):
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    (tmp_path / "run.py").write_text(body)
    spec = {"kind": "cuda", "sources": ["k.cu", "run.py"], "regions": {"argus_manifest_version": 1, "regions": []},
            "launch": {"kernel": "k", "runner": "run.py:run", "rtol": rtol}}
    (tmp_path / "argus_program.json").write_text(json.dumps(spec))
    prog = load_program(tmp_path)
    return prog, CudaLaunch.from_program(prog)


def test_runner_gets_the_cubin_and_its_extras_are_kept(tmp_path):
    prog, launch = _runner_program(tmp_path, "def run(ctx):\n    assert ctx.trace_session(None, ctas=1, threads_per_cta=1)"
                                             " is None\n    return {'max_rel_err': 1e-3, 'cubin_seen': str(ctx.cubin)}\n")
    out, session = run_with_runner(prog, "marker_only", launch, tmp_path / "k.cubin", "k", trace_config=None, check=True)
    assert out["cubin_seen"] == str(tmp_path / "k.cubin") and session is None


@pytest.mark.parametrize("returned, error, match", [
    ("{'max_rel_err': 0.5}", ReferenceMismatchError, "relative error 0.5 > rtol 0.01"),
    ("{'max_rel_err': float('nan')}", ReferenceMismatchError, "relative error nan"),
    ("{'max_rel_err': None}", ProgramRunError, "did not check its outputs"),
    ("[1]", ProgramRunError, "not a dict with 'max_rel_err'"),
])
def test_runner_results_that_are_refused(tmp_path, returned, error, match):
    prog, launch = _runner_program(tmp_path, f"def run(ctx):\n    return {returned}\n")
    with pytest.raises(error, match=match):
        run_with_runner(prog, "marker_only", launch, tmp_path / "k.cubin", "k", trace_config=None, check=True)


def test_a_traced_runner_must_arm_a_session(tmp_path):
    prog, launch = _runner_program(tmp_path, "def run(ctx):\n    return {'max_rel_err': 0.0}\n")
    with pytest.raises(ProgramRunError, match="without creating and arming a trace session"):
        run_with_runner(prog, "traced", launch, tmp_path / "k.cubin", "k", trace_config={"capacity": 256}, check=True)


def test_runner_and_args_do_not_mix(tmp_path):
    prog, _ = _runner_program(tmp_path, "def run(ctx):\n    return {}\n")
    launch = dict(prog.launch, args=[{"int32": 1}])
    with pytest.raises(ProgramRunError, match="has a runner and args/reference"):
        CudaLaunch.from_program(type(prog).from_sources("p", {"k.cu": "x"}, launch=launch, root=prog.root))


def test_runner_context_makes_one_session():
    from types import SimpleNamespace

    ctx = RunnerContext(program=SimpleNamespace(name="p"), variant="traced", cubin=Path("x"), symbol="k", rtol=None,
                        trace_config={})
    ctx.sessions.append(object())  # a first session already made
    with pytest.raises(ProgramRunError, match="second trace session"):
        ctx.trace_session(None, ctas=1, threads_per_cta=32)


# ---- builds (nvcc, no GPU) -------------------------------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("variant", ["trace_free", "marker_only", "traced"])
def test_variants_build_for_sm_90a(program, variant):
    from argus_rt.kinds.cuda.run import build_variant, kernel_symbol
    from argus_rt.sass import disassemble, sass_arch

    cubin = build_variant(program, variant)
    assert kernel_symbol(cubin, "argus_megakernel") == "argus_megakernel"
    listing = disassemble(cubin)
    assert sass_arch(listing) == "sm_90a"
    assert ("PMTRIG" in listing) == (variant == "marker_only"), "only the marker-only build leaves PMTRIG words"


@needs_nvcc
def test_marker_only_sass_maps_every_region_through_the_opcode_switch(program):
    from argus_rt.backends.pcmap import PcMapError, build_pc_region_map, static_ownership
    from argus_rt.kinds.cuda.run import build_variant
    from argus_rt.sass import disassemble, indirect_branch_targets, parse_sass, select_function, with_indirect_targets

    cubin = build_variant(program, "marker_only")
    plain = select_function(parse_sass(disassemble(cubin)), "argus_megakernel")
    assert any(i.base == "BRX" for i in plain.instructions), "the opcode switch is a jump table"
    with pytest.raises(PcMapError, match="indirect branch"):
        static_ownership(plain)  # without the cubin's jump-table targets the CFG is open
    tables = indirect_branch_targets(cubin)["argus_megakernel"]
    function = with_indirect_targets(plain, tables)
    own = static_ownership(function)
    names = {r.id: r.name for r in program.regions}
    assert {names[r] for _, kind, r in own.markers if kind == "begin"} == {f"decode/{leaf}" for leaf in REGION_LEAVES}
    # all code but the trailing padding is reachable, so every executed PC gets an owner
    unreachable = set(own.unreachable)
    assert all(function[pc].base in ("NOP", "BRA") for pc in unreachable)
    pmap = build_pc_region_map(function, {i.pc: 0.0 if i.pc in unreachable else 1.0 for i in function.instructions})
    assert {names[r] for r in pmap.regions()} == {f"decode/{leaf}" for leaf in REGION_LEAVES}  # the root has no marker


def test_jump_table_parser_on_a_listing():
    from argus_rt.sass import parse_indirect_branch_targets

    text = (".nv.info.k\n\tAttribute:\tEIATTR_INDIRECT_BRANCH_TARGETS\n\tValue:\t\n"
            "\t\tOffset of Indirect Branch: 0x1520\t Number of targets: 3\n\t\tTargets: 0x1620 0x1750 0x1530 \n\n"
            ".nv.info.other\n\tAttribute:\tEIATTR_MAX_THREADS\n")
    assert parse_indirect_branch_targets(text) == {"k": {0x1520: (0x1620, 0x1750, 0x1530)}}


RECORDING_RUNNER = '''
import torch
from tests.ring_writer import RingWriter
from test_trace_session import FakeModule

GEMM = {gemm}


def run(ctx):
    session = ctx.trace_session(FakeModule(), ctas=2, threads_per_cta=64, capacity=64, device="cpu")
    armed = session.arm()
    w = RingWriter(armed)  # what the device would write: gemm in (step 5, layer 3) and (step 6, layer 21)
    for t, (step, layer) in enumerate([(5, 3), (6, 21)]):
        w.emit(1, 1, 7, "begin", GEMM, 100 * t, (step << 8) | layer)
        w.emit(1, 1, 7, "end", GEMM, 100 * t + 40 + t, (step << 8) | layer)
    session.buffer.copy_(torch.from_numpy(w.raw))
    return {{"max_rel_err": 1e-3}}
'''


@needs_nvcc
def test_trace_adapter_publishes_step_and_layer_columns_from_a_runner(tmp_path, monkeypatch):
    """The whole CUDA-runner path of the trace adapter on the CPU: Argus builds the traced variant,
    the runner fills the session's host rings as the device would, Argus decodes and publishes."""
    import torch

    from argus_rt.backends.base import CollectContext
    from argus_rt.backends.trace import TraceAdapter

    gemm = region_tree()["decode/gemm"].id
    (tmp_path / "k.cu").write_text('#include "argus/argus.cuh"\nextern "C" __global__ void k() {}\n')
    (tmp_path / "run.py").write_text(RECORDING_RUNNER.format(gemm=gemm))
    spec = {"kind": "cuda", "sources": ["k.cu", "run.py"], "regions": region_tree().to_manifest(),
            "launch": {"kernel": "k", "runner": "run.py:run", "rtol": 0.01,
                       "coord_fields": {"step": [8, 24], "layer": [0, 8]}}}
    (tmp_path / "argus_program.json").write_text(json.dumps(spec))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the runner needs no GPU here
    monkeypatch.setattr("argus_rt.kinds.cuda.run._require_gpu", lambda: None)  # nor a driver
    out = tmp_path / "out"
    out.mkdir()
    files = TraceAdapter().collect(CollectContext(task=None, program=load_program(tmp_path), config={}, scope=None,
                                                  sampling={}, inputs={}, outdir=out, device=""))
    doc = RegionIntervals.from_outputs(files.get).document(lists=True)
    cols = doc["columns"]
    assert doc["coord_fields"] == {"layer": [0, 8], "step": [8, 24]} and doc["reference_check"]["max_rel_err"] == 1e-3
    assert cols["region_id"] == [gemm, gemm] and cols["step"] == [5, 6] and cols["layer"] == [3, 21]
    assert [e - s for s, e in zip(cols["start"], cols["end"])] == [40, 41]
    assert files["raw_trace"].is_file() and doc["runner_facts"] == {}
