"""Warp roles: a program's declaration checked beyond its schema (no warp in two roles, none past the
launch's block), each role on its warps' slices and thread names in the Perfetto timeline, and the roles
of a warp-specialized Triton kernel read from its TTGIR through Triton's own warp-group allocation."""
from __future__ import annotations

import json

import numpy as np
import pytest

from argus_rt.cli import main
from argus_rt.program import ProgramError, load_program
from argus_rt.schema_check import validator
from argus_rt.trace import INTERVAL_DTYPE, Intervals, chrome_trace
from argus_rt.trace.chrome import nesting_problems
from argus_rt.warp_roles import WarpRoleError, check_warp_roles, role_of_warp, warps_per_cta
from test_cli_output import nested_occurrences, raw_trace_standin
from test_runtime_standins import demo_program, standins  # noqa: F401

ROLES = {"producer": [0], "consumer": [4]}


def cuda_program(tmp_path, roles, block=(256,)):
    """A CUDA program directory (never built here) whose argus_program.json declares ``roles``."""
    d = tmp_path / "prog"
    d.mkdir(parents=True)
    (d / "k.cu").write_text("__global__ void k(float* x) {}\n")
    (d / "regions.json").write_text(json.dumps({"argus_manifest_version": 1, "regions": []}))
    (d / "argus_program.json").write_text(json.dumps({
        "name": "k", "kind": "cuda", "sources": ["k.cu"], "compiler": "nvcc 13.0", "regions": "regions.json",
        "warp_roles": roles,
        "launch": {"kernel": "k", "grid": [1], "block": list(block), "args": [{"tensor": "float32", "shape": [4]}]}}))
    return d


# ---- the declaration ---------------------------------------------------------------------------------
def test_a_valid_declaration_loads_sorted():
    assert check_warp_roles({"consumer": [3, 1, 2], "producer": [0]}, 4) == {"consumer": [1, 2, 3], "producer": [0]}
    assert check_warp_roles(None) == {} and role_of_warp(None) == {}
    assert role_of_warp({"producer": [0], "consumer": [1, 2]}) == {0: "producer", 1: "consumer", 2: "consumer"}


def test_warps_per_cta_counts_whole_warps_of_a_block_and_is_unknown_without_one():
    assert warps_per_cta({"block": [256]}) == 8
    assert warps_per_cta({"block": [48, 2]}) == 3  # 96 threads
    assert warps_per_cta({"block": [33]}) == 2  # a partial warp is a warp
    assert warps_per_cta({"runner": "r.py:run"}) is None
    assert warps_per_cta({"module": "k.py", "kernel": "k", "num_warps": 4}) is None  # specialization adds warps


@pytest.mark.parametrize("roles, warps, message", [
    ({"producer": [0, 1], "consumer": [1, 2]}, 8, "warp_roles: warp 1 is in both 'consumer' and 'producer'; "
                                                  "a warp has at most one role"),
    ({"producer": [0], "consumer": [1, 8]}, 8, "warp_roles.consumer: warp 8 is not a warp of the CTA; the CTA has "
                                               "8 warps: valid are 0-7"),
    ({"producer": [40]}, None, "warp_roles.producer: warp 40 is not a warp of the CTA; valid are 0-31"),
    ({"producer": [-1]}, None, "warp_roles.producer: warp -1 is not a warp of the CTA; valid are 0-31"),
    ({"producer": [True]}, None, "warp_roles.producer: warp True is not a warp of the CTA"),
    ({"producer": []}, None, "warp_roles.producer: [] is not a non-empty array of warp indices"),
    ({"producer": "0-3"}, None, "warp_roles.producer: '0-3' is not a non-empty array of warp indices"),
    ({"2nd": [0]}, None, "warp_roles: role name '2nd' is not an identifier"),
    ([0, 1], None, "warp_roles: [0, 1] is not an object of role names to warp indices"),
])
def test_bad_declarations_are_one_line_errors_naming_the_value(roles, warps, message):
    with pytest.raises(WarpRoleError) as err:
        check_warp_roles(roles, warps)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_program_file_with_overlapping_roles_or_warps_past_its_block_is_refused(tmp_path):
    with pytest.raises(ProgramError, match=r"argus_program.json: warp_roles: warp 2 is in both 'a' and 'b'"):
        load_program(cuda_program(tmp_path / "1", {"a": [0, 1, 2], "b": [2, 3]}))
    # 96 threads: warps 0-2, so warp 3 does not exist (the schema alone allows up to 31)
    with pytest.raises(ProgramError, match=r"warp_roles.b: warp 3 is not a warp of the CTA; the CTA has 3 warps: "
                                           r"valid are 0-2"):
        load_program(cuda_program(tmp_path / "2", {"a": [0], "b": [1, 3]}, block=(96,)))
    pv = load_program(cuda_program(tmp_path / "3", {"producer": [0], "consumer": [1, 2]}, block=(96,)))
    assert pv.warp_roles == {"consumer": [1, 2], "producer": [0]}


