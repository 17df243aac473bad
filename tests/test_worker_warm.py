"""Device workers warm up while the scheduler plans, and CUDA variants build on the CPU pool (issue 15 item 5, speed).

With ``warm_workers`` (default: where the host has an NVIDIA driver) the Runtime starts its device
workers as it is made, and each child imports torch (and opens its CUDA context, and imports Triton)
in a background thread: it says ready at once, and the first collection finds torch loaded. Here,
on the CPU, the warm-up is the torch import alone. Where collections run, the variant Transform
compiles a CUDA variant on its CPU worker, so the collection finds its cubin built.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from argus_rt.kinds.cuda import run as cuda_run
from argus_rt.program import load_program
from argus_rt.runtime import worker_process
from argus_rt.runtime.scheduler import Runtime
from argus_rt.runtime.workers import WARM_WORKERS_ENV, DeviceWorker, gpu_driver_present, warm_workers_default
from argus_rt.workspace import Workspace
from toolchain import NVCC

ROOT = Path(__file__).resolve().parent.parent


def _wait_for(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def test_a_warm_collect_child_is_ready_first_and_imports_torch_behind_it():
    start = time.monotonic()
    child = worker_process.WorkerProcess("collect", name="warm test", env={worker_process.WARM_ENV: "1"})
    try:
        ready_s = time.monotonic() - start
        warmed = lambda: any(line.startswith("argus worker: warmed up (torch ") for line in child._tail)  # noqa: E731
        assert not warmed(), "ready only after the warm-up: it must run behind the ready reply"
        assert _wait_for(warmed, 180), f"no warm-up line; output: {list(child._tail)}"
        assert ready_s < time.monotonic() - start
    finally:
        child.close()


def test_a_child_stopped_while_warming_exits_at_once_and_quietly():
    child = worker_process.WorkerProcess("collect", name="warm test", env={worker_process.WARM_ENV: "1"})
    start = time.monotonic()
    child.close(grace_s=20)
    assert time.monotonic() - start < 10 and child._proc.returncode == 0, list(child._tail)
    assert not any("Fatal Python error" in line for line in child._tail)


def test_a_warmed_child_stops_without_finalising_torch():
    """Its replies are out and its outputs on disk: it leaves with os._exit (finalising torch took ~1.4 s)."""
    child = worker_process.WorkerProcess("collect", name="warm test", env={worker_process.WARM_ENV: "1"})
    assert _wait_for(lambda: any("warmed up" in line for line in child._tail), 180), list(child._tail)
    start = time.monotonic()
    child.close(grace_s=20)
    assert child._proc.returncode == 0 and time.monotonic() - start < 1.0


def test_without_the_variable_a_child_does_not_warm_up():
    child = worker_process.WorkerProcess("collect", name="cold test")
    try:
        time.sleep(1.0)
        assert not any("warmed up" in line for line in child._tail)
    finally:
        child.close()
    assert DeviceWorker.__init__.__defaults__[-1] is False  # warm only when asked


def test_warm_workers_start_with_the_runtime(tmp_path, monkeypatch):
    with Workspace(tmp_path / "ws") as ws:
        with Runtime(ws, devices=[""], warm_workers=True) as rt:
            assert rt._workers is not None, "warm workers start as the Runtime is made, before any plan runs"
            assert rt.workers[0].ready.wait(60) and rt.worker_pids()
            assert rt.workers[0]._slot.env.get(worker_process.WARM_ENV) == "1"
        with Runtime(ws, devices=[""], warm_workers=False) as rt:
            assert rt._workers is None and not rt.warm_workers  # started on the first collection
        monkeypatch.setenv(WARM_WORKERS_ENV, "1")  # the default: warm where the host has a GPU driver, or as told
        with Runtime(ws, devices=["0"]) as rt:
            assert rt.warm_workers and rt._workers is not None
        with Runtime(ws, devices=[""]) as rt:
            assert not rt.warm_workers  # no device to run on: nothing to warm
        monkeypatch.setenv(WARM_WORKERS_ENV, "0")
        with Runtime(ws, devices=["0"]) as rt:
            assert not rt.warm_workers and rt._workers is None
    monkeypatch.delenv(WARM_WORKERS_ENV)
    assert warm_workers_default() is gpu_driver_present()



def test_the_variant_transform_prebuilds_cuda_cubins_where_collections_run(tmp_path, monkeypatch):
    """On a GPU host the Transform builds the cubin on its CPU worker (the variants in parallel, while
    the device worker warms up); elsewhere, and when the build fails, the collection builds as before."""
    import shutil
    from types import SimpleNamespace

    from argus_rt.runtime import builtin
    from argus_rt.runtime.workers import WARM_WORKERS_ENV

    if NVCC is None:
        pytest.skip("no nvcc where argus_rt.tools looks")
    program = load_program(ROOT / "examples" / "cuda")

    def transform(cache: Path, warm: str, prog=program):
        monkeypatch.setenv("ARGUS_CACHE_DIR", str(cache))
        monkeypatch.setenv(WARM_WORKERS_ENV, warm)
        ctx = SimpleNamespace(config={"variant": "marker_only"}, program=prog,
                              write_program=lambda pv: tmp_path / f"{pv.id}.json")
        return builtin.make_variant(ctx)

    assert set(transform(tmp_path / "cold", "0")) == {"program"} and not (tmp_path / "cold").exists()
    assert set(transform(tmp_path / "warm", "1")) == {"program"}
    (built,) = (tmp_path / "warm").rglob("*.cubin")
    assert built == cuda_run.build_variant(program.variant_of("marker_only"), "marker_only")  # the collection's cubin
    broken = tmp_path / "broken"
    shutil.copytree(ROOT / "examples" / "cuda", broken)
    (broken / "nested_regions.cu").write_text("this is not CUDA\n")
    assert set(transform(tmp_path / "warm2", "1", load_program(broken))) == {"program"}  # left to the collection
