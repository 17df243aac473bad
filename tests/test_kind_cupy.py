"""The CuPy program kind on the CPU: launch checks, plan, NVRTC options and builds, the mapping run.

No GPU and no CuPy here: planning needs neither; the builds need NVRTC (cuda-python's bindings and a
loadable libnvrtc) and skip without it; SASS is read with cuobjdump / nvdisasm (Triton's copies do).
The mapping run goes through the real adapter with a stand-in ncu that prints the source page of
the very cubin Argus built.
"""
from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from argus_rt.backends.base import CollectContext, backend_module, get_backend
from argus_rt.evidence import PcCounters, PcRegionCounts
from argus_rt.kinds.cupy import build as cupy_build
from argus_rt.kinds.cupy.build import CupyCompileError, NvrtcNotFoundError, build_variant, nvrtc_options
from argus_rt.kinds.cupy.launch import CupyLaunch, CupyProgramError, global_functions, kernel_parameters
from argus_rt.program import load_program
from argus_rt.query import make_plan
from argus_rt.regions import RegionTree
from argus_rt.resources import csrc_dir

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cupy"
SIGNALS = ("latency", "instruction_mix", "barrier_count")
REGIONS = ["softmax", "softmax/max", "softmax/max/reduce", "softmax/sum", "softmax/sum/reduce", "softmax/normalize"]


def _nvrtc_reason() -> str | None:
    try:
        cupy_build.nvrtc()
    except NvrtcNotFoundError as exc:
        return str(exc)
    return None


def _tool(name: str) -> bool:
    from argus_rt.tools import tool_or_none

    return tool_or_none(name) is not None


needs_nvrtc = pytest.mark.skipif(_nvrtc_reason() is not None, reason=f"NVRTC not usable here: {_nvrtc_reason()}")
needs_sass = pytest.mark.skipif(not (_tool("cuobjdump") and _tool("nvdisasm")), reason="cuobjdump/nvdisasm not found")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def program():
    return load_program(EXAMPLE)


def _copy(tmp_path: Path, *, launch: dict | None = None, drop: tuple[str, ...] = (), source: str | None = None,
          flags: list[str] | None = None) -> Path:
    """A copy of the example with ``launch`` keys replaced, ``drop`` keys removed, the .cu text replaced."""
    dst = tmp_path / "prog"
    shutil.copytree(EXAMPLE, dst)
    spec = json.loads((dst / "argus_program.json").read_text())
    spec["launch"].update(launch or {})
    for key in drop:
        spec["launch"].pop(key)
    if flags is not None:
        spec["flags"] = flags
    (dst / "argus_program.json").write_text(json.dumps(spec))
    if source is not None:
        (dst / "row_softmax.cu").write_text(source)
    return dst


# ---- the example and its launch --------------------------------------------------------------
def test_the_example_is_a_cupy_program_whose_arguments_follow_the_kernel_signature(program):
    launch = CupyLaunch.from_program(program)
    assert program.kind == "cupy" and launch.kernel == "row_softmax"
    assert [(p.name, p.pointer, p.dtype) for p in launch.params] == [
        ("x", True, "float32"), ("y", True, "float32"), ("n_cols", False, "int32")]
    assert [name for name, _ in launch.ordered_args()] == ["x", "y", "n_cols"]  # the JSON object is sorted
    assert (launch.grid, launch.block, launch.ctas, launch.threads_per_cta) == ((256,), (128,), 256, 128)
    assert (launch.rtol, launch.atol, launch.arch) == (1e-4, 1e-7, "sm_90a")
    assert sorted(r.name for r in program.regions) == sorted(REGIONS)


def test_the_example_regions_header_is_the_manifest():
    tree = RegionTree.load(EXAMPLE / "regions.json")
    header = (EXAMPLE / "regions.h").read_text()
    assert header.endswith(tree.cuda_defines()), "regions.h is stale: regenerate it from regions.json"


def test_kernel_signatures_are_read_from_the_source():
    src = """
    // __global__ void commented_out(int a);
    template <int N> __device__ float helper(float v) { return v; }
    extern "C" __global__ void __launch_bounds__(256) first(const float* __restrict__ a, int n, double s) {}
    extern "C" {
    __global__ void second(unsigned long long* out, const __half* in /* fp16 */, size_t count) { first(0, 1, 2); }
    }
    """
    assert global_functions(src) == ["first", "second"]
    assert [(p.name, p.dtype, p.pointer) for p in kernel_parameters(src, "first")] == [
        ("a", "float32", True), ("n", "int32", False), ("s", "float64", False)]
    assert [(p.name, p.dtype) for p in kernel_parameters(src, "second")] == [
        ("out", "uint64"), ("in", "float16"), ("count", "uint64")]
    assert kernel_parameters(src, "helper") is None and kernel_parameters(src, "commented_out") is None


