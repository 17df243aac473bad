"""The mapping run of a Triton program starts Nsight Compute before it builds and reads the marker-only
variant, and the two run side by side (issue 15 item 5: build and disassembly no longer add to the
query's wall). A stand-in ``ncu`` (set through $ARGUS_NCU) stamps when it started, compiles the
kernel in its own process as the profiled runner does (into the same, initially empty, Triton cache
as this process: two compiles of one kernel at once) and prints a source page of that binary.

The parent's build waits for the stand-in's start stamp, so these tests fail if ncu starts after the
build. The error paths: a build that fails stops ncu (its process is gone, no CSV and no part file
stay) and raises the build's error; an ncu run that fails raises ncu's error after the build.
"""
from __future__ import annotations

import json
import os
import stat
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from argus_rt.program import load_program

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "triton_corpus" / "softmax" / "argus_program.json"

STAND_IN = r'''#!{python}
"""Stand-in ncu for a Triton mapping run: the runner's own compile, then its source page."""
import json, os, re, sys, tempfile, time
from pathlib import Path
_stamp = Path(os.environ["STANDIN_STARTED"] + ".part")  # renamed whole: the parent polls for the file
_stamp.write_text(json.dumps({"time": time.time(), "pid": os.getpid()}))
os.replace(_stamp, os.environ["STANDIN_STARTED"])
mode = os.environ.get("STANDIN_MODE", "ok")
if mode == "hang":
    time.sleep(300)
if mode == "fail":
    print("==ERROR== stand-in: the profiler could not start", file=sys.stderr)
    sys.exit(3)
args = sys.argv[1:]
assert "--cubin" not in args and "--symbol" not in args, args  # the runner builds the kernel itself
assert args[args.index("--target-processes") + 1] == "application-only", args
from argus_rt.backends.pcmap import read_cubin, static_ownership
from argus_rt.kinds.triton.program import program_compiled
from argus_rt.program import ProgramVersion
p = ProgramVersion.from_dict(json.load(open(args[args.index("--program") + 1])))
cubin = Path(tempfile.mkdtemp()) / "runner.cubin"
cubin.write_bytes(program_compiled(p).asm["cubin"])
f, _ = read_cubin(cubin, p.launch["kernel"])
reach = static_ownership(f).entry_of
base = 0x7F0000000000
print('"Kernel Name","%s",' % f.name)
print('"Address","Source","Instructions Executed","Thread Instructions Executed"')
for ins in f.instructions:
    text = ins.text
    if ins.targets:
        text = re.sub(r"(0x[0-9a-f]+|`\(\.L_x_\d+\))\s*$", hex(base + ins.targets[0]), text)  # ncu: absolute
    c = 4096 * 4 if ins.pc in reach else 0
    print('"%s","      %s","%d","%d"' % (hex(base + ins.pc), text, c, 32 * c))
'''


