"""The CPU half of the JIT-equivalence check: the noise rule, the difference shown, and the JIT
launcher that stands where a CompiledKernel goes in a module's run()."""
from __future__ import annotations

import pytest

from argus_rt.kinds.triton.jit_equivalence import JitLaunch, argument_differences, first_difference, within_noise


def test_within_noise_allows_the_floor_and_the_spread_and_no_more():
    same = [1.00, 1.01, 0.99, 1.00, 1.02]
    ok, t = within_noise(same, [x * 1.03 for x in same])
    assert ok and t["tolerance"] == pytest.approx(0.05)
    assert not within_noise(same, [x * 1.10 for x in same])[0]
    noisy = [1.0, 1.2, 0.8, 1.1, 0.9]  # MAD 10%: 3x spread = 30% tolerance
    assert within_noise(noisy, [x * 1.2 for x in noisy])[0]
    assert not within_noise([1.0] * 5, [15.3] * 5)[0]  # the tutorial matmul's 0.2114 vs 0.0138 ms, scaled


def test_first_difference_names_the_line_and_skips_locations():
    a = "module {\n  %0 = tt.load %p : tensor<64xf16>\n}\n#loc1 = loc(1)\n"
    b = "module {\n  %0 = ttg.async_copy_global_to_local %p\n}\n#loc1 = loc(2)\n"
    assert first_difference(a, b) == ("line 2: '%0 = tt.load %p : tensor<64xf16>' vs "
                                      "'%0 = ttg.async_copy_global_to_local %p'")
    assert first_difference(a, a.replace("loc(1)", "loc(9)")) == "only in #loc lines"


def test_jit_launch_passes_the_launch_kwargs_and_keeps_the_kernel():
    calls = []

    class FakeJit:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                calls.append((grid, args, kwargs))
                return "kernel"
            return launch

    jit = JitLaunch(FakeJit(), {"BLOCK": 1024, "num_warps": 4})
    jit[(8,)](1, 2)  # what a module's run() does with its `compiled`
    assert calls == [((8,), (1, 2), {"BLOCK": 1024, "num_warps": 4})] and jit.kernel == "kernel"


def test_argument_differences_name_what_the_run_passes_that_the_launch_does_not_say():
    from argus_rt.kinds.triton.specialization import TensorArg, TorchDtypeName, tensor_arg

    class Param:
        def __init__(self, name, is_constexpr=False):
            self.name, self.is_constexpr = name, is_constexpr

    class Fn:
        params = [Param("x"), Param("y"), Param("n"), Param("BLOCK", True)]

    described = {"x": tensor_arg("float16", [64]), "y": tensor_arg("float16", [64]), "n": 64}
    passed = (TensorArg(TorchDtypeName("float16"), (64,), 256), TensorArg(TorchDtypeName("float32"), (8, 8), 8), 60)
    assert argument_differences(Fn, described, passed) == [
        "y: run passes torch.float32[8, 8], launch.args gives torch.float16[64]",
        "y: run passes a 8-byte aligned address, launch.args says align 256",
        "n: run passes 60, launch.args gives 64"]
    assert argument_differences(Fn, described, passed[:1] + (described["y"], 64)) == []


def test_same_kernel_ignores_only_the_loc_definitions():
    """Triton's cache can hand back a kernel of the same source built from another directory (a forked
    program version, another checkout), whose #loc lines name that directory: still the same kernel."""
    from argus_rt.kinds.triton.jit_equivalence import same_kernel

    a = '#loc = loc("/a/k.py":1:0)\nmodule {\n  tt.func @k() loc(#loc)\n}\n#loc1 = loc("/a/k.py":2:3)\n'
    moved = a.replace("/a/", "/b/")
    changed = moved.replace("tt.func @k()", "tt.func @k(%arg0: i32)")
    assert same_kernel(a, moved) and not same_kernel(a, changed)