# ---- bad input: one line naming the bad value -------------------------------------------------
@pytest.mark.parametrize("change, message", [
    ({"drop": ("kernel",)}, r"lacks 'kernel': the name of the extern \"C\" __global__ function .*row_softmax\)"),
    ({"launch": {"kernel": "softmax"}}, r"kernel 'softmax' is not a __global__ function of row_softmax.cu "
                                         r"\(__global__ functions there: row_softmax\)"),
    ({"drop": ("reference",)}, r"lacks 'reference'"),
    ({"launch": {"args": {"x": {"tensor": "float32", "shape": [4]}, "y": {"tensor": "float32", "shape": [4]}}}},
     r"args lacks 'n_cols': every parameter of row_softmax needs a value"),
    ({"launch": {"args": {"x": {"tensor": "float32", "shape": [4]}, "y": {"tensor": "float32", "shape": [4]},
                          "n_cols": {"int32": 4}, "z": {"int32": 1}}}}, r"args names 'z', which is not a parameter"),
    ({"launch": {"args": {"x": {"tensor": "float16", "shape": [4]}, "y": {"tensor": "float32", "shape": [4]},
                          "n_cols": {"int32": 4}}}},
     r"args\['x'\] is float16, but parameter 'x' of row_softmax is 'const float\* __restrict__' \(float32\)"),
    ({"launch": {"args": {"x": {"tensor": "float32", "shape": [4]}, "y": {"tensor": "float32", "shape": [4]},
                          "n_cols": {"tensor": "int32", "shape": [1]}}}},
     r"args\['n_cols'\] is a tensor, but parameter 'n_cols' of row_softmax is 'int' \(a value\)"),
    ({"launch": {"grid": [0]}}, r"grid \[0\] must be a list of 1-3 positive ints"),
    ({"launch": {"arch": "hopper"}}, r"arch 'hopper' is not of the form sm_XY"),
])
def test_a_bad_launch_is_one_line_naming_the_bad_value(tmp_path, change, message):
    program = load_program(_copy(tmp_path, **change))
    with pytest.raises(CupyProgramError, match=message) as info:
        CupyLaunch.from_program(program)
    assert "\n" not in str(info.value)