def test_the_cli_prints_a_bad_declaration_in_one_line(tmp_path, capsys):
    prog = cuda_program(tmp_path, {"producer": [0, 9]})
    assert main(["plan", str(prog), "--region", "x", "--signals", "latency"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "warp_roles.producer: warp 9 is not a warp of the CTA" in err


def test_the_warp_specialized_fixture_declares_its_roles_and_compiles_in_every_marker_mode(tmp_path):
    """tests/fixtures/ws_pipeline, the program of the GPU timeline test: its roles load against its block,
    and its kernel compiles for sm_90a with markers off, marker-only and traced (where nvcc is installed)."""
    import subprocess
    from pathlib import Path

    from argus_rt.resources import csrc_dir
    from argus_rt.tools import tool_or_none

    fixture = Path(__file__).parent / "fixtures" / "ws_pipeline"
    pv = load_program(fixture)
    assert pv.warp_roles == {"consumer": [1, 2, 3], "producer": [0]} and warps_per_cta(pv.launch) == 4
    nvcc = tool_or_none("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed: the fixture kernel is not compiled")
    for mode in (0, 1, 2):
        cmd = [str(nvcc), "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-I", str(csrc_dir()),
               f"-DARGUS_MODE={mode}", "-o", str(tmp_path / f"m{mode}.cubin"), str(fixture / "ws_pipeline.cu")]
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr


# ---- the timeline ------------------------------------------------------------------------------------
def two_warps() -> Intervals:
    """An outer and a nested slice on warps 0, 1 and 4 of CTA 2 on SM 5."""
    rows = np.zeros(6, dtype=INTERVAL_DTYPE)
    for k, w in enumerate((0, 1, 4)):
        for j, (s, e, depth, rid) in enumerate(((0, 1000, 0, 0xA), (100, 400, 1, 0xB))):
            r = rows[2 * k + j]
            r["sm"], r["cta"], r["warp"], r["region_id"], r["depth"] = 5, 2, w, rid, depth
            r["start"], r["end"], r["duration"], r["coord"] = s + 10 * w, e + 10 * w, e - s, 0xFFFFFFFF
    return Intervals(rows, "ns")


def test_each_slice_of_a_warp_with_a_role_carries_it_and_its_thread_is_named_with_it():
    doc = chrome_trace(two_warps(), warp_roles=ROLES)
    assert [e.message for e in validator("chrome_trace").iter_errors(doc)] == []
    assert nesting_problems(doc) == []
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {2 * 64 + 0: "CTA 2 warp 0 (producer)", 2 * 64 + 1: "CTA 2 warp 1",
                       2 * 64 + 4: "CTA 2 warp 4 (consumer)"}
    roles = {(e["tid"] - 128, e["args"]["depth"]): e["args"].get("warp_role") for e in doc["traceEvents"]
             if e["ph"] == "X"}
    assert roles == {(0, 0): "producer", (0, 1): "producer", (1, 0): None, (1, 1): None,
                     (4, 0): "consumer", (4, 1): "consumer"}


def test_without_roles_nothing_is_added():
    doc = chrome_trace(two_warps())
    assert all("warp_role" not in e["args"] for e in doc["traceEvents"] if e["ph"] == "X")
    assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"} == {
        "CTA 2 warp 0", "CTA 2 warp 1", "CTA 2 warp 4"}


def test_the_schema_refuses_a_role_that_is_no_identifier():
    doc = chrome_trace(two_warps(), warp_roles=ROLES)
    first = next(e for e in doc["traceEvents"] if e["ph"] == "X")
    first["args"]["warp_role"] = "not a role"
    errors = list(validator("chrome_trace").iter_errors(doc))
    assert len(errors) == 1 and list(errors[0].path) == ["traceEvents", doc["traceEvents"].index(first)]


def test_query_perfetto_of_a_program_with_declared_roles(standins, tmp_path, capsys):  # noqa: F811
    """End to end through ``argus query --perfetto``: the roles of argus_program.json on the right warps."""
    pv = demo_program(occurrences=nested_occurrences())
    prog = tmp_path / "prog"
    prog.mkdir()
    (prog / "demo.cu").write_text("// synthetic")
    (prog / "regions.json").write_text(json.dumps(pv.regions.to_manifest()))
    (prog / "argus_program.json").write_text(json.dumps({
        "name": "demo", "kind": "standin", "sources": ["demo.cu"], "compiler": "none", "regions": "regions.json",
        "warp_roles": ROLES, "launch": pv.launch}))
    out = tmp_path / "t.json"
    with raw_trace_standin():
        rc = main(["query", str(prog), "--region", "gemm", "--signals", "latency", "--workspace", str(tmp_path / "ws"),
                   "--devices", "", "--no-progress", "--perfetto", str(out)])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert [e.message for e in validator("chrome_trace").iter_errors(doc)] == [] and nesting_problems(doc) == []
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    by_region = {}
    for e in slices:
        by_region.setdefault(e["name"], set()).add(e["args"]["warp_role"])
    # gemm and load ran on warp 0, mma on warp 4 (nested_occurrences)
    assert by_region == {"main/gemm": {"producer"}, "main/gemm/load": {"producer"}, "main/gemm/mma": {"consumer"}}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"CTA 0 warp 0 (producer)", "CTA 0 warp 4 (consumer)", "CTA 1 warp 0 (producer)",
                     "CTA 1 warp 4 (consumer)"}


