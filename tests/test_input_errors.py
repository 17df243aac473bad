"""Bad input gets one line naming the bad value and what is valid, never a traceback (CPU only).

Each case is checked twice: the library raises an ArgusInputError subclass with the right message,
and the command line (``python -m argus_rt.cli ...``, or the overlap entry points) exits 2 with one
line on stderr.
"""
from __future__ import annotations

import io
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from argus_rt.errors import ArgusInputError
from argus_rt.kinds.registry import kind_names
from argus_rt.planner import UnsupportedSignalError, plan_query
from argus_rt.program import ProgramError, ProgramVersion, load_program
from argus_rt.regions import RegionTree
from argus_rt.schema_check import load_schema
from argus_rt.scope import Scope, ScopeError
from argus_rt.trace import TraceConfig, TraceError, layout, load_raw, save_raw
from argus_rt.workspace import Workspace, WorkspaceError
from argus_rt.workspace_check import verify
from tests.ring_writer import RingWriter

ROOT = Path(__file__).resolve().parents[1]
GT = ROOT / "examples" / "ground_truth"


def run_cli(*args, module: str = "argus_rt.cli", script: Path | None = None, env: dict | None = None):
    argv = [sys.executable, str(script)] if script else [sys.executable, "-m", module]
    full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                  "MASTER_ADDR", "MASTER_PORT", "ARGUS_WORKSPACE")}
    full_env.update(env or {})
    return subprocess.run(argv + [str(a) for a in args], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=full_env)


def assert_one_line(proc, *fragments: str) -> str:
    """Exit status 2, exactly one stderr line, no traceback, and each fragment in that line."""
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# ---- 1. raw trace files -----------------------------------------------------------------------
def _good_trace(path: Path) -> Path:
    cfg = TraceConfig(ctas=1, threads_per_cta=64, capacity=8, seq=5)
    writer = RingWriter(cfg)
    writer.emit(0, 0, 1, "begin", 0x1234, 100)
    writer.emit(0, 0, 1, "end", 0x1234, 180)
    return save_raw(path, writer.raw, cfg, unbuffered=0)


def _npz(path: Path, **arrays) -> Path:
    bio = io.BytesIO()
    np.savez(bio, **arrays)
    path.write_bytes(bio.getvalue())
    return path


def _bad_traces(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = _good_trace(tmp_path / "good.npz").read_bytes()
    meta = {"layout_version": layout.LAYOUT_VERSION, "unbuffered": 0}
    cases = {
        "empty": (b"", "is not an .npz archive"),
        "random": (random.Random(7).randbytes(700), "is not an .npz archive"),
        "truncated": (good[: len(good) // 2], "is not an .npz archive"),
    }
    out = {}
    for name, (data, message) in cases.items():
        (tmp_path / f"{name}.npz").write_bytes(data)
        out[name] = (tmp_path / f"{name}.npz", message)
    out["no_config"] = (_npz(tmp_path / "no_config.npz", buffer=np.zeros(160, np.uint8),
                             meta=np.array(json.dumps(meta))), "meta has no 'config'")
    out["missing"] = (tmp_path / "nope.npz", "no such file")
    return out


def test_bad_trace_files_raise_trace_errors_naming_the_file(tmp_path):
    for name, (path, message) in _bad_traces(tmp_path).items():
        with pytest.raises(TraceError, match=message) as info:
            load_raw(path)
        assert isinstance(info.value, ArgusInputError) and str(path) in str(info.value), name
        assert "allow_pickle" not in str(info.value)


def test_byte_flipped_trace_files_raise_only_trace_errors(tmp_path):
    good = _good_trace(tmp_path / "good.npz").read_bytes()
    rng = random.Random(11)
    path = tmp_path / "flipped.npz"
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.choice((1, 3, 20))):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))
        try:
            load_raw(path)
        except TraceError as exc:
            assert str(path) in str(exc)


