"""The numba program kind on the CPU: launch checks, plan, compile (numba -> PTX -> sm_90 cubin), the
marker footprint in SASS, the trace build's link, numba's kernel ABI, the NumPy reference check and
the mapping run with a stand-in ``ncu`` (tests/test_pcmap_pipeline.py's method).

Needs numba and numba-cuda (``pip install -e '.[numba]'``), nvcc and cuobjdump (CUDA toolkit, or
Triton's bundled cuobjdump); no GPU. numba compiles in a process of its own, once per program
version and marker mode; the cache is shared by this module's tests.
"""
from __future__ import annotations

import json
import re
import shutil
import stat
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from argus_rt.evidence import PcCounters, PcRegionCounts
from argus_rt.kinds.errors import ReferenceMismatchError
from argus_rt.kinds.numba.launch import NumbaLaunch, NumbaProgramError, check_reference, kernel_arguments, make_inputs
from argus_rt.kinds.numba.versions import explain_missing_numpy_name, incompatibility
from argus_rt.program import ProgramVersion, load_program
from argus_rt.tools import tool_or_none

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "numba"
MEMORY_OPS = re.compile(r"^(LD|ST|ATOM|RED|LDG|STG|LDS|STS|LDL|STL|CCTL|MEMBAR|ERRBAR)")

try:
    import numba.cuda  # noqa: F401

    NUMBA = ""
except ImportError as exc:
    NUMBA = f"numba-cuda is not installed ({exc}); pip install -e '.[numba]'"
INCOMPATIBLE = incompatibility()  # a numba / numpy pair known not to compile: the line compile_ptx raises
NUMBA = NUMBA or INCOMPATIBLE or ""
if not NUMBA:  # numba-cuda compiles through NVRTC: a machine without libnvrtc cannot build a numba kernel
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        load_nvidia_dynamic_lib("nvrtc")
    except Exception as exc:  # noqa: BLE001 - any failure to load it means the same: no NVRTC here
        NUMBA = f"numba-cuda needs NVRTC, not loadable here ({type(exc).__name__}); pip install nvidia-cuda-nvrtc"
needs_numba = pytest.mark.skipif(bool(NUMBA), reason=NUMBA or "numba")
needs_toolkit = pytest.mark.skipif(tool_or_none("nvcc") is None or tool_or_none("cuobjdump") is None,
                                   reason="nvcc and cuobjdump (CUDA toolkit) are needed to build and read cubins")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("argus-cache")


@pytest.fixture(autouse=True)
def _shared_cache(cache, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(cache))


def _program(tmp_path, source: str | None = None, **launch_changes) -> ProgramVersion:
    """A copy of the example program, its module replaced by ``source`` and its launch edited."""
    root = tmp_path / "prog"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    if source is not None:
        (root / "row_reduce.py").write_text(source)
    spec = json.loads((root / "argus_program.json").read_text())
    spec["launch"].update(launch_changes)
    spec["launch"] = {k: v for k, v in spec["launch"].items() if v is not None}
    (root / "argus_program.json").write_text(json.dumps(spec))
    return load_program(root)


def _sass(cubin: Path, function: str = "row_reduce"):
    from argus_rt.sass import disassemble, parse_sass

    return parse_sass(disassemble(cubin))[function]


# ---- launch ----------------------------------------------------------------------------------
def test_example_loads_as_a_numba_program():
    program = load_program(EXAMPLE)
    launch = NumbaLaunch.from_program(program)
    assert program.kind == "numba" and launch.kernel == "row_reduce" and launch.cc == (9, 0)
    assert launch.signature_text(["x", "out", "n_cols"]) == "void(float32[:, ::1], float32[::1], int32)"


