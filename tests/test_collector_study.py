"""The isolated-collector study kernel and benchmarks/collector_overhead.py, without a GPU.

Builds examples/cuda/collector_study.cu in Argus modes 0/1/2 for sm_90a (nvcc), checks the SASS
footprint of the marker-only build and the static region ownership the PC-to-region map starts from,
the float64 reference, and that the benchmark exits with code 2 and says why when there is no GPU.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from toolchain import needs_nvcc

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cuda"


def _bench():
    spec = importlib.util.spec_from_file_location("collector_overhead", ROOT / "benchmarks" / "collector_overhead.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def bench():
    return _bench()


def _function(cubin):
    from argus_rt.sass import disassemble, kernel_key, parse_sass, select_function

    return select_function(parse_sass(disassemble(cubin)), kernel_key("collector_study"))


def test_region_header_is_current():
    proc = subprocess.run([sys.executable, str(EXAMPLE / "make_regions.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_program_description_is_valid(bench):
    from argus_rt.kinds.cuda.run import CudaLaunch

    launch = CudaLaunch.from_program(bench.study_program())
    assert (launch.ctas, launch.threads_per_cta, launch.arch) == (128, 256, "sm_90a")
    assert launch.reference == "collector_study_reference.py:expected"


def test_reference_matches_closed_form():
    """The stepped float64 chain equals a = b^n a0 + c (1 - b^n) / (1 - b), n = 2048, on random inputs."""
    spec = importlib.util.spec_from_file_location("csref", EXAMPLE / "collector_study_reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    rng = np.random.default_rng()
    a0, b, c = rng.uniform(0.1, 1.0, 4096), rng.uniform(0.9, 0.99, 4096), rng.uniform(0.01, 0.1, 4096)
    n = ref.OCCURRENCES * ref.FMAS_PER_OCCURRENCE
    assert n == 2048
    closed = b**n * a0 + c * (1 - b**n) / (1 - b)
    np.testing.assert_allclose(ref.chain(a0, b, c), closed, rtol=1e-12)


@needs_nvcc
def test_builds_in_all_modes_with_marker_footprint(bench):
    """Modes 0/1/2 build for sm_90a; mode 1 adds exactly the two markers' six PMTRIG words (one begin
    and one end site, the occurrence loop stays rolled) and nothing that touches memory; all three
    keep the 256 FFMAs of one occurrence."""
    from argus_rt.kinds.cuda.build import CudaBuildSpec, build
    from argus_rt.kinds.cuda.run import build_variant
    from argus_rt.markers import decode_marker
    from argus_rt.sass import disassemble, sass_arch

    program = bench.study_program()
    rid = program.regions["collector/occurrence"].id
    off = _function(build_variant(program, "trace_free"))
    marker = build_variant(program, "marker_only")
    mk = _function(marker)
    traced = build(CudaBuildSpec("collector_study.mode2", [EXAMPLE / "collector_study.cu"], argus_mode=2,
                                 include_dirs=[EXAMPLE], arch="sm_90a"))
    # triton 3.6's cuobjdump names sm_90a code "sm_90", 3.7's "sm_90a"; the build record says what
    # nvcc was asked for.
    assert sass_arch(disassemble(marker)) in ("sm_90", "sm_90a")
    assert json.loads((marker.parent / "spec.json").read_text())["params"]["spec"]["arch"] == "sm_90a"  # the build cache entry's record
    ops_off, ops_mk = Counter(i.base for i in off.instructions), Counter(i.base for i in mk.instructions)
    assert ops_off["FFMA"] == ops_mk["FFMA"] == 256 and ops_off["PMTRIG"] == 0
    words = [i.marker_immediate for i in mk.instructions if i.is_marker_word]
    assert len(words) == 6
    assert [decode_marker(words[k:k + 3]) for k in (0, 3)] == [decode_marker(w) for w in
                                                                ([0xA501, rid & 0xFFFF, rid >> 16],
                                                                 [0xA502, rid & 0xFFFF, rid >> 16])]
    mem = {"LDG", "STG", "LDS", "STS", "ATOM", "RED", "LDL", "STL"}
    assert sum(ops_mk[o] for o in mem) == sum(ops_off[o] for o in mem)
    assert Counter(i.base for i in _function(traced.cubin).instructions)["FFMA"] == 256


@needs_nvcc
def test_static_map_puts_every_ffma_in_the_region(bench):
    """The mapping run's static part on the marker-only SASS: all 256 FFMAs are owned by
    collector/occurrence; with per-PC counts shaped like the real run (8 trips of the loop body per
    warp) the benchmark's check sees exactly warps x 2048 FFMA in the region."""
    from argus_rt.backends.pcmap import build_pc_region_map, static_ownership
    from argus_rt.kinds.cuda.run import build_variant

    program = bench.study_program()
    rid = program.regions["collector/occurrence"].id
    fn = _function(build_variant(program, "marker_only"))
    own = static_ownership(fn)
    ffma = [i.pc for i in fn.instructions if i.base == "FFMA"]
    assert all(own.local_stack[pc] == (rid,) for pc in ffma)
    trips = {i.pc: 0 if i.pc not in own.entry_of else (8 if own.local_stack[i.pc] else 1) for i in fn.instructions}
    counts = {pc: float(bench.WARPS * n) for pc, n in trips.items()}  # unreachable padding never runs
    doc = build_pc_region_map(fn, counts).to_evidence()
    assert bench.ffma_count_pcmap(doc, rid) == bench.WARPS * 2048


def test_benchmark_without_gpu_exits_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the no-GPU path is not taken")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "collector_overhead.py")], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "needs a CUDA GPU" in proc.stderr and "nothing was measured" in proc.stderr


def test_benchmark_rejects_too_few_reps():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "collector_overhead.py"), "--reps", "10"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--reps must be >= 100" in proc.stderr
