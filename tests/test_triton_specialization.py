"""Argus compiles the kernel Triton's JIT runs: for every Triton example, the TTGIR Argus builds from
the program's launch equals (hash) what ``JITFunction.warmup`` -- the JIT's own launch path, run on
the CPU under a stand-in driver that reports an sm_90 target -- builds for the same arguments.

Run under Triton 3.6 (``/work/venv36``) and 3.7: the JIT internals Argus reuses are version-private."""
from __future__ import annotations

import contextlib
import difflib
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from argus_rt.kinds.triton.async_sites import discover  # noqa: E402
from argus_rt.kinds.triton.jit_equivalence import same_kernel  # noqa: E402
from argus_rt.kinds.triton.program import (  # noqa: E402
    KernelConfigError,
    TritonProgramError,
    autotune_configs,
    config_programs,
    load_kernel,
    program_ttgir,
)
from argus_rt.kinds.triton.specialization import (  # noqa: E402
    LaunchArgumentError,
    RuntimeArgsKernel,
    describe_specialization,
    jit_compile,
    tensor_arg,
)
from argus_rt.program import load_program  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "examples"
PROGRAM_FILES = (sorted(ROOT.glob("triton_corpus/*/argus_program*.json")) + [ROOT / "triton" / "argus_program.json"]
                 + [ROOT / "triton_minimal" / "argus_program.json"])
SM90 = GPUTarget("cuda", 90, 32)


class _Sm90StandInDriver:
    """What ``JITFunction.run`` asks the driver for, answered for an sm_90 device that is not there."""

    def get_current_device(self):
        return "argus-test-sm90"  # its own key in the JIT's per-device caches

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return SM90


@contextlib.contextmanager
def _standin_driver():
    from triton.runtime import driver

    saved = driver._active
    driver.set_active(_Sm90StandInDriver())
    try:
        yield
    finally:
        driver.set_active(saved)


def _jit_warmup_ttgir(program, config: int | None = None) -> str:
    """The TTGIR of ``kernel.warmup(**args, **constexprs)``: the JIT's launch path, autotuner included."""
    mod, _fn, args, _kwargs = load_kernel(program)
    obj = getattr(mod, program.launch["kernel"])
    launch = program.launch
    kwargs = dict(launch.get("constexprs", {}))
    kwargs.update({k: launch[k] for k in ("num_warps", "num_stages") if k in launch})
    with _standin_driver():
        out = obj.warmup(grid=(1,), **args, **kwargs)
    if isinstance(out, list):  # Autotuner.warmup: one kernel per config
        out = out[launch.get("config", 0) if config is None else config]
    return out.asm["ttgir"]


@pytest.fixture(scope="module")
def programs():
    return {f"{p.parent.name}/{p.name}": load_program(p) for p in PROGRAM_FILES}


@pytest.mark.parametrize("name", [f"{p.parent.name}/{p.name}" for p in PROGRAM_FILES])
def test_argus_ttgir_equals_the_jit_s(programs, name):
    program = programs[name]
    ttgir, _ = program_ttgir(program)
    jit = _jit_warmup_ttgir(program)
    if not same_kernel(ttgir, jit):  # #loc lines may name another checkout's path (Triton's cache)
        diff = [d for d in difflib.unified_diff(jit.splitlines(), ttgir.splitlines(), "jit", "argus", n=0, lineterm="")]
        pytest.fail(f"{name}: Argus's TTGIR differs from the JIT's ({len(diff)} diff lines):\n" + "\n".join(diff[:40]))
    assert "tt.divisibility = 16" in ttgir  # the launch's aligned pointers reached the compile