@pytest.mark.parametrize("change, message", [
    ({"grid": [0]}, r"grid must be a list of 1-3 positive ints"),
    ({"args": [1, 2]}, r"args must be an object \{kernel parameter name: spec\}"),
    ({"args": {"x": {"array": "complex64", "shape": [4]}}}, r"array dtype 'complex64' unknown; valid: float16"),
    ({"args": {"n": {"int32": "seven"}}}, r"args\['n'\].*the value must be a number"),
    ({"arch": "sm_90a"}, r"arch 'sm_90a' must be a plain GPU code"),
    ({"warps": 4}, r"unknown key\(s\) \['warps'\]"),
    ({"reference": None}, r"lacks \['reference'\]"),
])
def test_launch_errors_are_one_line(tmp_path, change, message):
    program = _program(tmp_path, **change)
    with pytest.raises(NumbaProgramError, match=message) as err:
        NumbaLaunch.from_program(program)
    assert "\n" not in str(err.value)


def test_args_must_name_exactly_the_kernel_parameters():
    launch = NumbaLaunch.from_program(load_program(EXAMPLE))
    launch.check_parameters(["x", "out", "n_cols"])
    with pytest.raises(NumbaProgramError, match=r"launch.args lacks \['y'\]; has \['n_cols'\], which row_reduce does "
                                                r"not take; kernel parameters: x, out, y"):
        launch.check_parameters(["x", "out", "y"])


@needs_numba
def test_a_signature_that_disagrees_with_args_is_one_line(tmp_path):
    from argus_rt.kinds.numba.compile import kernel_signature

    params = ["x", "out", "n_cols"]
    ok = NumbaLaunch.from_program(_program(tmp_path, signature="void(float32[:, ::1], float32[::1], int32)"))
    assert kernel_signature(ok, params) == "void(float32[:, ::1], float32[::1], int32)"
    cases = {"void(float64[:, ::1], float32[::1], int32)": r"x is array\(float64, 2d, C\) in the signature, "
                                                          r"array\(float32, 2d, C\) in args",
             "void(float32[:, :], float32[::1])": r"has 2 parameter\(s\); row_reduce takes 3: x, out, n_cols",
             "void(floaty[:])": r"does not parse: \w+"}
    for i, (sig, message) in enumerate(cases.items()):
        bad = NumbaLaunch.from_program(_program(tmp_path / str(i), signature=sig))
        with pytest.raises(NumbaProgramError, match=message) as err:
            kernel_signature(bad, params)
        assert "\n" not in str(err.value)


# ---- versions ---------------------------------------------------------------------------------
@pytest.mark.parametrize("versions, numpy_version, message", [
    ({"numba": "0.68.1", "numba-cuda": "0.30.4"}, "2.5.2", "numba-cuda 0.30.4 does not support numpy 2.5.2; "
                                                          "pip install 'numpy<2.5'"),
    ({"numba": "0.66.0", "numba-cuda": "0.30.4"}, "2.5.0rc1", "numba 0.66.0 does not support numpy 2.5.0rc1; "
                                                              "pip install 'numba>=0.67'"),
    ({"numba": "0.68.1", "numba-cuda": "0.30.4"}, "2.4.6", None),
    ({"numba": "0.67.0", "numba-cuda": "0.31.0"}, "2.5.2", None),  # newer than the newest known to fail
    ({"numba": None, "numba-cuda": None}, "2.5.2", None),
])
def test_known_incompatible_numba_numpy_pairs_are_one_line(versions, numpy_version, message):
    assert incompatibility(versions, numpy_version) == message


def test_the_compile_names_the_pair_before_starting_numba(monkeypatch):
    import numpy

    from argus_rt.kinds.numba import versions
    from argus_rt.kinds.numba.compile import compile_ptx

    monkeypatch.setattr(versions, "installed", lambda: {"numba": "0.68.1", "numba-cuda": "0.30.4", "llvmlite": "0.50.0"})
    monkeypatch.setattr(numpy, "__version__", "2.5.2")
    with pytest.raises(NumbaProgramError, match=r"^program row_reduce\S*: numba-cuda 0.30.4 does not support numpy "
                                                r"2.5.2; pip install 'numpy<2.5'$"):
        compile_ptx(load_program(EXAMPLE), 1)


