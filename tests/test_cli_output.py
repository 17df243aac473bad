"""The CLI in pipes and programs: one-line errors, content-width tables, `--json -`, file modes,
read-only workspace commands, option positions, `--version`, the report schema and `query --chrome`."""
from __future__ import annotations

import io
import json
import os
import stat
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version

import jsonschema
import pytest

from argus_rt.backends.base import get_backend, register_backend
from argus_rt.cli import main
from argus_rt.commands.output import rule
from argus_rt.console import PIPE_WIDTH, make_console
from argus_rt.evidence import RegionIntervals
from argus_rt.fsutil import atomic_write_text
from argus_rt.regions import RegionTree
from argus_rt.report import REPORT_SCHEMA, REPORT_VERSION, Report, ReportError, validate_report
from argus_rt.trace import TraceConfig, save_raw
from test_query import write_program_dir
from test_runtime_standins import StandinTrace, demo_program, standins  # noqa: F401
from tests.ring_writer import RingWriter

LONG_A = "example/stage_with_a_long_descriptive_name_that_overflows_eighty_columns_alpha"
LONG_B = "example/stage_with_a_long_descriptive_name_that_overflows_eighty_columns_beta"
RAW_STANDIN_ENV = "ARGUS_RAW_TRACE_STANDIN_WORKER"


# ---- a stand-in region tracer that also keeps the raw rings, like the real CUDA adapter ----------
class StandinRawTrace(StandinTrace):
    """StandinTrace plus ``raw_trace``: the same occurrences written as device rings (RingWriter)."""

    def collect(self, ctx):
        out = super().collect(ctx)
        occ = ctx.program.launch["standin"]["occurrences"]
        ctas = 1 + max(o[4] for o in occ)
        warps = 1 + max(o[5] for o in occ)
        cfg = TraceConfig(ctas=ctas, threads_per_cta=32 * warps, capacity=64, seq=7)
        writer = RingWriter(cfg)
        events = []
        for region, start, end, sm, cta, warp, it in occ:
            rid = ctx.program.regions[region].id
            events.append((cta, warp, start, 1, sm, "begin", rid, it))
            events.append((cta, warp, end, 0, sm, "end", rid, it))  # 0: an end sorts before a begin at equal time
        for cta, warp, time, _, sm, kind, rid, it in sorted(events):
            writer.emit(cta, warp, sm, kind, rid, time, it)
        out["raw_trace"] = save_raw(ctx.outdir / "raw_trace.npz", writer.raw, cfg, unbuffered=0)
        return out


if os.environ.get(RAW_STANDIN_ENV) == "1":  # a spawned worker: register here too
    register_backend(StandinRawTrace(), replace=True)