def test_argus_trace_cli_one_line_for_bad_files(tmp_path):
    for name, (path, message) in _bad_traces(tmp_path).items():
        assert_one_line(run_cli("trace", path), "argus trace:", str(path), message)


# ---- 2. program files that name missing files -------------------------------------------------
def _program_copy(tmp_path: Path, edit=None, src: Path = GT) -> Path:
    root = tmp_path / src.name
    shutil.copytree(src, root)
    spec_path = root / "argus_program.json"
    if edit is not None:
        spec = json.loads(spec_path.read_text())
        spec = edit(spec)
        spec_path.write_text(json.dumps(spec))
    return root


@pytest.mark.parametrize("missing, field", [("gt_helper.cuh", "sources[1]"), ("regions.json", "regions")])
def test_missing_source_or_manifest(tmp_path, missing, field):
    root = _program_copy(tmp_path)
    (root / missing).unlink()
    with pytest.raises(ProgramError) as info:
        load_program(root)
    assert isinstance(info.value, ArgusInputError) and f"{field}: '{missing}' does not exist" in str(info.value)
    assert_one_line(run_cli("plan", root), "argus plan:", field, repr(missing), "does not exist")


# ---- 3. workspaces ------------------------------------------------------------------------------
def _workspace(root: Path) -> Path:
    with Workspace(root) as ws:
        for i in range(8):
            ws.put_program(ProgramVersion.from_sources(f"p{i}", {"k.cu": f"// {i}" * 40}, kind="standin"))
    return root


def _read_everything(ws: Workspace) -> None:
    ws.stats()
    verify(ws)
    ws.tasks()
    ws.branches()
    for p in ws.programs():
        ws.get_program(p["id"])


def test_random_bytes_index_and_file_path_raise_workspace_errors(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "index.sqlite").write_bytes(random.Random(3).randbytes(4096))
    for opener in (Workspace, Workspace.open_existing):
        with pytest.raises(WorkspaceError, match="cannot read workspace index .*index.sqlite") as info:
            opener(root)
        assert isinstance(info.value, ArgusInputError)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a workspace")
    with pytest.raises(WorkspaceError, match=f"workspace path {a_file} is a file, not a directory"):
        Workspace(a_file)


def test_byte_flipped_index_raises_only_workspace_errors(tmp_path):
    root = _workspace(tmp_path / "ws")
    good = (root / "index.sqlite").read_bytes()
    rng = random.Random(5)
    failures = 0
    for i in range(200):
        data = bytearray(good)
        for _ in range(rng.choice((1, 5, 50))):
            data[rng.randrange(len(data))] = rng.randrange(256)
        (root / "index.sqlite").write_bytes(bytes(data))
        try:
            with (Workspace(root) if i % 2 else Workspace.open_existing(root)) as ws:
                _read_everything(ws)
        except WorkspaceError as exc:
            failures += 1
            assert str(root) in str(exc)
    assert failures  # the flips did damage something


def test_open_existing_never_creates(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(WorkspaceError, match=f"no workspace at {missing}"):
        Workspace.open_existing(missing)
    assert not missing.exists()
    with pytest.raises(WorkspaceError, match="not an Argus workspace index"):
        missing.mkdir()
        sqlite3.connect(missing / "index.sqlite").execute("CREATE TABLE other (x)").connection.close()
        Workspace.open_existing(missing)
    root = _workspace(tmp_path / "ws")
    with Workspace.open_existing(root) as ws:
        assert ws.stats()["programs"] == 8


@pytest.mark.parametrize("action", ["stats", "programs", "tasks", "branches", "verify"])
def test_workspace_cli_bad_workspaces(tmp_path, action):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "index.sqlite").write_bytes(random.Random(4).randbytes(2048))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    missing = tmp_path / "missing"
    assert_one_line(run_cli("--workspace", corrupt, "workspace", action), "argus workspace:", str(corrupt))
    assert_one_line(run_cli("--workspace", a_file, "workspace", action), "argus workspace:", str(a_file))
    assert_one_line(run_cli("--workspace", missing, "workspace", action), "argus workspace:", "no workspace at")
    assert not missing.exists()