# ---- roles of a warp-specialized Triton kernel, from its TTGIR ---------------------------------------
# partitions of 1, 4 and 2 warps after a default region of 4: Triton's allocation pass places the largest
# first (partition1 on warps 4-7), and rounds the CTA up to whole warp groups with a partition of its own
UNEVEN_TTGIR = """\
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.target = "cuda:90", "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @uneven(%arg0: i32) {
    ttg.warp_specialize(%arg0)
    default {
      ttg.warp_yield
    }
    partition0(%a: i32) num_warps(1) {
      ttg.warp_return
    }
    partition1(%a: i32) num_warps(4) {
      ttg.warp_return
    }
    partition2(%a: i32) num_warps(2) {
      ttg.warp_return
    } : (i32) -> ()
    tt.return
  }
}
"""


@pytest.fixture(scope="module")
def triton_ws():
    """(compiled warp-specialized TMA matmul, compiled plain one) for sm_90, on the CPU."""
    triton = pytest.importorskip("triton")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def ws_matmul(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  WS: tl.constexpr):
        a_desc = tl.make_tensor_descriptor(a_ptr, [1024, K], [K, 1], [BM, BK])
        b_desc = tl.make_tensor_descriptor(b_ptr, [1024, K], [K, 1], [BN, BK])
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, K, BK, warp_specialize=WS):
            acc = tl.dot(a_desc.load([0, k]), b_desc.load([0, k]).T, acc)
        tl.store(c_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], acc.to(tl.float16))

    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "K": "i32"}

    def compiled(ws):
        src = triton.compiler.ASTSource(fn=ws_matmul, signature=sig,
                                        constexprs={"BM": 128, "BN": 128, "BK": 64, "WS": ws})
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_stages": 3, "num_warps": 4})

    return compiled(True), compiled(False)


def test_uneven_partitions_get_the_warps_triton_allocates_them():
    pytest.importorskip("triton")
    from argus_rt.kinds.triton.warp_partitions import partition_warp_roles

    assert partition_warp_roles(UNEVEN_TTGIR) == {"default": [0, 1, 2, 3], "partition0": [10],
                                                  "partition1": [4, 5, 6, 7], "partition2": [8, 9], "padding": [11]}


def test_a_warp_specialized_kernel_s_partitions_are_roles_covering_its_warps(triton_ws):
    from argus_rt.kinds.triton.warp_partitions import partition_warp_roles

    ws, plain = triton_ws
    assert "ttg.warp_specialize" in ws.asm["ttgir"]
    roles = partition_warp_roles(ws.asm["ttgir"])
    assert roles == {"default": [0, 1, 2, 3], "partition0": [4, 5, 6, 7], "partition1": [8, 9, 10, 11]}
    assert sorted(w for warps in roles.values() for w in warps) == list(range(ws.metadata.num_warps))  # 12
    assert partition_warp_roles(plain.asm["ttgir"]) == {}
    # the derived roles label a timeline like declared ones
    rows = np.zeros(3, dtype=INTERVAL_DTYPE)
    rows["warp"], rows["region_id"], rows["end"], rows["duration"] = [0, 4, 8], 0xA, 10, 10
    doc = chrome_trace(Intervals(rows, "ns"), warp_roles=roles)
    assert [e["args"]["warp_role"] for e in doc["traceEvents"] if e["ph"] == "X"] == ["default", "partition0",
                                                                                     "partition1"]
    assert [e.message for e in validator("chrome_trace").iter_errors(doc)] == []


def test_ops_that_disagree_on_partition_warps_are_refused():
    pytest.importorskip("triton")
    from argus_rt.kinds.triton.warp_partitions import WarpPartitionError, partition_warp_roles

    body = UNEVEN_TTGIR.split("    ttg.warp_specialize(")[1].split("    tt.return")[0]
    other = body.replace("num_warps(1)", "num_warps(2)", 1)  # partitions of 2, 4, 2 warps: other places
    two = UNEVEN_TTGIR.replace("    tt.return", "    ttg.warp_specialize(" + other + "    tt.return")
    with pytest.raises(WarpPartitionError, match="2 ttg.warp_specialize ops whose partitions run on different warps"):
        partition_warp_roles(two)
    same = UNEVEN_TTGIR.replace("    tt.return", "    ttg.warp_specialize(" + body + "    tt.return")
    assert partition_warp_roles(same) == partition_warp_roles(UNEVEN_TTGIR)
