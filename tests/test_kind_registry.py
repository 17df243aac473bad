"""The kind registry (argus_rt.kinds.registry) is the one place program kinds are listed: a kind
registered through its public API (a test-only kind, defined here) is accepted by program loading,
recipes, planning, the plan-time compile check, the profiled runner, the mapping run's and the trace
adapter's dispatch, with nothing else edited."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from argus_rt.backends.base import BackendAdapter, get_backend, unregister_backend
from argus_rt.evidence import RegionIntervals
from argus_rt.kinds import registry
from argus_rt.kinds.registry import Kind, UnknownKindError, get_kind, kind_names, kinds_with, register_kind
from argus_rt.program import ProgramError, ProgramVersion, load_program
from argus_rt.regions import RegionTree

ROOT = Path(__file__).resolve().parents[1]
CALLS: list = []


def fake_check(program):
    CALLS.append(("check_compiles", program.name))
    if program.launch.get("broken"):
        raise ProgramError(f"{program.name}: does not compile (fake)")


def fake_cubin(program, variant):
    CALLS.append(("variant_cubin", variant))
    return Path("/nonexistent") / f"{program.name}.{variant}.cubin"


def fake_trace(program, outdir, config):
    CALLS.append(("trace", dict(config)))
    raw = Path(outdir) / "raw_trace.npz"
    raw.write_bytes(b"")
    return {"format": "argus.region_intervals/1", "columns": {"region_id": [], "start": [], "end": []}}, raw


class FakeNcu(BackendAdapter):
    name = "ncu"
    outputs = ("pc_counters",)

    def collect(self, ctx):
        return {}


FAKE = Kind("fakekind", traced=True, runner_variants=("marker_only",), run_once=f"{__name__}:fake_cubin",
            variant_cubin=f"{__name__}:fake_cubin", trace=f"{__name__}:fake_trace",
            check_compiles=f"{__name__}:fake_check", adapters={"ncu": f"{__name__}:FakeNcu"})


@pytest.fixture
def fake_kind():
    CALLS.clear()
    register_kind(FAKE)
    yield FAKE
    registry.unregister_kind(FAKE.name)
    unregister_backend("ncu", FAKE.name)


def _program_tree():
    tree = RegionTree("fake")
    tree.add("fake/a")
    return tree


def _program(**launch):
    tree = _program_tree()
    return ProgramVersion.from_sources("fake", {"k.src": "x"}, kind="fakekind", regions=tree,
                                       launch={"kernel": "k", **launch})


def _program_dir(tmp_path, kind):
    (tmp_path / "k.src").write_text("x")
    _program_tree().save(tmp_path / "regions.json")
    (tmp_path / "argus_program.json").write_text(json.dumps(
        {"name": "fake", "kind": kind, "sources": ["k.src"], "regions": "regions.json", "launch": {}}))
    return tmp_path


def test_the_builtin_kinds_are_the_registry_lines():
    assert kind_names()[:4] == ("cuda", "triton", "cupy", "numba")
    assert [m.rsplit(".", 2)[-2] for m in registry.KIND_MODULES] == ["cuda", "triton", "cupy", "numba", "proton"]
    assert kinds_with({"traced"}) == {"cuda", "triton", "cupy", "numba", "proton"}


def test_reading_the_registry_imports_no_compiler():
    code = ("import sys; from argus_rt.kinds.registry import kinds; ks = kinds(); "
            "print(len(ks), *(m in sys.modules for m in ('torch', 'triton', 'cupy', 'numba')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.split() == ["7", "False", "False", "False", "False"], out.stderr[-2000:]


def test_an_unknown_kind_is_one_line_listing_the_registered_ones(tmp_path):
    with pytest.raises(ProgramError, match=r"kind: 'fakekind' is not a program kind; valid: cuda, triton, cupy"):
        load_program(_program_dir(tmp_path, "fakekind"))
    with pytest.raises(ProgramError, match="unknown program kind 'fakekind'; valid: cuda, triton"):
        _program()
    with pytest.raises(UnknownKindError, match="unknown program kind 'fakekind'"):
        get_kind("fakekind")


def test_a_registered_kind_is_loaded_planned_and_checked(fake_kind, tmp_path):
    from argus_rt.commands.plan import check_compiles
    from argus_rt.query import make_plan
    from argus_rt.recipes import signals_for, unsupported_reason

    assert load_program(_program_dir(tmp_path, "fakekind")).kind == "fakekind"
    assert {"latency", "instruction_mix", "barrier_count"} <= set(signals_for("fakekind"))
    assert "needs a triton program" in unsupported_reason("iteration_waits", "fakekind")
    program = _program()
    plan = make_plan(program, "fake/a", ["latency", "instruction_mix"])
    collects = {(t.op, plan.programs[t.program]["variant"]) for t in plan.tasks.values() if t.kind == "collect"}
    assert collects == {("trace", "traced"), ("pcmap", "marker_only")}
    check_compiles(program)
    assert CALLS == [("check_compiles", "fake")]
    with pytest.raises(ProgramError, match="does not compile"):
        check_compiles(_program(broken=True))


def test_the_shared_paths_dispatch_through_the_registry(fake_kind, tmp_path):
    from argus_rt.backends import ncu
    from argus_rt.backends.base import CollectContext
    from argus_rt.kinds.run_variant import variant_cubin

    program = _program()
    assert variant_cubin(program, "marker_only").name == "fake.marker_only.cubin"
    ctx = CollectContext(task=None, program=program.variant_of("traced"), config={"capacity": 64}, scope=None,
                         sampling={}, inputs={}, outdir=tmp_path, device="")
    files = get_backend("trace", "fakekind").collect(ctx)
    published = RegionIntervals.from_outputs(files.get).outputs(files["region_intervals"].parent)
    assert set(files) == {"raw_trace", *published} and ("trace", {"capacity": 64}) in CALLS
    argv, _env = ncu.program_argv(ctx)  # the kind has a runner: python -m argus_rt.kinds.run_variant
    assert argv[1:4] == ["-m", "argus_rt.kinds.run_variant", "run"] and argv[argv.index("--variant") + 1] == "marker_only"
    assert type(get_backend("ncu", "fakekind")) is FakeNcu  # the kind's own adapter, named in the registry
    assert type(get_backend("ncu", "cuda")).__name__ == "NcuAdapter"


def test_no_kind_name_is_branched_on_outside_the_registry_and_the_kinds():
    """The dispatch code reads the registry: no kind name in a comparison, a handler's ``kind=``, a
    set of kinds or kind-keyed prerequisites in backends/, run_variant, the plan command, the recipes, the
    planner, the runtime or the async handlers (recipes name the kind capabilities they need), nor in program
    validation."""
    files = [*(ROOT / "argus_rt" / "backends").glob("*.py"), ROOT / "argus_rt" / "kinds" / "run_variant.py",
             ROOT / "argus_rt" / "commands" / "plan.py", ROOT / "argus_rt" / "recipes.py",
             ROOT / "argus_rt" / "planner.py", ROOT / "argus_rt" / "mcp_server.py", ROOT / "argus_rt" / "query.py",
             *(ROOT / "argus_rt" / "runtime").glob("*.py")]
    name = r"""["'](cuda|triton|cupy|numba|proton)["']"""
    pattern = re.compile(rf"(==|!=|\bin\b)\s*\(?{name}|kind={name}\)|(frozenset\(|prerequisites=)\{{\s*{name}")
    hits = [f"{f.name}:{n}" for f in files for n, line in enumerate(f.read_text().splitlines(), 1)
            if pattern.search(line) and not line.lstrip().startswith(("#", "``", "An adapter"))]
    assert hits == []
    program_py = (ROOT / "argus_rt" / "program.py").read_text()
    assert "PROGRAM_KINDS" not in program_py and '"cupy"' not in program_py


def fake_prebuild(variant):
    CALLS.append(("prebuild", variant.variant))


def fake_warm_up(installed=True):
    CALLS.append(("warm_up", installed))
    return installed


def fake_warm_up_missing():
    return fake_warm_up(installed=False)


def test_the_runtime_prebuilds_and_warms_up_through_the_kinds_hooks(tmp_path, monkeypatch):
    """The variant Transform calls the kind's ``prebuild`` hook where collections run (and only there);
    a device worker's warm-up calls every kind's ``warm_up`` hook and times those that warmed."""
    from types import SimpleNamespace

    from argus_rt.runtime import builtin, workers

    register_kind(Kind("fakewarm", traced=True, prebuild=f"{__name__}:fake_prebuild", warm_up=f"{__name__}:fake_warm_up"))
    register_kind(Kind("fakecold", warm_up=f"{__name__}:fake_warm_up_missing"))
    CALLS.clear()
    try:
        program = ProgramVersion.from_sources("fake", {"k.src": "x"}, kind="fakewarm", regions=_program_tree(),
                                              launch={"kernel": "k"})
        ctx = SimpleNamespace(config={"variant": "marker_only"}, program=program,
                              write_program=lambda pv: tmp_path / f"{pv.id}.json")
        monkeypatch.setenv(workers.WARM_WORKERS_ENV, "0")
        assert set(builtin.make_variant(ctx)) == {"program"} and CALLS == []
        monkeypatch.setenv(workers.WARM_WORKERS_ENV, "1")
        assert set(builtin.make_variant(ctx)) == {"program"} and CALLS == [("prebuild", "marker_only")]
        CALLS.clear()
        seconds = workers.warm_up()
    finally:
        registry.unregister_kind("fakewarm")
        registry.unregister_kind("fakecold")
    assert CALLS == [("warm_up", True), ("warm_up", False)]
    assert "fakewarm" in seconds and "fakecold" not in seconds and "torch" in seconds


def test_a_kinds_launch_schema_checks_its_programs_launch(tmp_path):
    """The program file's launch is checked against the schema node its kind names (the published
    schema branches on no kind name); a kind without one leaves its launch to itself."""
    from argus_rt.schema_check import load_schema, schema_at

    assert "allOf" not in load_schema("program")  # no per-kind-name if/then left in the file
    for kind in registry.kinds():
        if kind.launch_schema:
            assert "$ref" in schema_at(kind.launch_schema), kind.name
    assert {k.name for k in registry.kinds() if k.launch_schema} == {"cuda", "triton", "proton"}
    register_kind(Kind("fakelaunch", launch_schema="program#/$defs/cudaLaunch"))
    try:
        with pytest.raises(ProgramError, match=r"launch: missing required key\(s\) 'kernel'"):
            load_program(_program_dir(tmp_path, "fakelaunch"))
    finally:
        registry.unregister_kind("fakelaunch")
    (tmp_path / "plain").mkdir()
    assert load_program(_program_dir(tmp_path / "plain", "standin")).launch == {}
    with pytest.raises(KeyError, match="no 'nolaunch' in program.schema.json"):
        schema_at("program#/$defs/nolaunch")


COMPILER_VERSION = ["fakecc 1.0"]


def fake_compiler():
    return COMPILER_VERSION[0]


def test_the_kinds_compiler_hook_is_part_of_the_program_identity(tmp_path):
    """A loaded program's compiler comes from its kind's ``compiler`` hook, so upgrading that compiler
    makes a new program version (evidence of the old one is not reused); a kind without one says "none"."""
    register_kind(Kind("fakecc", traced=True, compiler=f"{__name__}:fake_compiler"))
    try:
        before = load_program(_program_dir(tmp_path, "fakecc"))
        COMPILER_VERSION[0] = "fakecc 2.0"
        after = load_program(tmp_path)
    finally:
        COMPILER_VERSION[0] = "fakecc 1.0"
        registry.unregister_kind("fakecc")
    assert (before.compiler, after.compiler) == ("fakecc 1.0", "fakecc 2.0")
    assert before.id != after.id
    (tmp_path / "plain").mkdir()
    assert load_program(_program_dir(tmp_path / "plain", "standin")).compiler == "none"


def test_every_compiling_builtin_kind_names_its_compiler():
    assert {k.name for k in registry.kinds() if k.compiler} == {"cuda", "triton", "cupy", "numba", "proton"}