# ---- 4. overlap entry points without torchrun / GPU -----------------------------------------
_TORCHRUN_ENV = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "29531"}


def _no_gpu():
    import torch

    return not torch.cuda.is_available()


@pytest.mark.parametrize("entry", ["tune", "bench"])
def test_overlap_entry_points_refuse_in_one_line(entry):
    def run(env=None, extra=()):
        if entry == "tune":
            return run_cli("--shape", "64,32,32", *extra, module="overlap.tune", env=env)
        return run_cli(*extra, script=ROOT / "benchmarks" / "overlap.py", env=env)

    assert_one_line(run(), "must be started by torchrun", "torchrun --nproc_per_node")
    if _no_gpu():
        assert_one_line(run(env=_TORCHRUN_ENV), "needs one CUDA GPU per rank")
    if entry == "tune":
        assert_one_line(run_cli("--shape", "64,32", module="overlap.tune"), "--shape must be M,K,N")
    else:
        assert_one_line(run(extra=("--case", "1,2")), "--case '1,2' is not M_shard,K,N")


# ---- 5. argus_program.json against its JSON Schema ------------------------------------------
def _launch(key, value):
    def edit(spec):
        spec["launch"][key] = value
        return spec
    return edit


def _drop(key):
    def edit(spec):
        del spec[key]
        return spec
    return edit


SCHEMA_CASES = [
    (lambda s: {**s, "flags": "-O3"}, "flags: '-O3' is not an array of compiler flag strings"),
    (_launch("grid", "big"), "launch.grid: 'big' is not an array of 1-3 positive integers"),
    (_launch("block", [0]), "launch.block[0]: 0 is not a positive integer"),
    (lambda s: [1, 2], "[1, 2] is not a JSON object with keys name, kind"),
    (_drop("launch"), "missing required key(s) 'launch'"),
    (_drop("kind"), "missing required key(s) 'kind' (a program kind name"),
    (lambda s: {**s, "kind": "cpp"}, f"kind: 'cpp' is not a program kind; valid: {', '.join(kind_names())}"),
    (lambda s: {**s, "colour": "red"}, "unknown key(s) 'colour'; valid keys: name, kind"),
    (_launch("gird", [1]), "launch: unknown key(s) 'gird'; valid keys: source, kernel, grid"),
    (_launch("args", [{"tensor": "float8", "shape": [4]}]), "launch.args[0].tensor: 'float8' is not a tensor dtype"),
    (_launch("args", [{"int32": 2**40}]), "launch.args[0].int32: 1099511627776 is not an int32 value"),
    (lambda s: {**s, "sources": ["../outside.cu"]}, "sources[0]: '../outside.cu' is not a path relative"),
    (lambda s: {**s, "warp_roles": {"producer": [40]}}, "warp_roles.producer[0]: 40 is not a warp index"),
]


@pytest.mark.parametrize("edit, message", SCHEMA_CASES)
def test_program_schema_errors_name_the_field(tmp_path, edit, message):
    root = _program_copy(tmp_path, edit)
    with pytest.raises(ProgramError) as info:
        load_program(root)
    text = str(info.value)
    assert isinstance(info.value, ArgusInputError) and message in text, text
    assert text.startswith(str(root / "argus_program.json") + ": ") and "\n" not in text


def test_program_schema_errors_on_the_cli(tmp_path):
    for i, (edit, message) in enumerate(SCHEMA_CASES[:5]):
        root = _program_copy(tmp_path / str(i), edit)
        assert_one_line(run_cli("plan", root), "argus plan:", "argus_program.json", message)


