"""Multicast stays off in every kind of process the project starts, even when the caller's
environment turned it on (``NCCL_NVLS_ENABLE=1`` inherited): each test starts one kind of child with
the unsafe values set here and reads back what the child saw.

``standin_env`` (a collect backend and a synthesis handler) are registered at import: worker and CPU
pool processes import this module by name.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from argus_rt.backends.base import BackendAdapter, register_backend
from argus_rt.gpu_env import MULTICAST_OFF
from argus_rt.runtime.handlers import register_synthesis

ROOT = Path(__file__).resolve().parent.parent
UNSAFE = {"NCCL_NVLS_ENABLE": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "0", "NVSHMEM_DISABLE_NVLS": "0"}
ENV_OUT = "ARGUS_TEST_ENV_OUT"  # where a child writes the multicast variables it saw
REPORT_ENV = ("import json, os; json.dump({k: os.environ.get(k) for k in %r}, open(os.environ[%r], 'w'))"
              % (sorted(MULTICAST_OFF), ENV_OUT))


def seen(path: Path) -> dict:
    return json.loads(path.read_text())


def fake_tool(tmp_path: Path, name: str) -> Path:
    """An executable that reports its environment, standing in for ncu or nsys."""
    tool = tmp_path / name
    tool.write_text(f"#!{sys.executable}\n{REPORT_ENV}\n")
    tool.chmod(0o755)
    return tool


@pytest.fixture
def unsafe_env(monkeypatch, tmp_path):
    for name, value in UNSAFE.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "env.json"
    monkeypatch.setenv(ENV_OUT, str(out))
    return out


def _env_doc() -> dict:
    return {k: os.environ.get(k) for k in sorted(MULTICAST_OFF)}


class EnvCollect(BackendAdapter):
    name = "standin_env"
    outputs = ("env",)
    needs_gpu = False

    def collect(self, ctx):
        return {"env": ctx.write_json("env", _env_doc())}


register_backend(EnvCollect(), replace=True)


@register_synthesis("standin_env")
def _env_synth(ctx):
    return {"facts": ctx.write_json("facts", _env_doc())}


def test_worker_and_cpu_pool_processes(unsafe_env, tmp_path):
    from argus_rt.runtime.scheduler import Runtime
    from argus_rt.tasks import Plan, Task
    from argus_rt.workspace import Workspace
    from test_runtime_standins import demo_program

    pv = demo_program()
    collect = Task(kind="collect", op="standin_env", program=pv.id, outputs=("env",), device="gpu")
    synth = Task(kind="synthesize", op="standin_env", program=pv.id, outputs=("facts",))
    plan = Plan(query={}, programs={pv.id: pv.to_dict()}, tasks={collect.id: collect, synth.id: synth}, targets={})
    with Workspace(tmp_path / "ws") as ws, Runtime(ws, devices=[""], cpu_pool="process") as rt:
        res = rt.run(plan)
    assert res.ok, [r.error for r in res.failed()]
    assert res.outputs(collect.id)["env"].read_json() == MULTICAST_OFF
    assert res.outputs(synth.id)["facts"].read_json() == MULTICAST_OFF


def test_trace_runner_process(unsafe_env):
    from argus_rt.kinds.run_variant import runner_env

    subprocess.run([sys.executable, "-c", REPORT_ENV], env=runner_env(), check=True, timeout=60)
    assert seen(unsafe_env) == MULTICAST_OFF


def test_ncu_process(unsafe_env, tmp_path, monkeypatch):
    from argus_rt.backends import ncu

    monkeypatch.setenv("NCU", str(fake_tool(tmp_path, "ncu")))
    for env in (None, dict(os.environ)):  # inherited, and a program environment handed over as is
        unsafe_env.unlink(missing_ok=True)
        try:
            ncu.run_ncu(["./program"], outdir=tmp_path, env=env)
        except ncu.BackendError:
            pass  # the fake printed no profile; only its environment matters here
        assert seen(unsafe_env) == MULTICAST_OFF


def test_nvbit_program_process(unsafe_env, tmp_path, monkeypatch):
    from argus_rt.backends import nvbit

    monkeypatch.setattr(nvbit, "build_tool", lambda outdir: tmp_path / "no_tool.so")
    program = SimpleNamespace(launch={"argv": [sys.executable, "-c", REPORT_ENV]}, kind="cuda")
    ctx = SimpleNamespace(program=program, inputs={}, outdir=tmp_path, config={})
    with pytest.raises(FileNotFoundError):  # the program ran without the (absent) tool: no counts file
        nvbit.NvbitAdapter().collect(ctx)
    assert seen(unsafe_env) == MULTICAST_OFF


def test_nsys_process(unsafe_env, tmp_path, monkeypatch):
    from argus_rt.backends import systrace

    monkeypatch.setattr(systrace, "find_nsys", lambda: fake_tool(tmp_path, "nsys"))
    with pytest.raises(systrace.NsysNoReportError):
        systrace.run_nsys(["./program"], tmp_path)
    assert seen(unsafe_env) == MULTICAST_OFF


def test_pytest_process_through_conftest(unsafe_env):
    code = f"import runpy; runpy.run_path({str(ROOT / 'tests' / 'conftest.py')!r}); {REPORT_ENV}"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)
    assert seen(unsafe_env) == MULTICAST_OFF


def _rank_env(rank, world, port, q):
    q.put((rank, "ok", _env_doc()))


def test_spawned_test_ranks(unsafe_env):
    from rank_procs import run_ranks

    out = run_ranks(_rank_env, 1, wait_s=120)
    assert out == {0: ("ok", MULTICAST_OFF)}


def test_benchmark_processes_and_their_children(unsafe_env):
    code = f"import subprocess, sys, benchmarks; subprocess.run([sys.executable, '-c', {REPORT_ENV!r}], check=True)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)
    assert seen(unsafe_env) == MULTICAST_OFF


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "scripts").glob("*.sh")))
def test_gpu_scripts_export_multicast_off_before_running_anything(script):
    lines = (ROOT / "scripts" / script).read_text().splitlines()
    first_run = next(i for i, line in enumerate(lines) if re.search(r"\b(python3?|torchrun|bash)\b", line)
                     and not line.lstrip().startswith("#"))
    exported = " ".join(line for line in lines[:first_run] if line.startswith("export "))
    for name, value in MULTICAST_OFF.items():
        assert f"{name}={value}" in exported.split(), f"{script} does not export {name}={value} first"