@contextmanager
def raw_trace_standin():
    previous = get_backend("trace")
    register_backend(StandinRawTrace(), replace=True)
    os.environ[RAW_STANDIN_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(RAW_STANDIN_ENV, None)
        register_backend(previous, replace=True)


def nested_occurrences() -> list:
    """Properly nested occurrences per warp: gemm > load on warp 0, mma on warp 4, epilogue after."""
    occ = []
    for it in range(4):
        for sm in (0, 1):
            base = 1000 * it + 10 * sm
            occ.append(["main/gemm", base, base + 500, sm, sm, 0, it])
            occ.append(["main/gemm/load", base + 20, base + 120, sm, sm, 0, it])
            occ.append(["main/gemm/mma", base + 100, base + 400, sm, sm, 4, it])
        occ.append(["main/epilogue", 4000 + 100 * it, 4050 + 100 * it, 0, 0, 0, it])
    return occ


@pytest.fixture
def program_dir(tmp_path):
    return write_program_dir(tmp_path / "prog", demo_program(occurrences=nested_occurrences()))


def run_cli(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def query_argv(prog, ws, *extra):
    return ["query", str(prog), "--region", "gemm", "--signals", "latency", "--workspace", str(ws),
            "--devices", "", "--no-progress", *extra]


# ---- 1. errors -------------------------------------------------------------------------------------
def test_input_errors_are_one_line_with_exit_2(program_dir, tmp_path, capsys):
    cases = [
        (["plan", str(program_dir), "--region", "nope"], "argus plan: ", "valid regions"),
        (["plan", str(program_dir), "--signals", "latncy"], "argus plan: ", "valid signals"),
        (["plan", str(program_dir), "--timeout", "compile=3"], "argus plan: ", "KIND one of"),
        (["query", str(program_dir), "--scope", "colour=red", "--workspace", str(tmp_path / "ws")],
         "argus query: ", "valid fields"),
        (["trace", str(tmp_path / "missing.npz")], "argus trace: ", "missing.npz"),
        (["workspace", "--workspace", str(tmp_path / "nowhere"), "tasks"], "argus workspace: ", "no workspace at"),
    ]
    for argv, prefix, needle in cases:
        rc, out, err = run_cli(capsys, argv)
        assert rc == 2, (argv, err)
        assert err.startswith(prefix) and needle in err and "Traceback" not in err, (argv, err)
        assert len(err.strip().splitlines()) == 1, err


def test_usage_errors_still_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan"])  # the program is missing
    assert exc.value.code == 2
    assert "required" in capsys.readouterr().err


def test_version_is_the_installed_one(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    try:
        expected = version("argus-rt")
    except PackageNotFoundError:
        import argus_rt

        expected = argus_rt.__version__
    assert capsys.readouterr().out.strip() == f"argus {expected}"


def test_help_names_the_cache_variables(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "ARGUS_CACHE_DIR" in text and "TRITON_CACHE_DIR" in text and "docs/caches.md" in text


# ---- 2. tables in pipes ----------------------------------------------------------------------------
def _long_name_trace(tmp_path):
    tree = RegionTree("example")
    tree.add(LONG_A)
    tree.add(LONG_B)
    tree.save(tmp_path / "long.json")
    cfg = TraceConfig(ctas=1, threads_per_cta=64, capacity=8, seq=3)
    w = RingWriter(cfg)
    w.emit(0, 0, 1, "begin", tree[LONG_A].id, 100)
    w.emit(0, 0, 1, "end", tree[LONG_A].id, 350)
    w.emit(0, 1, 1, "begin", tree[LONG_B].id, 100)
    w.emit(0, 1, 1, "end", tree[LONG_B].id, 900)
    return save_raw(tmp_path / "long.npz", w.raw, cfg, unbuffered=0), tmp_path / "long.json"


def test_piped_trace_table_keeps_long_region_names_whole(tmp_path, capsys):
    raw, manifest = _long_name_trace(tmp_path)
    rc, out, _ = run_cli(capsys, ["trace", str(raw), "--manifest", str(manifest)])
    assert rc == 0
    rows = {name: [line for line in out.splitlines() if name in line] for name in (LONG_A, LONG_B)}
    assert len(rows[LONG_A]) == 1 and len(rows[LONG_B]) == 1, out  # whole, each on one line
    assert "800" in rows[LONG_B][0]  # ... with its numbers on the same line (duration 800 ns)
    assert "…" not in out


def test_piped_report_table_does_not_fold(capsys):
    note = "a [note] long enough that a table on eighty columns would have to fold it into several lines"
    value = {"signal": "latency", "region": LONG_A, "metric": "mean", "value": 1.5, "unit": "ns",
             "qualification": "observed", "provenance": {"task": "s-1", "evidence": [], "method": "region trace"},
             "scope": {}, "ambiguity": None, "samples": 3, "notes": [note]}
    rep = Report(query={"program": "pv-1", "program_name": "demo", "region": None, "signals": ["latency"],
                        "scope": {}}, values=[value])
    buf = io.StringIO()
    rep.print(make_console(buf))
    lines = [line for line in buf.getvalue().splitlines() if LONG_A in line]
    assert len(lines) == 1 and note in lines[0]  # whole, and its brackets are not read as markup


def test_consoles_size_to_terminal_or_content():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert make_console(io.StringIO()).width == PIPE_WIDTH
    assert make_console(Tty()).width < PIPE_WIDTH
    buf = io.StringIO()
    rule(make_console(buf), "Argus demo")
    assert "Argus demo" in buf.getvalue() and len(buf.getvalue()) < 200  # a rule is not PIPE_WIDTH wide


# ---- 3. --json FILE and --json - ------------------------------------------------------------------
def test_json_to_stdout_carries_only_json(standins, program_dir, tmp_path, capsys):
    ws = tmp_path / "ws"
    raw, manifest = _long_name_trace(tmp_path)

    rc, out, err = run_cli(capsys, ["trace", str(raw), "--manifest", str(manifest), "--json", "-"])
    doc = json.loads(out)
    assert rc == 0 and doc["format"] == "argus.trace_stats/1" and LONG_A in err
    assert {r["name"] for r in doc["regions"]} == {LONG_A, LONG_B}

    rc, out, err = run_cli(capsys, ["plan", str(program_dir), "--region", "gemm", "--json", "-"])
    assert rc == 0 and json.loads(out)["argus_plan_version"] == 1 and "collection runs" in err

    rc, out, err = run_cli(capsys, query_argv(program_dir, ws, "--json", "-"))
    assert rc == 0, err
    assert json.loads(out)["argus_report_version"] == REPORT_VERSION and "main/gemm" in err

    for action, check in (("stats", lambda d: d["tasks_done"] == 3), ("programs", lambda d: {p["name"] for p in d} == {"demo"}),
                          ("tasks", lambda d: {t["status"] for t in d} == {"done"}),
                          ("verify", lambda d: d["consistent"] is True), ("branches", lambda d: d == {})):
        rc, out, _ = run_cli(capsys, ["workspace", "--workspace", str(ws), action, "--json", "-"])
        assert rc == 0 and check(json.loads(out)), (action, out)


def test_json_to_a_file_keeps_the_text_view(standins, program_dir, tmp_path, capsys):
    target = tmp_path / "plan.json"
    rc, out, _ = run_cli(capsys, ["plan", str(program_dir), "--json", str(target)])
    assert rc == 0 and "collection runs" in out and json.loads(target.read_text())["argus_plan_version"] == 1
    assert not (tmp_path / "-").exists() and not os.path.exists("-")


def test_two_outputs_on_stdout_are_refused(program_dir, tmp_path, capsys):
    rc, _, err = run_cli(capsys, ["plan", str(program_dir), "--json", "-", "-o", "-"])
    assert rc == 2 and "only one output can go to stdout" in err


def test_discover_json_to_stdout(capsys):
    pytest.importorskip("triton")
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "triton"
    rc, out, err = run_cli(capsys, ["discover", str(example), "--region", "tma_matmul/kloop", "--json", "-"])
    assert rc == 0 and json.loads(out)["sites"] and "probe candidates" in err


# ---- 9. discover --iterations ----------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "-3"])
def test_discover_refuses_iterations_below_one(tmp_path, capsys, value):
    ttgir = tmp_path / "k.ttgir"
    ttgir.write_text("module {}\n")
    for kernel in (str(ttgir), str(tmp_path)):
        rc, _, err = run_cli(capsys, ["discover", kernel, "--iterations", value])
        assert rc == 2 and err == f"argus discover: --iterations must be >= 1 (logical K-loop iterations), got {value}\n"


# ---- 6. modes of written files ---------------------------------------------------------------------
@contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_written_files_are_0644_under_umask_022_and_follow_the_umask(standins, program_dir, tmp_path, capsys):
    with umask(0o022):
        atomic_write_text(tmp_path / "a.txt", "x")
        assert _mode(tmp_path / "a.txt") == 0o644
        report, chrome, plan = tmp_path / "r.json", tmp_path / "c.json", tmp_path / "p.txt"
        assert main(query_argv(program_dir, tmp_path / "ws", "--json", str(report), "--chrome", str(chrome))) == 0
        assert main(["plan", str(program_dir), "-o", str(plan)]) == 0
        assert [_mode(p) for p in (report, chrome, plan)] == [0o644] * 3
    with umask(0o077):
        atomic_write_text(tmp_path / "b.txt", "x")
        assert _mode(tmp_path / "b.txt") == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


# ---- 7. read-only commands never create a workspace ------------------------------------------------
def test_workspace_commands_never_create_a_workspace(program_dir, tmp_path, capsys):
    typo = tmp_path / "TYPO"
    for argv in (["workspace", "--workspace", str(typo), "stats"], ["workspace", "--workspace", str(typo)],
                 ["workspace", "--workspace", str(typo), "verify"], ["workspace", "--workspace", str(typo), "clean"],
                 ["plan", str(program_dir), "--workspace", str(typo)]):
        rc, _, err = run_cli(capsys, argv)
        assert rc == 2 and f"no workspace at {typo}" in err, (argv, err)
        assert not typo.exists(), argv


# ---- 8. option positions ---------------------------------------------------------------------------
def test_workspace_option_anywhere(standins, program_dir, tmp_path, capsys):
    ws = tmp_path / "ws"
    rc, _, err = run_cli(capsys, ["--workspace", str(ws), *query_argv(program_dir, ws)[:-5], "--devices", "",
                                  "--no-progress"])  # the global --workspace only
    assert rc == 0 and (ws / "index.sqlite").is_file(), err
    expected = None
    for argv in (["--workspace", str(ws), "workspace", "stats", "--json", "-"],
                 ["workspace", "--workspace", str(ws), "stats", "--json", "-"],
                 ["workspace", "stats", "--workspace", str(ws), "--json", "-"],
                 ["workspace", "--json", "-", "stats", "--workspace", str(ws)],
                 ["--workspace", str(tmp_path / "elsewhere"), "workspace", "stats", "--workspace", str(ws),
                  "--json", "-"]):  # the innermost one wins
        rc, out, err = run_cli(capsys, argv)
        assert rc == 0, (argv, err)
        expected = expected or json.loads(out)
        assert json.loads(out) == expected and expected["tasks_done"] == 3


def test_scope_and_timeout_take_one_item_per_flag(standins, program_dir, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc, _, err = run_cli(capsys, ["query", "--scope", "sms=0", "--scope", "iterations=0:2", "--timeout", "collect=60",
                                  str(program_dir), "--region", "gemm", "--signals", "latency",
                                  "--workspace", str(tmp_path / "ws"), "--devices", "", "--json", str(out)])
    assert rc == 0, err
    data = json.loads(out.read_text())
    assert data["query"]["scope"] == {"sms": [0], "iterations": [0, 2]}
    assert {v["value"] for v in data["values"] if v["metric"] == "count"} == {2.0}  # SM 0, iterations 0 and 1
    with pytest.raises(SystemExit):  # two items after one flag: the second is not a scope item any more
        main(["plan", str(program_dir), "--scope", "sms=0", "iterations=0:2"])
    assert "unrecognized arguments: iterations=0:2" in capsys.readouterr().err


# ---- 5. the report schema --------------------------------------------------------------------------
def test_report_validates_against_the_published_schema(standins, program_dir, tmp_path, capsys):
    jsonschema.Draft202012Validator.check_schema(REPORT_SCHEMA)
    assert REPORT_SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert REPORT_SCHEMA["properties"]["argus_report_version"] == {"const": REPORT_VERSION}
    out = tmp_path / "r.json"
    assert main(query_argv(program_dir, tmp_path / "ws", "--json", str(out))) == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, REPORT_SCHEMA, cls=jsonschema.Draft202012Validator)
    validate_report(doc)
    broken = [
        {**doc, "argus_report_version": REPORT_VERSION + 1},
        {k: v for k, v in doc.items() if k != "unanswered"},
        {**doc, "values": [{**doc["values"][0], "qualification": "guessed"}]},
        {**doc, "values": [{**doc["values"][0], "value": "fast"}]},
        {**doc, "surprise": 1},
    ]
    for bad in broken:
        with pytest.raises(ReportError, match="does not match urn:argus:schema:report:1"):
            validate_report(bad)


# ---- 4. query --chrome -----------------------------------------------------------------------------
def _chrome_events(path):
    doc = json.loads(path.read_text())
    return doc, [e for e in doc["traceEvents"] if e["ph"] == "X"]


def test_query_chrome_decodes_the_kept_raw_trace(standins, program_dir, tmp_path, capsys):
    chrome = tmp_path / "c.json"
    with raw_trace_standin():
        rc, out, err = run_cli(capsys, query_argv(program_dir, tmp_path / "ws", "--chrome", str(chrome)))
    assert rc == 0, err
    doc, events = _chrome_events(chrome)
    assert doc["otherData"]["source"] == "raw_trace"
    assert {e["name"] for e in events} == {"main/gemm", "main/gemm/load", "main/gemm/mma"}  # the gemm subtree
    assert len(events) == 24 and doc["otherData"]["occurrences"] == 24
    load = [e for e in events if e["name"] == "main/gemm/load"]
    assert {e["args"]["depth"] for e in load} == {1}  # nested in gemm: only a decoded trace knows that
    assert {e["dur"] for e in load} == {0.1}  # 100 ns
    assert "Chrome/Perfetto trace" in out and "24 region occurrences" in out


def test_query_chrome_is_a_valid_nested_timeline_with_the_region_s_attributed_metrics(standins, program_dir,
                                                                                      tmp_path, capsys):
    """The file validates against the trace-event schema Argus writes, every track's slices nest, and
    each slice carries its region's attributed values from the same query."""
    from argus_rt.schema_check import validator
    from argus_rt.trace.chrome import nesting_problems

    chrome, report = tmp_path / "c.json", tmp_path / "r.json"
    argv = ["query", str(program_dir), "--region", "gemm", "--signals", "latency,instruction_mix,barrier_count",
            "--workspace", str(tmp_path / "ws"), "--devices", "", "--no-progress", "--chrome", str(chrome),
            "--json", str(report)]
    with raw_trace_standin():
        rc, _, err = run_cli(capsys, argv)
    assert rc == 0, err
    doc, events = _chrome_events(chrome)
    assert [e.message for e in validator("chrome_trace").iter_errors(doc)] == []
    assert nesting_problems(doc) == []
    values = json.loads(report.read_text())["values"]
    mma_ffma = next(v["value"] for v in values if v["signal"] == "instruction_mix" and v["region"] == "main/gemm/mma"
                    and v["metric"] == "FFMA")
    mma = [e for e in events if e["name"] == "main/gemm/mma"]
    assert mma and all(e["args"]["metrics"]["instruction_mix:FFMA"] == mma_ffma for e in mma)
    sorted_threads = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["name"] == "thread_sort_index"}
    assert sorted_threads == {(e["pid"], e["tid"]) for e in events}


def test_slices_show_named_coordinates():
    """A packed coordinate shows as its fields (layer, step), a loop coordinate as the iteration."""
    import numpy as np

    from argus_rt.commands.query_chrome import scope_columns, slice_coordinates
    from argus_rt.trace import INTERVAL_DTYPE, Intervals, chrome_trace

    rows = np.zeros(2, dtype=INTERVAL_DTYPE)
    rows["coord"] = [(7 << 8) | 3, (9 << 8) | 21]
    rows["start"], rows["end"], rows["duration"] = [0, 50], [40, 90], [40, 40]
    packed = {"coord_kind": "packed", "coord_fields": {"step": [8, 8], "layer": [0, 8]}}
    args = [e["args"] for e in chrome_trace(Intervals(rows, "ns"), coordinates=slice_coordinates(
        scope_columns(rows, packed), packed))["traceEvents"] if e["ph"] == "X"]
    assert [(a["step"], a["layer"]) for a in args] == [(7, 3), (9, 21)] and "coord" not in args[0]
    loop = {"coord_kind": "iteration"}
    args = [e["args"] for e in chrome_trace(Intervals(rows, "ns"), coordinates=slice_coordinates(
        scope_columns(rows, loop), loop))["traceEvents"] if e["ph"] == "X"]
    assert [a["iteration"] for a in args] == [(7 << 8) | 3, (9 << 8) | 21]


def test_nesting_problems_names_slices_that_cross():
    from argus_rt.trace.chrome import nesting_problems

    def x(name, ts, dur, tid=0):
        return {"ph": "X", "name": name, "pid": 0, "tid": tid, "ts": ts, "dur": dur, "args": {}}

    good = {"traceEvents": [x("a", 0, 10), x("a/b", 2, 3), x("a/c", 5, 5), x("d", 10, 1), x("a", 1, 20, tid=1)]}
    assert nesting_problems(good) == []
    bad = {"traceEvents": [x("a", 0, 10), x("a/b", 8, 5)]}
    assert nesting_problems(bad) == ["track (0, 0): 'a/b' [8, 13] crosses the end of 'a' at 10"]


def test_query_chrome_applies_the_scope_and_reads_intervals_without_raw_rings(standins, program_dir, tmp_path,
                                                                               capsys):
    chrome = tmp_path / "c.json"
    rc, _, err = run_cli(capsys, query_argv(program_dir, tmp_path / "ws", "--scope", "sms=0", "--chrome", str(chrome)))
    assert rc == 0, err
    doc, events = _chrome_events(chrome)
    assert doc["otherData"]["source"] == "region_intervals"  # the plain stand-in keeps no raw rings
    assert {e["pid"] for e in events} == {0} and len(events) == 12


def test_query_chrome_scope_reads_the_fields_of_a_packed_coordinate():
    """A step/layer scope over a packed coordinate selects in --chrome as the latency rule does."""
    import numpy as np

    from argus_rt.commands.query_chrome import scope_columns
    from argus_rt.scope import Scope
    from argus_rt.synthesis import scope_mask
    from argus_rt.trace import INTERVAL_DTYPE

    rows = np.zeros(4, dtype=INTERVAL_DTYPE)
    rows["coord"] = [(step << 8) | layer for step, layer in ((0, 1), (3, 1), (3, 2), (5, 1))]
    doc = {"coord_kind": "packed", "coord_fields": {"step": [8, 8], "layer": [0, 8]}}
    arrays = scope_columns(rows, doc)
    assert list(arrays["step"]) == [0, 3, 3, 5] and list(arrays["layer"]) == [1, 1, 2, 1]
    assert list(scope_mask(arrays, doc, Scope(step=3, layer=1), "--chrome")) == [False, True, False, False]


def test_query_chrome_to_stdout_and_without_latency(standins, program_dir, tmp_path, capsys):
    rc, out, err = run_cli(capsys, query_argv(program_dir, tmp_path / "ws", "--chrome", "-"))
    assert rc == 0 and json.loads(out)["traceEvents"] and "main/gemm" in err
    argv = ["query", str(program_dir), "--signals", "instruction_mix", "--chrome", str(tmp_path / "c.json"),
            "--workspace", str(tmp_path / "ws2")]
    rc, _, err = run_cli(capsys, argv)
    assert rc == 2 and "add latency to --signals" in err
    assert not (tmp_path / "ws2").exists()  # refused before anything ran


def test_query_chrome_with_latency_unanswered_writes_nothing(standins, tmp_path, capsys):
    prog = write_program_dir(tmp_path / "prog", demo_program(occurrences=nested_occurrences(), fail="no GPU here",
                                                             only="trace"))
    chrome = tmp_path / "c.json"
    rc, out, _ = run_cli(capsys, query_argv(prog, tmp_path / "ws", "--chrome", str(chrome)))
    assert rc == 1 and not chrome.exists()  # 1: a signal is unanswered
    assert "no Chrome/Perfetto trace written: latency is unanswered" in out and "no GPU here" in out


def test_cuda_trace_adapter_keeps_the_raw_rings(tmp_path, monkeypatch):
    """The real adapter's wiring (no GPU): run_once is given a raw_trace path and the adapter publishes it."""
    from argus_rt.backends import trace as trace_backend
    from argus_rt.backends.base import CollectContext
    from argus_rt.program import load_program
    from argus_rt.resources import example
    from argus_rt.trace import load_raw, pair_intervals

    program = load_program(example("cuda"))
    region = next(iter(program.regions))
    cfg = TraceConfig(ctas=1, threads_per_cta=32, capacity=8, seq=5)
    writer = RingWriter(cfg)
    writer.emit(0, 0, 0, "begin", region.id, 10)
    writer.emit(0, 0, 0, "end", region.id, 70)

    def fake_run_once(prog, variant, *, trace_config=None, check=True, raw_trace=None):
        assert variant == "traced" and raw_trace is not None
        save_raw(raw_trace, writer.raw, cfg, unbuffered=0)  # what TraceSession.save writes on a GPU
        trace = load_raw(raw_trace)
        return {"cubin": "x.cubin", "symbol": "k", "max_rel_err": 0.0, "trace": trace,
                "intervals": pair_intervals(trace)}

    monkeypatch.setattr("argus_rt.kinds.cuda.run.run_once", fake_run_once)  # the CUDA kind's trace hook runs it
    ctx = CollectContext(task=None, program=program, config={}, scope=None, sampling={}, inputs={},
                         outdir=tmp_path, device="")
    files = trace_backend.TraceAdapter().collect(ctx)
    published = RegionIntervals.from_outputs(files.get).outputs(files["region_intervals"].parent)
    assert set(files) == {"raw_trace", *published}  # the typed evidence's files and the raw rings
    rows = pair_intervals(load_raw(files["raw_trace"])).rows
    assert [(int(r["region_id"]), int(r["duration"])) for r in rows] == [(region.id, 60)]