def test_autotuned_matmul_pipelines_with_cp_async_as_the_jit_does(programs):
    program = programs["matmul_autotuned/argus_program.json"]
    ttgir, iterations = program_ttgir(program)
    assert ttgir.count("ttg.async_copy_global_to_local") >= 2
    sites = discover(ttgir, "matmul/kloop", iterations=iterations).sites
    assert [s.label for s in sites if s.kind == "cp_async"] == ["a", "b"]
    # the bare-signature compile Argus used before: no divisibility, no cp.async (a different kernel)
    _mod, fn, _args, kwargs = load_kernel(program)
    sig = {p.name: "constexpr" if p.is_constexpr else ("*fp16" if p.name.endswith("_ptr") else "i32")
           for p in fn.params}
    bare = triton.compile(triton.compiler.ASTSource(fn, sig, {(i,): kwargs[p.name] for i, p in enumerate(fn.params)
                                                             if p.is_constexpr}),
                          target=SM90, options={"num_warps": kwargs["num_warps"], "num_stages": kwargs["num_stages"]})
    assert "ttg.async_copy_global_to_local" not in bare.asm["ttgir"]


def test_each_autotune_config_is_its_own_program_and_equals_the_jit_s(programs):
    program = programs["matmul_autotuned/argus_program.json"]
    configs = autotune_configs(program)
    assert len(configs) == 4 and configs[0]["num_warps"] == 8
    variants = config_programs(program)
    assert [p.launch["config"] for p in variants] == [0, 1, 2, 3]
    assert len({p.id for p in variants}) == 4
    for i, p in enumerate(variants):
        ttgir, _ = program_ttgir(p)
        assert f'"ttg.num-warps" = {configs[i]["num_warps"]}' in ttgir
        assert same_kernel(ttgir, _jit_warmup_ttgir(p, config=i))


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, stride, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs * stride, tl.load(x_ptr + offs * stride, mask=offs < n) * alpha, mask=offs < n)


def test_triton_s_own_rules_decide_the_specialisation():
    args = {"x_ptr": tensor_arg("float16", [4096]), "y_ptr": tensor_arg("float16", [4096], align=8),
            "n": 4096, "stride": 1, "alpha": 0.5}
    spec = describe_specialization(_scale_kernel, args, {"BLOCK": 256}, SM90)
    assert spec["x_ptr"] == {"type": "*fp16", "attrs": [["tt.divisibility", 16]]}
    assert spec["y_ptr"] == {"type": "*fp16"}  # 8-byte aligned: no divisibility hint
    assert spec["n"] == {"type": "i32", "attrs": [["tt.divisibility", 16]]}
    assert spec["stride"] == {"type": "constexpr", "value": 1}  # an integer 1 is specialised away
    assert spec["alpha"]["type"] == "fp32" and spec["BLOCK"] == {"type": "constexpr", "value": 256}
    odd = describe_specialization(_scale_kernel, dict(args, n=4095, stride=3), {"BLOCK": 256}, SM90)
    assert odd["n"] == {"type": "i32"} and odd["stride"] == {"type": "i32"}
    with _standin_driver():
        jit = _scale_kernel.warmup(grid=(1,), **args, BLOCK=256)
    assert jit_compile(_scale_kernel, args, {"BLOCK": 256}, SM90).hash == jit.hash