def test_a_numpy_name_numba_still_uses_is_explained_with_the_versions():
    import numpy

    why = explain_missing_numpy_name(AttributeError("module 'numpy' has no attribute 'row_stack'"))
    assert why.endswith(f"use numpy.row_stack, which numpy {numpy.__version__} does not have: this numba does not "
                        "support this numpy (install a numba and numba-cuda released after it, or an older numpy)")
    assert explain_missing_numpy_name(AttributeError("'Foo' object has no attribute 'row_stack'")) is None
    assert explain_missing_numpy_name(ValueError("module 'numpy' has no attribute 'row_stack'")) is None


# ---- plan -------------------------------------------------------------------------------------
@pytest.mark.skipif(bool(INCOMPATIBLE), reason=f"the plan's compile check refuses this pair: {INCOMPATIBLE}")
def test_plan_on_the_cpu():
    from argus_rt.query import make_plan

    plan = make_plan(EXAMPLE, "row_reduce", ["latency", "instruction_mix", "barrier_count"])
    collects = {(t.op, plan.programs[t.program]["variant"]) for t in plan.tasks.values() if t.kind == "collect"}
    assert collects == {("trace", "traced"), ("pcmap", "marker_only")}  # one ncu run for both PC signals
    assert set(plan.targets) == {"latency", "instruction_mix", "barrier_count"}


def test_the_shared_trace_and_pcmap_adapters_serve_the_kind():
    from argus_rt.backends.base import backend_module, get_backend
    from argus_rt.backends.pcmap import PcMapAdapter
    from argus_rt.backends.trace import TraceAdapter
    from argus_rt.kinds.registry import get_kind

    assert type(get_backend("trace", "numba")) is TraceAdapter and type(get_backend("pcmap", "numba")) is PcMapAdapter
    assert backend_module("pcmap", "numba") == "argus_rt.backends.pcmap"
    kind = get_kind("numba")
    assert kind.traced and kind.trace == "argus_rt.kinds.numba.run:collect_region_trace"


# ---- compile and SASS -------------------------------------------------------------------------
@needs_numba
@needs_toolkit
def test_marker_only_sass_has_the_cuda_kinds_marker_footprint(tmp_path):
    """Each numba marker is the three PMTRIG words of ARGUS_BEGIN/END in a CUDA marker-only build,
    word for word (encodings included), in order, balanced in the CFG (ptxas may schedule an instruction
    between the words, as in CUDA and Triton kernels; the map gives it to the marker's region); the
    marker-only build executes no memory instruction the trace-free build does not."""
    from argus_rt.backends.pcmap import static_ownership
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build, disassemble, sass_instructions, sass_lines
    from argus_rt.kinds.numba.build import build_variant

    program = load_program(EXAMPLE)
    marked = build_variant(program, "marker_only")
    function = _sass(marked.cubin)
    markers = static_ownership(function).markers
    names = [(kind, program.regions[rid].name) for _, kind, rid in markers]
    assert names == [("begin", "row_reduce"), ("begin", "row_reduce/load"), ("end", "row_reduce/load"),
                     ("begin", "row_reduce/tree"), ("end", "row_reduce/tree"), ("begin", "row_reduce/store"),
                     ("end", "row_reduce/store"), ("end", "row_reduce")]
    # the CUDA kind's marker-only build of the same marker sequence
    body = "\n".join(f"  ARGUS_{kind.upper()}(0x{program.regions[name].id:08x}u);"
                     + (" x[threadIdx.x] += 1.0f;" if kind == "begin" else "") for kind, name in names)
    src = tmp_path / "same_markers.cu"
    src.write_text(f'#include "argus/argus.cuh"\nextern "C" __global__ void k(float* x) {{\n{body}\n}}\n')
    cuda_fn = sass_lines(disassemble(build(CudaBuildSpec("same_markers", [src], argus_mode=1, arch="sm_90")).cubin))

    def words(lines):  # the PMTRIG lines' text and encoding, without the address, grouped per marker
        w = [" ".join(line.split()[1:]) for line in lines if line.split()[1:2] == ["PMTRIG"]]
        return [tuple(w[i:i + 3]) for i in range(0, len(w), 3)]

    numba_lines = sass_lines(disassemble(marked.cubin))
    assert words(numba_lines) == words(cuda_fn) and len(words(numba_lines)) == len(names)
    free = sass_instructions(disassemble(build_variant(program, "trace_free").cubin))
    ops = sass_instructions(disassemble(marked.cubin))
    assert Counter(op for op, _ in ops if MEMORY_OPS.match(op)) == Counter(op for op, _ in free if MEMORY_OPS.match(op))
    assert "BAR.SYNC.DEFER_BLOCKING" in [op for op, _ in ops]