def test_triton_launch_is_checked_too(tmp_path):
    root = _program_copy(tmp_path, _launch("num_warps", 3), src=ROOT / "examples" / "triton")
    with pytest.raises(ProgramError, match="launch.num_warps: 3 is not a warp count: 1, 2, 4, 8, 16 or 32"):
        load_program(root)


def test_schema_accepts_every_example_and_a_standin():
    examples = sorted(p.parent for p in (ROOT / "examples").glob("*/argus_program.json"))
    assert {"ground_truth", "triton"} <= {p.name for p in examples}
    kinds = {load_program(p).kind for p in examples}
    assert {"cuda", "triton"} <= kinds


def test_standin_program_file_loads(tmp_path):
    tree = RegionTree("demo")
    tree.add("main/gemm")
    (tmp_path / "demo.cu").write_text("// synthetic")
    (tmp_path / "regions.json").write_text(json.dumps(tree.to_manifest()))
    (tmp_path / "argus_program.json").write_text(json.dumps({
        "name": "demo", "kind": "standin", "sources": ["demo.cu"], "compiler": "none",
        "regions": "regions.json", "launch": {"standin": {"anything": 1}},
        "warp_roles": {"producer": [0], "consumer": [1, 2, 3]}}))
    pv = load_program(tmp_path)
    assert pv.warp_roles == {"consumer": [1, 2, 3], "producer": [0]}
    assert ProgramVersion.from_dict(pv.to_dict()).id == pv.id


def test_schema_is_valid_and_matches_the_backend_constants():
    from jsonschema import Draft202012Validator

    from argus_rt.kinds.cuda import run as cuda_run

    schema = load_schema("program")
    Draft202012Validator.check_schema(schema)
    assert "enum" not in schema["properties"]["kind"]  # the kinds are the registry's (load_program checks)
    defs = schema["$defs"]
    assert list(defs["cudaLaunch"]["properties"]) == list(cuda_run.LAUNCH_KEYS)
    assert defs["tensorArg"]["properties"]["tensor"]["enum"] == list(cuda_run.TENSOR_DTYPES)
    assert defs["tensorArg"]["properties"]["init"]["enum"] == list(cuda_run.INITS)
    assert list(defs["scalarArg"]["properties"]) == list(cuda_run.SCALAR_TYPES)
    assert defs["cudaLaunch"]["properties"]["coord_kind"]["enum"] == list(cuda_run.COORD_KINDS)


# ---- 6. scope values ------------------------------------------------------------------------
@pytest.mark.parametrize("items, message", [
    (["layer=1", "layer=2"], "scope field 'layer' given twice ('layer=1' and 'layer=2')"),
    (["layer=12345678901234567890"], "scope field 'layer' needs an int in 0 <= x < 2**31"),
    (["step=-1"], "scope field 'step' needs an int in 0 <= x < 2**31, got -1"),
    (["sms=0-2147483647"], "lists more than 1048576 indices"),
    (["sms=7-2"], "range '7-2' is empty"),
    (["iterations=2"], "give a half-open window start:stop"),
])
def test_scope_values_are_checked(items, message):
    with pytest.raises(ScopeError) as info:
        Scope.parse(items)
    assert isinstance(info.value, ArgusInputError) and message in str(info.value)
    assert_one_line(run_cli("plan", GT, *[w for item in items for w in ("--scope", item)]), "argus plan:", message)


def test_scope_bounds_in_the_constructor():
    assert Scope(layer=2**31 - 1).layer == 2**31 - 1
    assert Scope(iterations=(0, 2**31)).iterations == (0, 2**31)
    with pytest.raises(ScopeError, match=r"0 <= x < 2\*\*31"):
        Scope(layer=2**31)


