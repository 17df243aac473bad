"""The process Nsight Compute profiles does only what must be profiled (issue 15 item 5, speed).

For a CUDA program whose launch is described in JSON, ``python -m argus_rt.kinds.run_variant run
--cubin C --symbol S --outputs F`` draws its inputs with NumPy, launches the given cubin through the
driver API (:class:`argus_rt.launch.DeviceArray`) and saves the arguments before and after the
launch; it imports neither torch nor Triton. The parent checks those saved outputs against the
program's reference with the same tolerance and the same one-line errors.

No GPU here: ``tests/stub_driver`` stands in for ``cuda.bindings.driver`` (host memory, a NumPy
version of the example kernels), first on the runner's ``PYTHONPATH``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from argus_rt.kinds import run_variant
from argus_rt.kinds.cuda import run as cuda_run
from argus_rt.kinds.errors import ProgramRunError, ReferenceMismatchError
from argus_rt.program import load_program

ROOT = Path(__file__).resolve().parent.parent
STUB_DRIVER = ROOT / "tests" / "stub_driver"


def _stub_env(tmp_path: Path, **extra) -> dict:
    env = run_variant.runner_env()
    env["PYTHONPATH"] = f"{STUB_DRIVER}:{env['PYTHONPATH']}"
    env["STUB_DRIVER_LOG"] = str(tmp_path / "driver_log.json")
    env[run_variant.TIMINGS_ENV] = str(tmp_path / "stamps.json")
    env.update(extra)
    return env


def _profiled_run(tmp_path: Path, **env) -> tuple[object, Path, dict]:
    """Run the runner as ncu would start it (the cubin handed over, outputs saved): (program, outputs, log)."""
    program = load_program(ROOT / "examples" / "cuda").variant_of("marker_only")
    cubin = tmp_path / "given.cubin"
    cubin.write_bytes(b"\x7fELF stand-in cubin")  # the stub driver loads any bytes
    outputs = tmp_path / "profiled_run.npz"
    argv = run_variant.runner_argv(program, "marker_only", tmp_path, cubin=cubin, symbol="nested_regions",
                                   outputs=outputs)
    done = subprocess.run(argv, env=_stub_env(tmp_path, **env), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"outputs={outputs}" in done.stdout and "max_rel_err=None" in done.stdout
    return program, outputs, json.loads((tmp_path / "driver_log.json").read_text())


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    return _profiled_run(tmp_path_factory.mktemp("profiled"))


def test_the_profiled_cuda_run_imports_neither_torch_nor_triton(profiled):
    _program, outputs, log = profiled
    assert log["torch"] is False, "the profiled process imported torch (seconds under ncu, and a CUDA context of its own)"
    assert log["triton"] is False
    assert log["launches"] == [{"kernel": "nested_regions", "grid": [128, 1, 1], "block": [256, 1, 1],
                                "ints": [32768, 4, 64]}]
    with np.load(outputs) as saved:
        assert sorted(saved.files) == ["after_0", "after_1", "before_0", "before_1"]
        assert np.isnan(saved["before_0"]).all() and not np.isnan(saved["after_0"]).any()  # poisoned, then written
        assert np.array_equal(saved["before_1"], saved["after_1"])  # the input is not written


def test_the_parent_checks_the_profiled_launch_s_own_outputs(profiled, tmp_path):
    program, outputs, _ = profiled
    assert cuda_run.check_saved_run(program, outputs) == 0.0  # the stub computes the reference exactly
    # a wrong kernel in the profiled process: the parent's check sees its outputs and refuses
    _, wrong, _ = _profiled_run(tmp_path, STUB_KERNEL_MODE="zeros")
    with pytest.raises(ReferenceMismatchError, match=r"^output arg 0 differs from the reference: max rel err .* > rtol"):
        cuda_run.check_saved_run(program, wrong)
    with np.load(outputs) as saved:
        arrays = {k: saved[k] for k in saved.files}
    arrays["after_0"][:7] = np.nan
    np.savez(tmp_path / "unwritten.npz", **arrays)
    with pytest.raises(ReferenceMismatchError, match=r"^output arg 0: 7 elements unwritten \(NaN\)$"):
        cuda_run.check_saved_run(program, tmp_path / "unwritten.npz")
    np.savez(tmp_path / "short.npz", **{**arrays, "after_0": arrays["after_0"][:10]})
    with pytest.raises(ProgramRunError, match=r"arg 0 after the launch is float32\[10\], the launch declares float32"):
        cuda_run.check_saved_run(program, tmp_path / "short.npz")
    with pytest.raises(ProgramRunError, match="saved no outputs"):
        cuda_run.check_saved_run(program, tmp_path / "none.npz")


def test_runner_stamps_split_a_torch_free_run(profiled):
    stamps = json.loads((Path(profiled[1]).parent / "stamps.json").read_text())
    assert stamps["main"] <= stamps["run"] <= stamps["ran"]


def test_host_arguments_are_seeded_and_follow_each_init():
    import torch

    program = load_program(ROOT / "examples" / "cuda")
    args = [{"tensor": "float32", "shape": [4096], "init": "uniform", "low": -1.0, "high": 1.0},
            {"tensor": "bfloat16", "shape": [4096], "init": "randn"},
            {"tensor": "int32", "shape": [64], "init": "randint", "low": 3, "high": 9},
            {"tensor": "float16", "shape": [8], "init": "poison"},
            {"tensor": "int64", "shape": [8], "init": "poison"},
            {"tensor": "uint8", "shape": [8], "init": "zeros"},
            {"int32": 7}, {"float32": 0.5}]
    launch = cuda_run.CudaLaunch.from_program(program)
    launch = type(launch)(**{**launch.__dict__, "args": tuple(args)})
    a, b = cuda_run.host_arguments(launch, seed=5), cuda_run.host_arguments(launch, seed=5)
    assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))
    assert not np.array_equal(a[0], cuda_run.host_arguments(launch, seed=6)[0])
    assert a[0].dtype == np.float32 and -1 <= a[0].min() and a[0].max() < 1
    assert a[1].dtype == np.uint16  # bfloat16 bits, rounded as torch rounds
    rng = np.random.default_rng(5)
    rng.random(4096)  # the uniform argument's draw comes first
    want = torch.from_numpy(rng.standard_normal(4096, dtype=np.float32)).to(torch.bfloat16)
    assert torch.equal(cuda_run._cpu_tensor(a[1], args[1]), want)
    assert a[2].dtype == np.int32 and 3 <= a[2].min() and a[2].max() < 9
    assert np.isnan(a[3]).all() and a[3].dtype == np.float16 and (a[4] == -1).all() and not a[5].any()
    assert a[6] == np.int32(7) and type(a[6]) is np.int32 and type(a[7]) is np.float32


def test_capability_and_context_come_from_the_driver_without_torch(tmp_path):
    code = ("import sys\n"
            "from argus_rt.backends.pcmap import device_capability\n"
            "from argus_rt.launch import CubinModule\n"
            "CubinModule.load(b'x')\n"  # first: the driver is initialised by the loader itself, not by torch
            "print(device_capability())\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], env=_stub_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["(9,", "0)", "False"]


def test_the_elf_listing_names_arch_and_functions():
    from argus_rt.elf import elf_arch, elf_functions

    new = ("\n64-bit ELF: type=ET_EXEC, ABI=8, sm=90, toolkit=13.0, flags=0xa005a04\nSections:\n"
           "Index Offset   Size ES Align                      Type    Flags Link     Info Name\n"
           "   12   1d80    600  0 80                     PROGBITS        6    3        c .text._Z1kPf\n"
           "   13   1e80    100  0  4                     PROGBITS        2    0        0 .nv.constant0._Z1kPf\n"
           " 0x3               0               0      0x3        0   0x12     .text._Z1kPf\n")
    old = "\n64bit elf: type=2, abi=7, sm=90a, toolkit=128, flags = 0x5a0d5a\n" + new.split("\n", 2)[2]
    assert elf_arch(new) == "sm_90" and elf_arch(old) == "sm_90a" and elf_arch("no header") is None
    assert elf_functions(new) == ["_Z1kPf"]  # code sections only, not the symbol table's row


def test_a_runner_program_saves_no_arguments(tmp_path):
    program = load_program(ROOT / "examples" / "megakernel").variant_of("marker_only")
    cubin = tmp_path / "given.cubin"
    cubin.write_bytes(b"x")
    code = ("from pathlib import Path\n"
            "from argus_rt.kinds.cuda.run import run_once\n"
            "from argus_rt.program import load_program\n"
            f"p = load_program({str(ROOT / 'examples' / 'megakernel')!r}).variant_of('marker_only')\n"
            f"run_once(p, 'marker_only', cubin=Path({str(cubin)!r}), symbol='argus_megakernel', "
            f"outputs=Path({str(tmp_path / 'o.npz')!r}))\n")
    done = subprocess.run([sys.executable, "-c", code], env=_stub_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "has a runner, which checks its own outputs" in done.stderr, program.name


def test_a_triton_program_refuses_the_cuda_hand_overs(tmp_path):
    program = load_program(ROOT / "examples" / "triton_corpus" / "softmax")
    argv = run_variant.runner_argv(program, "marker_only", tmp_path, outputs=tmp_path / "o.npz")
    start = time.time()
    done = subprocess.run(argv, env=run_variant.runner_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "are for cuda programs; a triton program" in done.stderr and time.time() - start < 60


def test_without_outputs_the_run_checks_its_own_launch(tmp_path):
    """The ``ncu`` adapter's runner (and the trace task) check in-process: same inputs path, torch only for the check."""
    cubin = tmp_path / "given.cubin"
    cubin.write_bytes(b"x")
    code = ("import json, sys\n"
            "from pathlib import Path\n"
            "from argus_rt.kinds.cuda.run import run_once\n"
            "from argus_rt.program import load_program\n"
            f"p = load_program({str(ROOT / 'examples' / 'cuda')!r}).variant_of('marker_only')\n"
            f"res = run_once(p, 'marker_only', cubin=Path({str(cubin)!r}), symbol='nested_regions')\n"
            "print(json.dumps([res['max_rel_err'], 'outputs' in res]))\n")
    done = subprocess.run([sys.executable, "-c", code], env=_stub_env(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0.0, False]
    log = json.loads((tmp_path / "driver_log.json").read_text())
    assert len(log["launches"]) == 1 and log["torch"] is True  # imported by the reference check, after the launch
