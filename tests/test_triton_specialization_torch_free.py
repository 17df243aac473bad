"""Argus's compile of a Triton program imports no torch in a process that has none (the CLI's plan-time
check, ``discover``): Triton's native specialiser imports torch on its first call only to register
a fast path for ``torch.Tensor``, which Argus's stand-in arguments do not take
(:func:`argus_rt.kinds.triton.specialization._without_torch_import`). The kernels must be the same:
every example's TTGIR, compiled in a fresh process without torch, equals the one compiled after
``import torch``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PROGRAM_FILES = (sorted(EXAMPLES.glob("triton_corpus/*/argus_program*.json")) + [EXAMPLES / "triton" / "argus_program.json"]
                 + [EXAMPLES / "triton_minimal" / "argus_program.json"])

SCRIPT = """
import json, sys
if sys.argv[1] == "torch_first":
    import torch  # noqa: F401
from argus_rt.kinds.triton.program import check_program
from argus_rt.program import load_program
ttgir = {p: check_program(load_program(p), use_cache=False) for p in sys.argv[2:]}
print(json.dumps({"ttgir": ttgir, "torch": "torch" in sys.modules}))
"""


def _compile_all(mode: str, tmp_path: Path) -> dict:
    env = dict(os.environ, ARGUS_CACHE_DIR=str(tmp_path / f"cache_{mode}"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode, *map(str, PROGRAM_FILES)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_example_compiles_without_torch_to_the_same_ttgir(tmp_path):
    pytest.importorskip("torch")
    free, first = _compile_all("torch_free", tmp_path), _compile_all("torch_first", tmp_path)
    assert free["torch"] is False, "compiling a Triton program imported torch"
    assert first["torch"] is True
    assert free["ttgir"] == first["ttgir"] and len(free["ttgir"]) == len(PROGRAM_FILES)


def test_the_guard_acts_only_in_a_one_thread_process_without_torch(monkeypatch):
    from argus_rt.kinds.triton.specialization import _without_torch_import

    monkeypatch.delitem(sys.modules, "torch", raising=False)  # restored after the test
    # pytest's process may hold threads left by earlier tests (a one-thread process is what the guard is for)
    threads = [1]
    monkeypatch.setattr(threading, "active_count", lambda: threads[0])
    with _without_torch_import():
        assert "torch" in sys.modules and sys.modules["torch"] is None  # an import of torch fails here
    assert "torch" not in sys.modules, "the guard left torch unimportable"
    with pytest.raises(KeyError), _without_torch_import():
        raise KeyError("the guard is undone on errors too")
    assert "torch" not in sys.modules

    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    threads[0] = 2
    try:
        with _without_torch_import():  # another thread might be importing torch: leave sys.modules alone
            assert "torch" not in sys.modules
    finally:
        release.set()
        other.join()