@needs_numba
@needs_toolkit
def test_trace_free_sass_is_the_kernel_without_markers(tmp_path):
    """Mode 0 markers vanish: the trace-free cubin is, instruction for instruction and byte for byte,
    the cubin of the same module with every marker line deleted."""
    from argus_rt.kinds.cuda.build import disassemble, sass_lines
    from argus_rt.kinds.numba.build import build_variant

    program = load_program(EXAMPLE)
    free = build_variant(program, "trace_free")
    source = (EXAMPLE / "row_reduce.py").read_text()
    plain = "\n".join(line for line in source.splitlines() if "argus." not in line and "import markers" not in line)
    unmarked = build_variant(_program(tmp_path, plain), "trace_free")
    a, b = sass_lines(disassemble(free.cubin)), sass_lines(disassemble(unmarked.cubin))
    assert a and a == b
    assert not any(i.is_marker_word or i.is_call for i in _sass(free.cubin).instructions)
    assert free.compiled.regions == ("row_reduce", "row_reduce/load", "row_reduce/store", "row_reduce/tree")
    assert unmarked.compiled.regions == ()


@needs_numba
@needs_toolkit
def test_traced_cubin_links_argus_emit_and_its_control_block():
    from argus_rt.kinds.numba.build import build_variant

    program = load_program(EXAMPLE)
    traced = build_variant(program, "traced")
    kernel = _sass(traced.cubin)
    calls = [i for i in kernel.instructions if i.is_call]
    assert len(calls) == 8 and not any(i.is_marker_word for i in kernel.instructions)  # one call per marker
    emit = _sass(traced.cubin, "argus_numba_emit")
    assert any(i.opcode.startswith("STG.E.128") for i in emit.instructions)  # the record store of emit()
    data = traced.cubin.read_bytes()
    assert b"argus_ctl" in data and b"argus_scratch" in data  # what TraceSession arms


@needs_numba
@needs_toolkit
def test_kernel_arguments_are_numbas_abi():
    """The words Argus packs have the sizes of the PTX entry's parameters, in order (build_variant
    checks this too, before every launch)."""
    from argus_rt.kinds.numba.build import build_variant, check_abi, entry_parameter_sizes

    program = load_program(EXAMPLE)
    built = build_variant(program, "marker_only")
    check_abi(program, built.compiled)
    sizes = entry_parameter_sizes(built.compiled.ptx.read_text(), "row_reduce")
    assert sizes == [8] * 9 + [8] * 7 + [4]  # x: 5 fields + 2 shapes + 2 strides; out: 5 + 1 + 1; n_cols
    launch = NumbaLaunch.from_program(program)
    inputs = make_inputs(launch, seed=0)
    args = kernel_arguments(launch, list(built.params), inputs, {"x": 0x1000, "out": 0x2000})
    assert [a.value for a in args[2:9]] == [512 * 2048, 4, 0x1000, 512, 2048, 2048 * 4, 4]
    assert args[-1].value == 2048 and args[13].value == 0x2000