def test_launch_argument_errors_are_one_line_and_name_the_choices(programs):
    import dataclasses
    import json

    def with_launch(**changes):
        base = programs["softmax/argus_program.json"]
        launch = {k: v for k, v in dict(base.launch, **changes).items() if v is not None}
        return dataclasses.replace(base, launch_json=json.dumps(launch, sort_keys=True))

    cases = [
        (dict(args=None), LaunchArgumentError, r"launch.args is missing; .* for x_ptr, y_ptr, n_cols, stride$"),
        (dict(args={"x_ptr": {"tensor": "float16"}}), LaunchArgumentError, r"lacks \['y_ptr', 'n_cols', 'stride'\]"),
        (dict(args={"x_ptr": {"tensor": "half"}}), LaunchArgumentError, r"tensor dtype 'half' unknown; valid: float16"),
        (dict(args={"x_ptr": {"tensor": "float16", "shape": ["ROWS"]}}), LaunchArgumentError,
         r"shape: 'ROWS' is not an int or a name in launch.shapes \(N_COLS, N_ROWS\)"),
        (dict(args={"x_ptr": "x"}), LaunchArgumentError, r"'x' is not a tensor description"),
        (dict(kernel="nope"), TritonProgramError, r"softmax.py has no kernel 'nope'"),
        (dict(config=1), KernelConfigError, r"is not @triton.autotune'd; launch.config 1 names nothing"),
        (dict(signature={"x_ptr": "*fp32"}), TritonProgramError,
         r"launch.signature disagrees with launch.args \(x_ptr: declared '\*fp32', args give '\*fp16'\)"),
    ]
    for change, error, pattern in cases:
        with pytest.raises(error, match=pattern) as info:
            load_kernel(with_launch(**change))
        assert "\n" not in str(info.value)
    unknown = dict(programs["softmax/argus_program.json"].launch["args"], bogus=1)
    with pytest.raises(LaunchArgumentError, match=r"has no parameter\(s\) \['bogus'\]; parameters: x_ptr, y_ptr"):
        program_ttgir(with_launch(args=unknown))


def test_jit_built_kernel_launches_with_runtime_args_only():
    """The JIT's launcher takes the declared constexprs too (the JIT passes every parameter); the
    wrapper inserts them where they stand, and leaves a specialised-away 1 (stride) to the caller."""
    args = {"x_ptr": tensor_arg("float16", [4096]), "y_ptr": tensor_arg("float16", [4096]),
            "n": 4096, "stride": 1, "alpha": 0.5}
    kernel = jit_compile(_scale_kernel, args, {"BLOCK": 256}, SM90)
    names = [p.name for p in _scale_kernel.params]
    runtime = ["x", "y", 4096, 1, 0.5]
    full = kernel.full_args(runtime)
    assert len(full) == len(names) and full[names.index("BLOCK")] == 256
    assert [a for i, a in enumerate(full) if names[i] != "BLOCK"] == runtime
    assert "ttgir" in kernel.asm and kernel.hash


class _RecordingLauncher:
    """Stands for a ``CompiledKernel``: records what ``self[grid](*args)`` was given."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        assert len(grid) == 3  # what a bare CompiledKernel indexes
        return lambda *args: self.calls.append((grid, args))


def test_launches_take_every_grid_form_the_jit_takes():
    """An int, 1 to 3 ints, or a callable of the launch's meta-parameters (the form autotuned kernels
    need): the callable sees the run-time args by name and the constexprs, a TTGIR variant inherits them,
    and the launched grid is kept for sizing Argus's buffers."""
    args = {"x_ptr": tensor_arg("float16", [4096]), "y_ptr": tensor_arg("float16", [4096]),
            "n": 4096, "stride": 1, "alpha": 0.5}
    kernel = jit_compile(_scale_kernel, args, {"BLOCK": 256}, SM90)
    fake = _RecordingLauncher()
    wrapped = RuntimeArgsKernel(fake, kernel.constexpr_values, kernel.grid_meta)
    runtime = ("x", "y", 4096, 1, 0.5)
    wrapped[16](*runtime)
    wrapped[(16, 2)](*runtime)
    wrapped[lambda meta: (meta["n"] // meta["BLOCK"],)](*runtime)
    assert [g for g, _ in fake.calls] == [(16, 1, 1), (16, 2, 1), (16, 1, 1)]
    assert wrapped.launched_grid == (16, 1, 1)
    variant_fake = _RecordingLauncher()
    variant = wrapped.variant(variant_fake)
    variant[lambda meta: (meta["n"] // meta["BLOCK"], 3)](*runtime, "probe_out")
    assert variant_fake.calls == [((16, 3, 1), runtime + ("probe_out",))]  # no constexpr inserted
    for bad in ((), (0,), (1, 2, 3, 4), "16", lambda meta: None):
        with pytest.raises(LaunchArgumentError, match="must be an int, 1 to 3 positive ints, or a callable"):
            wrapped[bad](*runtime)
