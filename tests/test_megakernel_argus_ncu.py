"""What ``argus query examples/megakernel`` asks of Nsight Compute, on the CPU (no ncu, no GPU).

The megakernel is one cooperative launch inside a PyTorch runner that launches thousands of other
kernels (random weights, the fp32 reference). A query stays minutes long only if ncu profiles the
megakernel's first launch alone, by kernel replay, once for every PC-attributed signal; and if
reading ncu's source page is linear in its rows (it was quadratic: 17,440 rows x one parse of the
whole listing per row, ~30 min per call on this kernel, issue 16). These tests build the command
lines without running ncu, and run the mapping on the real marker-only cubin with a stand-in ncu.
"""
from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from argus_rt.backends import ncu
from argus_rt.backends.pcmap import mapping_command
from argus_rt.evidence import PcRegionCounts
from argus_rt.kinds.cuda.run import CudaLaunch
from argus_rt.kinds.run_variant import TIMINGS_ENV
from argus_rt.program import load_program
from argus_rt.query import make_plan
from toolchain import needs_nvcc

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "megakernel"
PC_SIGNALS = ("instruction_mix", "barrier_count", "stall_reasons")


@pytest.fixture(scope="module")
def program():
    return load_program(EXAMPLE)


@pytest.fixture
def fake_ncu_path(tmp_path, monkeypatch):
    """An executable named ncu, so command lines can be built where no ncu is installed (never run)."""
    exe = tmp_path / "ncu"
    exe.write_text("#!/bin/sh\nexit 99\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("ARGUS_NCU", str(exe))
    return exe


def _flag(cmd: list[str], flag: str) -> list[str]:
    """Every value given to ``flag`` before the profiled program's argv."""
    ncu_part = cmd[:cmd.index(sys.executable)] if sys.executable in cmd else cmd
    return [ncu_part[k + 1] for k, word in enumerate(ncu_part[:-1]) if word == flag]


def assert_profiles_the_first_megakernel_launch_only(cmd: list[str]) -> None:
    assert _flag(cmd, "-k") == ["regex:argus_megakernel"], f"no kernel-name filter on the megakernel: {cmd}"
    assert _flag(cmd, "-c") == ["1"], f"ncu must stop after the megakernel's first launch: {cmd}"
    assert _flag(cmd, "--replay-mode") == ["kernel"], f"application replay reruns the whole runner per pass: {cmd}"
    assert "SourceCounters" in _flag(cmd, "--section")
    assert "--launch-skip" not in cmd and "-s" not in cmd[:cmd.index(sys.executable)]


def test_the_query_profiles_the_megakernel_once_filtered_to_its_first_launch(program, fake_ncu_path, tmp_path):
    """latency + every PC-attributed signal: two collections, and one ncu run whose command line names
    the megakernel, one launch and kernel replay."""
    plan = make_plan(program, "decode", ("latency",) + PC_SIGNALS)
    collects = [t for t in plan.tasks.values() if t.kind == "collect"]
    assert sorted(t.op for t in collects) == ["pcmap", "trace"], [t.op for t in collects]
    (run,) = [t for t in collects if t.op in ("pcmap", "ncu")]
    variant = program.variant_of("marker_only")
    assert run.program == variant.id, "ncu profiles the marker-only build, the one that is PC-mapped"
    kernel = CudaLaunch.from_program(variant).kernel
    cmd, env, stamps = mapping_command(variant, tmp_path, kernel=kernel, sections=tuple(run.config.get("sections", ())))
    assert_profiles_the_first_megakernel_launch_only(cmd)
    assert set(_flag(cmd, "--section")) == {"SourceCounters", "WarpStateStats"}  # stall_reasons rides the same run
    program_argv = cmd[cmd.index(sys.executable):]
    assert program_argv[1:4] == ["-m", "argus_rt.kinds.run_variant", "run"]
    assert program_argv[program_argv.index("--variant") + 1] == "marker_only"
    assert env[TIMINGS_ENV] == str(stamps), "the profiled runner stamps its phases for provenance.seconds"


def test_the_ncu_adapter_filters_the_megakernel_too(program, fake_ncu_path, tmp_path):
    """A query that asks the plain ``ncu`` backend for per-PC counters of the megakernel (same rules)."""
    ctx = SimpleNamespace(program=program.variant_of("marker_only"), config={}, inputs={}, outdir=tmp_path)
    cmd, env, kernel = ncu.NcuAdapter().command(ctx)
    assert kernel == "argus_megakernel" and env is not None
    assert_profiles_the_first_megakernel_launch_only(cmd)
    cmd, _, _ = ncu.NcuAdapter().command(SimpleNamespace(**{**vars(ctx), "config": {"launches": 3}}))
    assert _flag(cmd, "-c") == ["3"] and _flag(cmd, "-k") == ["regex:argus_megakernel"]


def test_ncu_command_always_filters_when_given_a_kernel():
    cmd = ncu.ncu_command(["./prog"], "argus_megakernel", ncu="/x/ncu")
    assert cmd[cmd.index("-k") + 1] == "regex:argus_megakernel" and cmd[cmd.index("-c") + 1] == "1"
    assert cmd[cmd.index("--replay-mode") + 1] == "kernel" and cmd[-1] == "./prog"


def _source_page(rows: int) -> str:
    lines = ['"Kernel Name","argus_megakernel",',
             '"Address","Source","Instructions Executed","Thread Instructions Executed"']
    base = 0x7F0000000000
    for k in range(rows - 1):
        op = "BAR.SYNC.DEFER_BLOCKING 0x0" if k % 50 == 7 else "FFMA R1, R2, R3, R4"
        lines.append(f'"{hex(base + 16 * k)}","      {op}","{k % 7}","{32 * (k % 7)}"')
    lines.append(f'"{hex(base + 16 * (rows - 1))}","      EXIT","1","32"')
    return "\n".join(lines) + "\n"


def test_a_source_page_is_parsed_once_per_profile(monkeypatch):
    """Parsing the listing is the costly part (~0.1 s for 17k rows): once per profile, not once per PC."""
    calls = []
    real = ncu.function_from_rows

    def counting(name, rows):
        calls.append(len(rows))
        if len(calls) > 3:
            raise AssertionError(f"the listing was parsed {len(calls)} times for one profile")
        return real(name, rows)

    monkeypatch.setattr(ncu, "function_from_rows", counting)
    (prof,) = ncu.parse_source_csv(_source_page(3000))
    doc = prof.to_evidence()
    prof.function()
    assert calls == [3000]
    assert doc["opcodes"].count("BAR") == 60 and sum(doc["metrics"]["barrier_inst_executed"]) > 0


def test_a_megakernel_sized_source_page_parses_in_seconds():
    text = _source_page(20000)
    start = time.perf_counter()
    (prof,) = ncu.parse_source_csv(text)
    prof.to_evidence()
    assert time.perf_counter() - start < 30, "parsing 20,000 rows must be linear (it took > 30 s)"


STAND_IN = r'''#!{python}
"""Stand-in ncu: the source page of the marker-only cubin (counts: 1 per reachable PC); no GPU."""
import json, re, sys
from argus_rt import sass
from argus_rt.backends.pcmap import static_ownership
from argus_rt.kinds.run_variant import variant_cubin
from argus_rt.program import ProgramVersion
args = sys.argv[1:]
assert args[args.index("-k") + 1] == "regex:argus_megakernel" and args[args.index("-c") + 1] == "1", args
p = ProgramVersion.from_dict(json.load(open(args[args.index("--program") + 1])))
cubin = variant_cubin(p, args[args.index("--variant") + 1])
f = sass.select_function(sass.parse_sass(sass.disassemble(cubin)), p.launch["kernel"])
f = sass.with_indirect_targets(f, sass.indirect_branch_targets(cubin).get(f.name, {}))
reach = static_ownership(f).entry_of
base = 0x7F0000000000
print("==PROF== Connected to process 1 (stand-in)")
print("argus-run stand-in: a line of the profiled program", file=sys.stderr, flush=True)
print('"Kernel Name","%s",' % f.name)
print('"Address","Source","Instructions Executed","Thread Instructions Executed"')
for ins in f.instructions:
    text = ins.text
    if ins.targets:
        text = re.sub(r"0x[0-9a-f]+\s*$", hex(base + ins.targets[0]), text)
    c = 1 if ins.pc in reach else 0
    print('"%s","      %s","%d","%d"' % (hex(base + ins.pc), text, c, 32 * c))
'''


@needs_nvcc
def test_the_mapping_run_of_the_real_megakernel_takes_seconds_and_says_what_it_does(program, tmp_path, monkeypatch,
                                                                                   capfd):
    """The whole pcmap collection on the real marker-only cubin (17k SASS instructions, 14 subroutines,
    a jump table) with a stand-in ncu: everything Argus itself does besides the profiled run."""
    import torch

    from argus_rt.backends.base import CollectContext, get_backend

    script = tmp_path / "ncu"
    script.write_text(STAND_IN.replace("{python}", sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("ARGUS_NCU", str(script))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    out = tmp_path / "out"
    out.mkdir()
    ctx = CollectContext(task=None, program=program.variant_of("marker_only"), config={}, scope=None, sampling={},
                         inputs={}, outdir=out, device="")
    start = time.perf_counter()
    files = get_backend("pcmap").collect(ctx)
    wall = time.perf_counter() - start
    doc = PcRegionCounts.from_outputs(files.get).document()
    seconds = doc["provenance"]["seconds"]
    assert {"build", "disassemble", "ncu", "map"} <= set(seconds)
    assert_profiles_the_first_megakernel_launch_only(["ncu"] + doc["provenance"]["ncu_command"] + [sys.executable])
    err = capfd.readouterr().err
    for line in ("argus pcmap: tinyllama-megakernel: building the marker-only variant", "argus pcmap: build:",
                 "Nsight Compute on kernel argus_megakernel only, its first launch",
                 "argus-run stand-in: a line of the profiled program", "argus ncu: ncu finished",
                 "argus pcmap: mapping"):
        assert line in err, f"progress line {line!r} missing from:\n{err[-3000:]}"
    # here (2 shared cores): ~8 s besides the build (nvcc ~8-10 s); the quadratic parse did not end in 300 s
    assert wall - seconds["build"] < 120, seconds


# ---- phase times: the runner's phases, in its facts and in the mapping run's provenance.seconds ------
def test_runner_phases_are_said_and_kept(tmp_path, capfd):
    from argus_rt.kinds.cuda.run import runner_facts
    from argus_rt.kinds.cuda.runner import run_with_runner
    from test_megakernel_argus import _runner_program

    prog, launch = _runner_program(tmp_path, "import time\ndef run(ctx):\n    ctx.phase('weights', then='launch')\n"
                                             "    time.sleep(0.02)\n    ctx.phase('launch')\n"
                                             "    return {'max_rel_err': 0.0}\n")
    out, _ = run_with_runner(prog, "marker_only", launch, tmp_path / "k.cubin", "k", trace_config=None, check=True)
    assert list(out["phase_seconds"]) == ["weights", "launch"] and out["phase_seconds"]["launch"] >= 0.02
    assert out["phase_stamps"]["weights"] <= out["phase_stamps"]["launch"]
    facts = runner_facts(out)
    assert "phase_seconds" in facts and "phase_stamps" not in facts
    err = capfd.readouterr().err
    assert f"argus-run {prog.name}:marker_only: weights " in err and "; next: launch" in err


def test_the_profiled_run_is_split_by_the_runner_s_phases(tmp_path):
    from argus_rt.backends.pcmap import StepClock

    said = []
    clock = StepClock(say=said.append)
    t0 = clock._last
    stamps = tmp_path / "stamps.json"
    stamps.write_text(json.dumps({"main": t0 + 0.001, "run": t0 + 0.002, "ran": t0 + 0.010,
                                  "phases": {"weights": t0 + 0.004, "launch": t0 + 0.009}}))
    time.sleep(0.02)
    clock.profiled_run(stamps)
    s = clock.seconds
    assert s["runner_run.weights"] == pytest.approx(0.002, abs=1e-3)
    assert s["runner_run.launch"] == pytest.approx(0.005, abs=1e-3)
    assert any(line.startswith("profiled run:") and "runner_run.launch" in line for line in said)