@needs_numba
def test_a_module_without_the_named_kernel_is_one_line_at_plan_time(tmp_path, capsys):
    """`argus plan` compiles the marker-only PTX on the CPU (numba only, no nvcc) and prints what is
    wrong in one line, exit status 2; a good program plans."""
    from argus_rt.cli import main

    source = (EXAMPLE / "row_reduce.py").read_text().replace("def row_reduce(", "def row_sum(")
    program = _program(tmp_path, source)
    assert main(["plan", str(program.root), "--signals", "latency"]) == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(r"argus plan: program row_reduce:base: launch.kernel 'row_reduce' is not defined in "
                        r"row_reduce.py; numba.cuda.jit kernels there: row_sum", err), err
    assert main(["plan", str(EXAMPLE), "--signals", "latency,instruction_mix,barrier_count"]) == 0


@needs_numba
@needs_toolkit
def test_markers_must_name_regions_of_the_manifest(tmp_path):
    from argus_rt.kinds.numba.build import build_variant

    source = (EXAMPLE / "row_reduce.py").read_text().replace('"row_reduce/store"', '"row_reduce/write"')
    with pytest.raises(NumbaProgramError, match=r"markers name regions that regions.json lacks: \['row_reduce/write'\]"):
        build_variant(_program(tmp_path, source), "marker_only")


# ---- the reference check ----------------------------------------------------------------------
def test_reference_check_on_numpy():
    """The example's reference, as the module states it (the module itself imports numba, so it is
    restated here; the runs below load it from the module)."""
    launch = NumbaLaunch.from_program(load_program(EXAMPLE))
    inputs = make_inputs(launch, seed=1)
    assert np.isnan(inputs["out"]).all() and inputs["x"].dtype == np.float32 and inputs["n_cols"] == 2048
    good = {"x": inputs["x"], "out": inputs["x"].sum(axis=1, dtype=np.float64).astype(np.float32)}

    def reference(x):
        return {"out": x.astype("float64").sum(axis=1)}

    assert check_reference(launch, inputs, good, reference) < 1e-4
    with pytest.raises(ReferenceMismatchError, match=r"output 'out': 512 elements unwritten \(NaN\)"):
        check_reference(launch, inputs, {"x": inputs["x"], "out": inputs["out"]}, reference)
    with pytest.raises(ReferenceMismatchError, match=r"output 'out' differs from the reference"):
        check_reference(launch, inputs, {"x": inputs["x"], "out": good["out"] + 1}, reference)
    with pytest.raises(ReferenceMismatchError, match=r"reference names 'y', which is not an array argument"):
        check_reference(launch, inputs, good, lambda x: {"y": x})


# ---- the mapping run, with a stand-in ncu ----------------------------------------------------
STAND_IN = r'''#!{python}
import json, re, sys
from argus_rt import sass
from argus_rt.backends.pcmap import static_ownership
from argus_rt.kinds.numba.build import build_variant
from argus_rt.program import ProgramVersion
args = sys.argv[1:]
assert "--page" in args and "source" in args and "-k" in args, args
assert args[args.index(sys.executable) + 1:args.index(sys.executable) + 4] == ["-m", "argus_rt.kinds.run_variant", "run"]
p = ProgramVersion.from_dict(json.load(open(args[args.index("--program") + 1])))
built = build_variant(p, args[args.index("--variant") + 1])
f = sass.select_function(sass.parse_sass(sass.disassemble(built.cubin)), built.symbol)
reach, base = static_ownership(f).entry_of, 0x7F0000000000  # one execution per reachable PC
header = ["Address", "Source", "Instructions Executed", "Thread Instructions Executed",
          "Predicated-On Thread Instructions Executed"]
rows = [[hex(base + i.pc), "      " + (re.sub(r"0x[0-9a-f]+\s*$", hex(base + i.targets[0]), i.text) if i.targets
                                       else i.text)] + [str(n * (i.pc in reach)) for n in (1, 32, 32)]
        for i in f.instructions]
print("==PROF== Connected to process 1 (stand-in)")
print('"Kernel Name","%s",' % f.name)
print("\n".join(",".join('"%s"' % cell for cell in row) for row in [header] + rows))
'''


