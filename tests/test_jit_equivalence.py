"""The CPU half of the JIT-equivalence check: the noise rule, the difference shown, and the JIT
launcher that stands where a CompiledKernel goes in a module's run()."""
from __future__ import annotations

import pytest

from argus_rt.kinds.triton.jit_equivalence import (
    RETIMED_ROUNDS,
    TIMED_ROUNDS,
    JitLaunch,
    argument_differences,
    binary_difference,
    first_difference,
    timed_verdict,
    within_noise,
)


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


def test_a_timing_disagreement_is_decided_by_a_longer_second_series():
    """A first series 8% apart (H200 2026-12-02: one matmul candidate, ratio 0.923) is timed again over
    RETIMED_ROUNDS; that series decides, and the first ratio is kept. An agreeing first series is final."""
    calls = []

    def series_of(first, second):
        def series(rounds):
            calls.append(rounds)
            ratio = first if len(calls) == 1 else second
            return [ratio * (1 + 0.001 * (i % 3)) for i in range(rounds - 1)], [1.0 + 0.001 * (i % 3) for i in range(rounds - 1)]
        return series

    ok, times = timed_verdict(series_of(0.923, 1.01))
    assert ok and calls == [TIMED_ROUNDS, RETIMED_ROUNDS] and times["first_ratio"] == pytest.approx(0.923)
    calls.clear()
    ok, times = timed_verdict(series_of(0.923, 0.925))
    assert not ok and times["ratio"] == pytest.approx(0.925, rel=1e-3) and len(calls) == 2
    calls.clear()
    ok, times = timed_verdict(series_of(1.02, 0.5))
    assert ok and calls == [TIMED_ROUNDS] and "first_ratio" not in times


def test_binary_difference_says_whether_the_cubins_are_the_same():
    class Meta:
        num_warps, num_stages, num_ctas, shared, maxnreg = 4, 3, 1, 1024, None

    class Kernel:
        def __init__(self, cubin, shared=1024):
            self.asm, self.metadata = {"cubin": cubin}, Meta()
            self.metadata.shared = shared

    assert "byte-identical" in binary_difference(Kernel(b"abc"), Kernel(b"abc"))
    assert binary_difference(Kernel(b"abc"), Kernel(b"abcd", shared=2048)) == (
        "the cubins differ (3 vs 4 bytes; metadata shared 1024 vs 2048)")