@pytest.fixture
def setup(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from argus_rt.backends import pcmap
    from argus_rt.tools import ToolNotFoundError, find_tool

    try:
        find_tool("nvdisasm")
        find_tool("cuobjdump")
    except ToolNotFoundError as exc:
        pytest.skip(f"no SASS tools: {exc}")
    script = tmp_path / "ncu"
    script.write_text(STAND_IN.replace("{python}", sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    started = tmp_path / "ncu_started.json"
    monkeypatch.setenv("ARGUS_NCU", str(script))
    monkeypatch.setenv("STANDIN_STARTED", str(started))
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "argus_cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton_cache"))  # both processes compile afresh
    monkeypatch.setattr(pcmap, "device_capability", lambda: (9, 0))
    out = tmp_path / "out"
    out.mkdir()
    return load_program(SOFTMAX), out, started


def _wait_for(path: Path, limit_s: float = 60.0) -> dict:
    deadline = time.time() + limit_s
    while not path.is_file():
        assert time.time() < deadline, "ncu was not started before the build (no start stamp)"
        time.sleep(0.05)
    return json.loads(path.read_text())


def _build_after_ncu_started(monkeypatch, started: Path, then=None):
    """Make the parent's build wait until ncu has started, then build (or call ``then``)."""
    from argus_rt.kinds import run_variant

    real = run_variant.variant_cubin
    seen = {}

    def build(program, variant):
        seen["ncu"] = _wait_for(started)
        seen["build_start"] = time.time()
        return then() if then else real(program, variant)

    monkeypatch.setattr(run_variant, "variant_cubin", build)
    return seen


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_ncu_runs_while_the_parent_builds_and_the_map_checks_it_is_one_binary(setup, monkeypatch):
    from argus_rt.backends import pcmap

    program, out, started = setup
    seen = _build_after_ncu_started(monkeypatch, started)
    doc, profile = pcmap.mapping_run(program, out)
    assert seen["ncu"]["time"] <= seen["build_start"]
    prov = doc["provenance"]
    assert prov["ncu_alongside"] == ["build", "disassemble"]
    s = prov["seconds"]
    assert {"build", "disassemble", "ncu", "ncu_wait", "map"} <= set(s)
    # ncu's step is its whole run from its start, so it covers the parent's build and disassembly
    assert s["ncu"] >= s["ncu_wait"] and s["ncu"] + 0.05 >= s["build"] + s["disassemble"] + s["ncu_wait"]
    assert prov["kernel_symbol"] == "softmax_kernel" and (out / "ncu_source_sass.csv").is_file()
    ids = {r.name: r.id for r in program.regions}
    assert {rid for _, rid, n in doc["entries"] if n > 0} >= set(ids.values())
    assert not list(out.glob(".*.part"))


def test_a_failed_build_stops_ncu_and_leaves_no_csv(setup, monkeypatch):
    from argus_rt.backends import pcmap
    from argus_rt.kinds.triton.program import TritonProgramError

    program, out, started = setup
    monkeypatch.setenv("STANDIN_MODE", "hang")

    def fail():
        raise TritonProgramError("compiling 'softmax_kernel' failed: stand-in error")

    seen = _build_after_ncu_started(monkeypatch, started, then=fail)
    t0 = time.time()
    with pytest.raises(TritonProgramError, match="stand-in error"):
        pcmap.mapping_run(program, out)
    assert time.time() - t0 < 60, "the hanging ncu was waited for instead of stopped"
    assert not _alive(seen["ncu"]["pid"]), "ncu outlived the failed build"
    assert not (out / "ncu_source_sass.csv").exists() and not list(out.glob(".*.part"))


def test_a_failed_ncu_run_reports_its_own_error_after_the_build(setup, monkeypatch):
    from argus_rt.backends import pcmap
    from argus_rt.backends.ncu import NcuError

    program, out, started = setup
    monkeypatch.setenv("STANDIN_MODE", "fail")
    seen = _build_after_ncu_started(monkeypatch, started)
    with pytest.raises(NcuError, match="ncu exited with 3: .*could not start"):
        pcmap.mapping_run(program, out)
    assert "build_start" in seen  # the build ran; ncu's failure is reported when the run waits for it
    assert not list(out.glob(".*.part"))


def test_kinds_that_hand_the_cubin_over_start_ncu_after_the_build():
    """CUDA's runner launches the parent's cubin, so its ncu run cannot start before the build; the
    capability is each kind's own declaration (its kind.py), read through the registry."""
    from argus_rt.kinds.registry import kinds, kinds_with

    alongside = kinds_with({"builds_alongside_ncu"})
    assert alongside == {"triton"}  # numba's link step writes a fixed temporary name: not alongside
    assert not any(k.hands_over for k in kinds() if k.name in alongside)


def test_the_mapping_run_starts_ncu_first_only_for_a_kind_that_builds_alongside_it(tmp_path, monkeypatch):
    """A registered kind's declaration alone decides the order (no kind name in the mapping run)."""
    from argus_rt.backends import ncu, pcmap
    from argus_rt.kinds import registry, run_variant

    order = []

    class Stop(Exception):
        pass

    def start(cmd, **_kw):
        order.append("ncu")
        raise Stop

    def build(program, variant):
        order.append("build")
        raise Stop

    monkeypatch.setattr(ncu, "start_ncu_command", start)
    monkeypatch.setattr(run_variant, "variant_cubin", build)
    monkeypatch.setattr(pcmap, "mapping_command", lambda *a, **k: (["ncu"], {}, tmp_path / "stamps"))
    program = load_program(SOFTMAX)
    triton = registry.get_kind("triton")
    for alongside, first in ((True, "ncu"), (False, "build")):
        order.clear()
        registry.register_kind(replace(triton, builds_alongside_ncu=alongside), replace=True)
        try:
            with pytest.raises(Stop):
                pcmap.mapping_run(program, tmp_path, kernel="softmax_kernel")
        finally:
            registry.register_kind(triton, replace=True)
        assert order == [first]


def test_the_mapping_command_profiles_the_runner_s_own_process_only(tmp_path, monkeypatch):
    """The runner launches the kernel itself; the helpers it starts (Triton's ``ptxas --version``,
    ``ldconfig -p``) launch none, so ncu does not attach to them."""
    from argus_rt.backends import ncu
    from argus_rt.backends.pcmap import mapping_command

    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ARGUS_NCU", str(fake))
    cmd, _env, _stamps = mapping_command(load_program(SOFTMAX), tmp_path, kernel="softmax_kernel")
    assert cmd[cmd.index("--target-processes") + 1] == "application-only"
    plain = ncu.ncu_command(["./a.out"], ncu="/x/ncu")
    assert plain[plain.index("--target-processes") + 1] == "all"  # a user's program may run kernels in a child
    with pytest.raises(ValueError, match="target_processes 'some' unknown; valid: all, application-only"):
        ncu.ncu_command(["./a.out"], ncu="/x/ncu", target_processes="some")