def test_argus_plan_refuses_a_program_without_a_kernel_in_one_line(tmp_path):
    prog = _copy(tmp_path, drop=("kernel",))
    proc = subprocess.run([sys.executable, "-m", "argus_rt.cli", "plan", str(prog), "--signals", "latency"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("argus plan: launch of 'row_softmax' lacks 'kernel'"), lines


# ---- plan: no CuPy, no NVRTC, no GPU needed ----------------------------------------------------
def test_a_query_plans_one_trace_and_one_mapping_run(program):
    plan = make_plan(program, "softmax", SIGNALS)
    collects = sorted((t.op, t.program) for t in plan.tasks.values() if t.kind == "collect")
    assert collects == sorted([("trace", program.variant_of("traced").id),
                               ("pcmap", program.variant_of("marker_only").id)])
    assert set(plan.targets) == set(SIGNALS)


def test_the_shared_adapters_serve_the_kind_without_importing_cupy_or_torch():
    """No adapter of its own: the shared trace and pcmap adapters call the kind's registry hooks."""
    assert backend_module("trace", "cupy") == "argus_rt.backends.trace"
    assert backend_module("pcmap", "cupy") == "argus_rt.backends.pcmap"
    code = ("import sys; from argus_rt.backends.base import get_backend; "
            "t, m = get_backend('trace', 'cupy'), get_backend('pcmap', 'cupy'); "
            "from argus_rt.kinds.registry import get_kind; k = get_kind('cupy'); "
            "from argus_rt.kinds.cupy import build, launch, run; "
            "print(type(t).__name__, type(m).__name__, k.traced, 'cupy' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.split() == ["TraceAdapter", "PcMapAdapter", "True", "False", "False"], out.stderr[-2000:]
    assert get_backend("trace", "triton") is get_backend("trace", "cupy")  # one trace adapter for every kind


# ---- NVRTC options: CuPy's, plus Argus's three -----------------------------------------------
def test_options_are_cupys_for_the_user_flags_plus_the_variant_define_and_include_paths(program, monkeypatch):
    monkeypatch.setattr(cupy_build, "cupy_include_dir", lambda: None)
    monkeypatch.setattr(cupy_build, "cuda_include_dir", lambda: "/cuda/include")
    monkeypatch.delenv("CUPY_CUDA_COMPILE_WITH_DEBUG", raising=False)
    monkeypatch.delenv("CUPY_NVRTC_USE_PCH", raising=False)
    for variant, mode in (("trace_free", 0), ("base", 0), ("marker_only", 1), ("traced", 2)):
        assert nvrtc_options(program, variant) == [
            "-lineinfo", f"-DARGUS_MODE={mode}", f"-I{csrc_dir()}", f"-I{EXAMPLE.resolve()}", "--std=c++17",
            "-I/cuda/include", "-ftz=true", "-arch=sm_90a", "--device-as-default-execution-space"]
    with pytest.raises(CupyProgramError, match="cannot build variant 'probe'"):
        nvrtc_options(program, "probe")


def test_options_follow_cupys_rules_for_std_debug_and_its_own_headers(tmp_path, monkeypatch):
    program = load_program(_copy(tmp_path, flags=["-std=c++20", "--use_fast_math"], launch={"arch": "sm_90"}))
    monkeypatch.setattr(cupy_build, "cupy_include_dir", lambda: Path("/cupy/include"))
    monkeypatch.setattr(cupy_build, "cuda_include_dir", lambda: None)
    monkeypatch.setenv("CUPY_CUDA_COMPILE_WITH_DEBUG", "1")
    monkeypatch.delenv("CUPY_NVRTC_USE_PCH", raising=False)
    opts = nvrtc_options(program, "marker_only")
    cccl = [f"-I/cupy/include/cupy/_cccl/{p}" for p in ("cub", "thrust", "libcudacxx")]
    assert opts[:5] == cccl + ["-std=c++20", "--use_fast_math"] and "--std=c++17" not in opts
    assert opts[-6:] == ["-I/cupy/include", "-ftz=true", "--device-debug", "--generate-line-info", "-arch=sm_90",
                         "--device-as-default-execution-space"]


# ---- builds ------------------------------------------------------------------------------------
@needs_nvrtc
@needs_sass
def test_every_variant_is_built_from_the_users_source(program):
    from argus_rt.backends.pcmap import static_ownership
    from argus_rt.sass import disassemble, parse_sass, select_function

    ids = {r.name: r.id for r in program.regions}
    cubins = {v: build_variant(program, v) for v in ("trace_free", "marker_only", "traced")}
    assert len({c.read_bytes() for c in cubins.values()}) == 3
    assert build_variant(program, "marker_only") == cubins["marker_only"]  # cached by content
    functions = {v: select_function(parse_sass(disassemble(c)), "row_softmax") for v, c in cubins.items()}
    ops = {v: [i.opcode for i in f.instructions] for v, f in functions.items()}
    assert "PMTRIG" not in ops["trace_free"] and "PMTRIG" not in ops["traced"]
    assert ops["marker_only"].count("PMTRIG") == 3 * 2 * len(REGIONS)
    assert [o for o in ops["trace_free"] if o.startswith("BAR")] == [o for o in ops["marker_only"] if o.startswith("BAR")]
    assert len(ops["traced"]) > len(ops["trace_free"])  # the rings' stores
    own = static_ownership(functions["marker_only"])  # balanced on every path: a begin and an end per region
    assert sorted((kind, rid) for _, kind, rid in own.markers) == sorted(
        [("begin", i) for i in ids.values()] + [("end", i) for i in ids.values()])
    bars = {own.local_stack[i.pc][-1] for i in functions["marker_only"].instructions if i.opcode.startswith("BAR")}
    assert bars == {ids["softmax/max/reduce"], ids["softmax/sum/reduce"]}
    assert b"argus_ctl" in cubins["traced"].read_bytes() and b"argus_ctl" not in cubins["trace_free"].read_bytes()
    build = json.loads((cubins["traced"].parent / "spec.json").read_text())["params"]  # the build cache's record
    assert build["options"] == nvrtc_options(program, "traced") and build["nvrtc"].startswith("nvrtc ")


@needs_nvrtc
def test_a_compile_error_is_one_line_naming_file_line_and_error(tmp_path):
    text = (EXAMPLE / "row_softmax.cu").read_text().replace("float s = 0.0f;", "float s = undeclared_value;")
    program = load_program(_copy(tmp_path, source=text))
    with pytest.raises(CupyCompileError) as info:
        cupy_build.check_program(program)
    msg = str(info.value)
    assert "\n" not in msg and "variant trace_free: NVRTC cannot compile row_softmax.cu" in msg
    assert re.search(r"row_softmax\.cu\(\d+\): error: identifier \"undeclared_value\" is undefined", msg), msg
    proc = subprocess.run([sys.executable, "-m", "argus_rt.cli", "plan", str(tmp_path / "prog"), "--signals",
                           "latency"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "undeclared_value" in proc.stderr


@needs_nvrtc
def test_a_mangled_kernel_is_refused_by_the_plan_check(tmp_path):
    text = (EXAMPLE / "row_softmax.cu").read_text().replace('extern "C" __global__', "__global__")
    with pytest.raises(CupyProgramError, match=r"'row_softmax' is not an unmangled symbol .* declare it extern \"C\""):
        cupy_build.check_program(load_program(_copy(tmp_path, source=text)))


def test_without_nvrtc_the_plan_check_checks_the_launch_only(program, monkeypatch):
    def missing():
        raise NvrtcNotFoundError("no NVRTC (test)")

    monkeypatch.setattr(cupy_build, "nvrtc", missing)
    assert cupy_build.check_program(program) == "launch checked; not compiled here: no NVRTC (test)"


def test_without_cupy_a_run_is_unavailable_with_the_reason(program):
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here")
    except ImportError:
        pass
    from argus_rt.backends.base import BackendUnavailableError
    from argus_rt.kinds.cupy.run import run_once

    with pytest.raises(BackendUnavailableError, match="launched by CuPy, which is not installed"):
        run_once(program, "marker_only")
    assert get_backend("trace", "cupy").available()[0] is False


# ---- the mapping run with a stand-in ncu ------------------------------------------------------
STAND_IN = r'''#!{python}
"""Stand-in ncu: the source page of the CuPy marker-only cubin (each reachable PC ran once per warp)."""
import json, re, sys
from argus_rt import sass
from argus_rt.backends.pcmap import static_ownership
from argus_rt.kinds.cupy.build import build_variant
from argus_rt.program import ProgramVersion
args = sys.argv[1:]
assert args[args.index("-k") + 1] == "regex:row_softmax" and args[args.index("-c") + 1] == "1", args
program_argv = args[args.index(sys.executable):]
assert program_argv[1:4] == ["-m", "argus_rt.kinds.run_variant", "run"], program_argv
variant = program_argv[program_argv.index("--variant") + 1]
assert variant == "marker_only" and "--cubin" not in program_argv, program_argv
p = ProgramVersion.from_dict(json.load(open(program_argv[program_argv.index("--program") + 1])))
cubin = build_variant(p, variant)
f = sass.select_function(sass.parse_sass(sass.disassemble(cubin)), "row_softmax")
reach = static_ownership(f).entry_of
base, warps = 0x7F0000000000, 256 * 4
print('"Kernel Name","row_softmax",')
print('"Address","Source","Instructions Executed","Thread Instructions Executed"')
for ins in f.instructions:
    text = ins.text
    if ins.targets:
        text = re.sub(r"0x[0-9a-f]+\s*$", hex(base + ins.targets[0]), text)
    c = warps if ins.pc in reach else 0
    print('"%s","      %s","%d","%d"' % (hex(base + ins.pc), text, c, 32 * c))
'''


@needs_nvrtc
@needs_sass
def test_the_mapping_run_profiles_the_cupy_runner_and_maps_its_cubin(program, tmp_path, monkeypatch):
    from argus_rt.backends import pcmap

    script = tmp_path / "ncu"
    script.write_text(STAND_IN.replace("{python}", sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("ARGUS_NCU", str(script))
    monkeypatch.setattr(pcmap, "device_capability", lambda: (9, 0))
    out = tmp_path / "out"
    out.mkdir()
    ctx = CollectContext(task=None, program=program.variant_of("marker_only"), config={}, scope=None, sampling={},
                         inputs={}, outdir=out, device="")
    adapter = get_backend("pcmap", "cupy")
    files = adapter.collect(ctx)
    typed = PcCounters.from_outputs(files.get)
    mapped = PcRegionCounts.from_outputs(files.get)
    assert set(files) == {"ncu_csv", *typed.outputs(files["pc_counters"].parent),
                          *mapped.outputs(files["pc_region_counts"].parent)}
    assert files["ncu_csv"].is_file()
    doc = mapped.document()
    counters = typed.document(lists=True)
    assert doc["format"] == "argus.pc_region_counts/1" and counters["format"] == "argus.pc_counters/1"
    ids = {r.name: r.id for r in program.regions}
    bar_pcs = {pc for pc, op in zip(counters["pcs"], counters["opcodes"]) if op == "BAR"}
    owners = {rid for pc, rid, n in doc["entries"] if pc in bar_pcs and n > 0}
    assert owners == {ids["softmax/max/reduce"], ids["softmax/sum/reduce"]}
    assert {rid for _, rid, n in doc["entries"] if n > 0} >= set(ids.values())
    prov = doc["provenance"]
    assert {"build", "disassemble", "ncu", "map"} <= set(prov["seconds"]) and prov["kernel_symbol"] == "row_softmax"
    assert "source_file_attribution" in doc and doc["source_file_attribution"]["inst_executed"]["row_softmax.cu"] > 0


# ---- the checked run, with a stand-in for CuPy (no GPU) --------------------------------------
class _StandInCupy:
    """What run.py uses of CuPy: RawModule(path).get_function(name)(grid, block, args, shared_mem=, stream=),
    asarray / asnumpy, the current stream, the device count. The "kernel" is ``compute`` on the host."""

    def __init__(self, compute):
        import numpy as np

        self.np, self.compute, self.launches = np, compute, []
        self.__version__ = "stand-in"
        stream = type("Stream", (), {"synchronize": lambda s: None})()
        runtime = type("Runtime", (), {"getDeviceCount": staticmethod(lambda: 1)})
        self.cuda = type("cuda", (), {"runtime": runtime, "get_current_stream": staticmethod(lambda: stream)})
        outer = self

        class RawModule:
            def __init__(self, *, path):
                self.path = path

            def get_function(self, name):
                def launch(grid, block, args, shared_mem=0, stream=None):
                    outer.launches.append((Path(self.path).parent.parent.name, name, grid, block, args, shared_mem))
                    outer.compute(*args)
                return launch

        self.RawModule = RawModule

    def asarray(self, a):
        return self.np.array(a)

    def asnumpy(self, a):
        return self.np.array(a)


def _softmax(x, y, n):
    import numpy as np

    e = np.exp(x - x.max(-1, keepdims=True))
    y[...] = e / e.sum(-1, keepdims=True)


@needs_nvrtc
def test_the_run_launches_the_variant_then_the_trace_free_kernel_on_the_same_inputs(program, monkeypatch):
    import numpy as np

    from argus_rt.kinds.cupy.run import run_once

    fake = _StandInCupy(_softmax)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    res = run_once(program, "marker_only")
    check = res["reference_check"]
    assert check["variant"] == "marker_only" and check["max_rel_err"] < 1e-5 and check["rtol"] == 1e-4
    assert check["trace_free"] == {"max_rel_err": check["max_rel_err"], "bitwise_equal": True}
    (first, *_), (second, *_) = fake.launches
    assert (first, second) == ("row_softmax_marker_only", "row_softmax_trace_free")  # the profiled launch first
    _, name, grid, block, args, shared = fake.launches[0]
    assert (name, grid, block, shared) == ("row_softmax", (256,), (128,), 0)
    assert [type(a) for a in args] == [np.ndarray, np.ndarray, np.int32] and args[2] == 1024
    assert np.array_equal(fake.launches[0][4][0], fake.launches[1][4][0])  # the same inputs for both
    run_once(program, "trace_free")
    assert not np.array_equal(fake.launches[0][4][0], fake.launches[2][4][0])  # fresh inputs per run
    assert len(fake.launches) == 3, "the trace-free variant is not run twice"


@needs_nvrtc
@pytest.mark.parametrize("compute, message", [
    (lambda x, y, n: None, r"row_softmax:marker_only: output 'y' has 262144 unwritten \(NaN\) elements"),
    (lambda x, y, n: (_softmax(x, y, n), y.__imul__(1.01)),
     r"row_softmax:marker_only: output 'y' differs from the reference beyond rtol 0.0001 / atol 1e-07"),
])
def test_a_wrong_output_fails_the_run_in_one_line(program, monkeypatch, compute, message):
    from argus_rt.kinds.cupy.run import run_once
    from argus_rt.kinds.errors import ReferenceMismatchError

    monkeypatch.setitem(sys.modules, "cupy", _StandInCupy(compute))
    with pytest.raises(ReferenceMismatchError, match=message) as info:
        run_once(program, "marker_only")
    assert "\n" not in str(info.value)