def test_warp_role_must_be_declared_by_the_program():
    undeclared = load_program(GT)
    with pytest.raises(ScopeError, match="declares no warp roles, so no warp_role is valid"):
        plan_query(undeclared, None, ["latency"], Scope(warp_role="producer"))
    assert_one_line(run_cli("plan", GT, "--scope", "warp_role=producer"), "argus plan:", "declares no warp roles")
    declared = ProgramVersion.from_sources("roles", {"k.cu": "//"}, kind="standin", regions=undeclared.regions,
                                           warp_roles={"producer": [0], "consumer": [1, 2]})
    with pytest.raises(ScopeError, match="'dma' is not a role program 'roles' declares; valid roles: consumer, producer"):
        plan_query(declared, None, ["latency"], Scope(warp_role="dma"))
    assert plan_query(declared, None, ["latency"], Scope(warp_role="producer")).tasks


# ---- 7. signals the program's kind cannot give -------------------------------------------
def test_signal_unsupported_by_kind_is_refused_at_plan_time():
    with pytest.raises(UnsupportedSignalError) as info:
        plan_query(load_program(GT), None, ["async_completion_latency"])
    text = str(info.value)
    assert isinstance(info.value, ArgusInputError)
    assert "signal 'async_completion_latency' needs a triton program (TTGIR discovery" in text
    assert "is cuda. Signals for cuda: barrier_count, branch_profile, instruction_mix, latency, stall_reasons, system_timeline" in text
    assert_one_line(run_cli("plan", "examples/ground_truth", "--signals", "async_completion_latency"),
                    "argus plan:", "'examples/ground_truth' is cuda", "needs a triton program")
    assert plan_query(load_program(ROOT / "examples" / "triton"), None, ["async_completion_latency"]).tasks


def test_prerequisite_kind_limits_reach_the_signal():
    python_program = ProgramVersion.from_sources("py", {"step.py": "x"}, kind="python", regions=load_program(GT).regions)
    with pytest.raises(UnsupportedSignalError, match="for its prerequisite 'pc_region_map'.*Signals for python: "
                                                     "system_timeline"):
        plan_query(python_program, None, ["instruction_mix"])


def _npz_member_declaring(tmp_path: Path, shape: tuple) -> Path:
    """A raw trace whose 'buffer' member's .npy header declares ``shape`` (its data stays small)."""
    good = _good_trace(tmp_path / "good.npz")
    import zipfile

    with zipfile.ZipFile(good) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    npy = members["buffer.npy"]
    header_len = 10 + int.from_bytes(npy[8:10], "little")
    header = npy[10:header_len].decode("latin1")
    lied = header.replace(header[header.index("(") : header.index(")") + 1], repr(shape))
    lied = lied.ljust(header_len - 10 - 1) + "\n"
    members["buffer.npy"] = npy[:8] + len(lied).to_bytes(2, "little") + lied.encode("latin1") + npy[header_len:]
    out = tmp_path / "lying.npz"
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out


def test_npz_member_declaring_1_tib_is_refused_before_allocating(tmp_path):
    path = _npz_member_declaring(tmp_path, (1 << 40,))
    with pytest.raises(TraceError, match=r"array 'buffer' declares shape \(1099511627776,\) of uint8 "
                                         r"\(1099511627776 bytes\) but holds"):
        load_raw(path)
    assert_one_line(run_cli("trace", path), "argus trace:", "declares shape (1099511627776,)")


def test_npz_member_whose_zip_entry_declares_too_much_is_refused(tmp_path):
    good = _good_trace(tmp_path / "good.npz").read_bytes()
    import struct
    import zipfile

    data = bytearray(good)
    with zipfile.ZipFile(tmp_path / "good.npz") as zf:
        info = zf.getinfo("buffer.npy")
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(b"buffer.npy"))  # the member's directory entry
    struct.pack_into("<I", data, central + 24, 0xFFFFFFF0)  # its uncompressed size: 4 GiB
    (tmp_path / "big.npz").write_bytes(bytes(data))
    assert info.file_size < 1 << 20
    with pytest.raises(TraceError, match="array 'buffer' declares 4294967280 bytes"):
        load_raw(tmp_path / "big.npz")