@needs_numba
@needs_toolkit
def test_mapping_run_with_a_stand_in_ncu(tmp_path, monkeypatch):
    """The numba pcmap adapter: marker-only cubin, the runner argv ncu profiles, the shared map and
    counters; every BAR of the kernel is owned by the tree region."""
    from argus_rt.backends import pcmap
    from argus_rt.backends.base import CollectContext, get_backend
    from argus_rt.pc_regions import PcRegionMap

    script = tmp_path / "ncu"
    script.write_text(STAND_IN.replace("{python}", sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NCU", str(script))
    monkeypatch.setattr(pcmap, "device_capability", lambda: (9, 0))
    program = load_program(EXAMPLE).variant_of("marker_only")
    out = tmp_path / "out"
    out.mkdir()
    ctx = CollectContext(task=None, program=program, config={}, scope=None, sampling={}, inputs={}, outdir=out,
                         device="")
    files = get_backend("pcmap", "numba").collect(ctx)
    doc = PcRegionCounts.from_outputs(files.get).document()
    assert doc["format"] == "argus.pc_region_counts/1" and doc["provenance"]["kernel_symbol"] == "row_reduce"
    assert doc["provenance"]["numba_entry"].startswith("_ZN")
    assert set(doc["source_file_attribution"]["inst_executed"]) == {"row_reduce.py"}  # numba's line info
    pmap = PcRegionMap.from_evidence(doc)
    tree = program.regions["row_reduce/tree"].id
    bars = [pc for pc, op in pmap.opcodes.items() if op == "BAR"]
    assert len(bars) == 9 and all(set(pmap.pcs[pc].leaf_counts()) == {tree} for pc in bars)
    counters = PcCounters.from_outputs(files.get).document(lists=True)
    assert counters["format"] == "argus.pc_counters/1" and counters["pcs"][0] == "row_reduce@0x0"
    assert {e[0] for e in doc["entries"]} == set(counters["pcs"])  # the keys synthesis joins on


# ---- the checked run, with a stand-in launcher -----------------------------------------------
class _HostModule:
    """Stands in for CubinModule: "launches" row_reduce on host memory, reading every argument from
    the words numba's ABI puts where Argus packed them (data pointer, shape, strides, scalar)."""

    launches: list = []

    def __init__(self, wrong=False):
        self.wrong = wrong

    def launch(self, symbol, grid, block, args):
        import ctypes

        words = [a.value or 0 for a in args]
        (x_ptr, rows, cols, row_stride, col_stride), (out_ptr, n_out, out_stride), n_cols = (
            words[4:9], words[13:16], words[16])
        x = np.frombuffer((ctypes.c_float * (rows * cols)).from_address(x_ptr), np.float32).reshape(rows, cols)
        out = np.frombuffer((ctypes.c_float * n_out).from_address(out_ptr), np.float32)
        assert (row_stride, col_stride, out_stride) == (4 * cols, 4, 4) and x.shape == (rows, n_cols)
        out[:] = 0.0 if self.wrong else x.sum(axis=1)
        self.launches.append((symbol, tuple(grid), tuple(block)))


@needs_numba
@needs_toolkit
def test_run_once_packs_launches_and_checks_against_the_reference(monkeypatch):
    torch = pytest.importorskip("torch", reason="the run moves its NumPy inputs with torch")
    from argus_rt import launch as launcher
    from argus_rt.kinds.numba.run import run_once

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)  # "device" memory is host memory
    monkeypatch.setattr(launcher.CubinModule, "load", classmethod(lambda cls, path, device=0: _HostModule()))
    program = load_program(EXAMPLE)
    res = run_once(program, "marker_only", seed=3)
    assert res["symbol"] == "row_reduce" and res["max_rel_err"] < 1e-3 and "trace" not in res
    assert _HostModule.launches[-1] == ("row_reduce", (512,), (256,))
    monkeypatch.setattr(launcher.CubinModule, "load", classmethod(lambda cls, path, device=0: _HostModule(True)))
    with pytest.raises(ReferenceMismatchError, match="output 'out' differs from the reference"):
        run_once(program, "trace_free", seed=3)


class _TracedHostModule(_HostModule):
    """The stand-in launcher of a traced cubin: holds ``argus_ctl`` and, at launch, writes into the armed
    rings what argus_detail::emit would (tests/ring_writer.py), each warp passing the eight markers in order."""

    STEPS = [("begin", "row_reduce", 0), ("begin", "row_reduce/load", 10), ("end", "row_reduce/load", 100),
             ("begin", "row_reduce/tree", 110), ("end", "row_reduce/tree", 300), ("begin", "row_reduce/store", 310),
             ("end", "row_reduce/store", 320), ("end", "row_reduce", 330)]

    def __init__(self, regions):
        super().__init__()
        self.regions, self.ctl = regions, None

    def global_address(self, name):
        raise KeyError(name)  # no argus_ts_anchored: a default-timestamp build

    def write_global(self, name, data, stream=None, blocking=True):
        assert name == "argus_ctl"
        self.ctl = np.array(data, dtype=np.uint8).copy()

    def read_global(self, name):
        return self.ctl

    def launch(self, symbol, grid, block, args):
        from argus_rt.trace import TraceConfig, layout
        from ring_writer import RingWriter

        super().launch(symbol, grid, block, args)
        ctl = self.ctl.view(layout.CTL_DTYPE)[0]
        writer = RingWriter(TraceConfig(ctas=grid[0], threads_per_cta=block[0], capacity=int(ctl["capacity"]),
                                        seq=int(ctl["seq"])))
        for cta in range(grid[0]):
            for warp in range(block[0] // 32):
                for kind, name, dt in self.STEPS:
                    writer.emit(cta, warp, cta % 132, kind, self.regions[name].id, 1_000 * cta + warp + dt)
        self._argus_armed_buffer.numpy()[:] = writer.raw


@needs_numba
@needs_toolkit
def test_traced_run_is_decoded_into_region_intervals(monkeypatch, tmp_path):
    """collect_region_trace on a stand-in launcher and host-side rings: the session the run arms has the
    launch's geometry, its rings decode and pair into argus.region_intervals/1 rows, the raw rings are kept."""
    import functools

    torch = pytest.importorskip("torch", reason="the run moves its NumPy inputs with torch")
    from argus_rt import launch as launcher
    from argus_rt import trace
    from argus_rt.kinds.numba.run import collect_region_trace

    program = load_program(EXAMPLE).variant_of("traced")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(trace, "TraceSession", functools.partial(trace.TraceSession, device="cpu"))
    module = _TracedHostModule(program.regions)
    monkeypatch.setattr(launcher.CubinModule, "load", classmethod(lambda cls, path, device=0: module))
    doc, raw = collect_region_trace(program, tmp_path, {"capacity": 16})
    assert doc["format"] == "argus.region_intervals/1" and doc["clock"] == "ns" and raw.is_file()
    assert doc["dropped"] == 0 and not doc["incomplete"] and doc["reference_check"]["max_rel_err"] < 1e-3
    cols = {k: np.asarray(v) for k, v in doc["columns"].items()}
    assert len(cols["region_id"]) == 4 * 512 * 8  # four regions, once per warp
    for name, (start, end) in {"row_reduce/load": (10, 100), "row_reduce/tree": (110, 300),
                               "row_reduce/store": (310, 320), "row_reduce": (0, 330)}.items():
        rows = cols["region_id"] == program.regions[name].id
        assert rows.sum() == 512 * 8 and set((cols["end"] - cols["start"])[rows]) == {end - start}, name
