"""Reading TTGIR with Triton's MLIR bindings: generic-form ops, locations, the text attachments and
their checks, edits re-verified by MLIR. Runs under every installed Triton (3.6 and 3.7 differ:
3.6's bindings have no get_int_attr, so integer attributes come from the text there)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from argus_rt import triton_regions as argus  # noqa: E402
from argus_rt.kinds.triton import mlir_ir, ttgir_text  # noqa: E402
from argus_rt.kinds.triton.loop_trips import simulate_loop  # noqa: E402
from argus_rt.kinds.triton.ttgir_edit import checked_edit  # noqa: E402
from argus_rt.kinds.triton.ttgir_locations import LocationError, SourceLoc, read_location  # noqa: E402
from argus_rt.kinds.triton.ttgir_module import Module, TtgirError, text_name  # noqa: E402
from argus_rt.kinds.triton.ttgir_regions import region_ops, region_spans  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRITON_MINOR = tuple(int(x) for x in triton.__version__.split(".")[:2])


@triton.jit
def _scale_row(x, m):
    argus.begin("mix/helper")
    m_new = tl.maximum(m, tl.max(x, 1))
    s = tl.sum(tl.exp(x - m_new[:, None]), 1)
    argus.end("mix/helper")
    return m_new, s


@triton.jit
def _mix_kernel(x_ptr, y_ptr, n, lo_ptr, B: tl.constexpr):
    argus.begin("mix")
    r = tl.program_id(0)
    lo = tl.load(lo_ptr + r)
    m = tl.full((B,), -float("inf"), tl.float32)
    acc = tl.zeros((B,), tl.float32)
    for j in range(lo, n, B):  # a run-time lower bound
        x = tl.load(x_ptr + r * n + j + tl.arange(0, B)[:, None] * n + tl.arange(0, B)[None, :])
        m, s = _scale_row(x, m)
        acc += s
    c = tl.cumsum(acc, 0)
    if r > 3:  # scf.if with a result
        c = c * 2
    k = _not_inlined(n)  # a tt.call of a second (private) tt.func
    while k < n:  # scf.while
        k += r + 1
    tl.store(y_ptr + r * B + tl.arange(0, B), c + k)
    argus.end("mix")


@triton.jit(noinline=True)
def _not_inlined(n):
    return n * 2 + 1


@triton.jit
def _ws_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [1024, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [1024, K], [K, 1], [BN, BK])
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=True):
        acc = tl.dot(a_desc.load([0, k]), b_desc.load([0, k]).T, acc)
    tl.store(c_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], acc.to(tl.float16))


@pytest.fixture(scope="module")
def mix_ttgir():
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "lo_ptr": "*i32"}
    src = triton.compiler.ASTSource(fn=_mix_kernel, signature=sig, constexprs={"B": 32})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ttgir"]


@pytest.fixture(scope="module")
def mix(mix_ttgir):
    return Module(mix_ttgir)


@pytest.fixture(scope="module")
def tma_ttgir():
    sys.path.insert(0, str(ROOT / "examples" / "triton"))
    import tma_matmul as tm

    return tm.compile_reference().asm["ttgir"]


# ---- the bindings adapter --------------------------------------------------------------------------
def test_bindings_parse_generic_form_and_structured_control_flow(mix, mix_ttgir):
    names = [o.name for o in mix.ops]
    assert '"tt.reduce"(' in mix_ttgir and '"tt.scan"(' in mix_ttgir  # Triton prints them in generic form
    for name in ("tt.reduce", "tt.reduce.return", "tt.scan", "scf.if", "scf.while", "scf.condition", "scf.for"):
        assert name in names, name
    if_op = next(o for o in mix.ops if o.name == "scf.if")
    assert len(if_op.results) == 1 and len(if_op.ir.regions) == 2  # then and else
    while_op = next(o for o in mix.ops if o.name == "scf.while")
    assert [len(r) for r in while_op.ir.regions] == [1, 1]  # before and after regions, one block each
    reduce_ops = [o for o in mix.ops if o.name == "tt.reduce"]
    assert all(len(o.ir.regions[0][0].args) == 2 for o in reduce_ops)  # the combine block's two arguments


def test_a_noinline_helper_is_a_second_function_and_the_public_one_is_the_kernel(mix, mix_ttgir):
    assert "tt.func private" in mix_ttgir and "tt.call" in mix_ttgir
    assert mix.func_name == "_mix_kernel" and "tt.call" in {o.name for o in mix.ops}


def test_warp_specialized_partitions_parse():
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "K": "i32"}
    src = triton.compiler.ASTSource(fn=_ws_kernel, signature=sig, constexprs={"BM": 128, "BN": 128, "BK": 64})
    text = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_stages": 3}).asm["ttgir"]
    m = Module(text)
    ws = [o for o in m.ops if o.name == "ttg.warp_specialize"]
    assert ws and "partition0(" in text  # partitions printed inline by warp_specialize, not as ops of their own
    inside = [o for o in m.ops if o.parent == ws[0].index]
    assert {"ttg.warp_yield", "ttg.warp_return"} <= {o.name for o in inside}
    assert all(m.lines[o.line_no - 1] == o.text for o in m.ops)


def test_every_op_line_starts_with_its_name(mix):
    for op in mix.ops:
        head = ttgir_text.op_head(op.text)
        assert head is not None and head[1] == op.name, (op.line_no, op.text)
        assert mix.lines[op.line_no - 1] == op.text


def test_int_attr_capability_matches_the_triton_version():
    assert mlir_ir.has_int_attr() == (TRITON_MINOR >= (3, 7))


@pytest.mark.skipif(not mlir_ir.has_int_attr(), reason="this Triton's bindings have no get_int_attr to compare with")
def test_text_int_attrs_equal_the_bindings(mix, tma_ttgir):
    checked = 0
    for m in (mix, Module(tma_ttgir)):
        for op in m.ops:
            for attr in {"arith.constant": ["value"], "arith.cmpi": ["predicate"], "ttng.barrier_expect": ["size"],
                         "ttng.warp_group_dot_wait": ["pendings"]}.get(op.name, []):
                if op.name == "arith.constant" and not op.result_types[0].startswith("i"):
                    continue  # tensors and floats: not integer attributes
                assert ttgir_text.text_int_attr(op.name, op.text, attr) == m.int_attr(op, attr), op.text
                checked += 1
    assert checked > 20


def test_parse_error_is_one_line_with_the_ttgir_line(mix_ttgir):
    bad = mix_ttgir.replace("tt.get_program_id x", "tt.get_program_id %nope", 1)
    line = next(k for k, ln in enumerate(bad.splitlines(), 1) if "%nope" in ln)
    with pytest.raises(TtgirError, match=rf"^<ttgir>:{line}: MLIR cannot parse this TTGIR: [^\n]*$"):
        Module(bad)


def test_text_that_is_not_one_op_per_line_is_refused(mix_ttgir):
    lines = mix_ttgir.splitlines()
    i = next(k for k, ln in enumerate(lines) if "tt.get_program_id" in ln)
    lines[i] = lines[i] + " " + lines[i + 1].strip()  # two ops on one line: valid MLIR, but no line per op
    del lines[i + 1]
    with pytest.raises(TtgirError, match=r"the text has op \S+ where the parsed IR has|has no line in the text"):
        Module("\n".join(lines))


# ---- names, loops and helpers ------------------------------------------------------------------------
def test_block_arguments_are_named_from_the_text(mix):
    (loop,) = mix.loops.values()
    assert mix.lines[loop.op.line_no - 1].count(text_name(loop.iv)) >= 1
    assert loop.lower not in mix.func_args and mix.constant_int(loop.lower) is None  # run-time lower bound
    assert len(loop.iter_args) == len(loop.inits) == 2 and loop.iv_type == "i32"
    trace = simulate_loop(mix, loop, 3)  # a run-time lower bound: the iv is unknown, discovery still runs
    assert len(trace) == 3 and all(loop.iv not in env for env in trace)


def test_helper_ops_carry_the_call_site_then_the_helper_position(mix):
    _, spans = region_spans(mix)
    helper = next(s for s in spans if s.name == "mix/helper")
    kernel = next(s for s in spans if s.name == "mix")
    assert kernel.call_prefix == () and len(helper.call_prefix) == 1
    call = helper.call_prefix[0]
    assert call.file.endswith("test_ttgir_mlir.py") and helper.begin.line < helper.end.line
    held = region_ops(mix, spans)
    assert {"tt.reduce", "math.exp"} <= {o.name for o in held["mix/helper"]}
    assert all(o.location.stack[0] == call for o in held["mix/helper"])
    assert "tt.scan" in {o.name for o in held["mix"]} and "tt.reduce" not in {o.name for o in held["mix"]}


def test_locations_of_ops_without_results_come_from_the_text(mix):
    store = next(o for o in mix.ops if o.name == "tt.store")
    assert store.results == [] and store.ir.loc is None  # the bindings cannot say where it is
    assert store.loc is not None and store.loc.file.endswith("test_ttgir_mlir.py")


def test_sibling_regions_reusing_names_get_unique_keys():
    sys.path.insert(0, str(ROOT / "examples" / "triton_corpus" / "attention"))
    import attention

    m = Module(attention.compile_reference(causal=True).asm["ttgir"])
    assert len(m.loops) == 2
    ivs = [lp.iv for lp in m.loops.values()]
    assert len(set(ivs)) == 2  # keys differ ...
    for lp in m.loops.values():  # ... and each names its loop's own induction variable on the loop's line
        assert f"scf.for {text_name(lp.iv)} = " in lp.op.text
    assert len(m.defs) == sum(len(o.results) for o in m.ops)


# ---- locations -----------------------------------------------------------------------------------------
def test_location_forms():
    aliases = {"#loc1": 'loc("k.py":22:26)', "#loc2": 'loc("m_new"("k.py":8:36))', "#loc3": "loc(unknown)",
               "#loc4": "loc(callsite(#loc2 at #loc1))", "#loc5": "loc(callsite(#loc3 at #loc4))"}
    assert read_location('loc("a/k.py":3:4)').stack == (SourceLoc("a/k.py", 3, 4),)
    assert read_location('"k.py":3:4 to 5:6').stack == (SourceLoc("k.py", 3, 4),)
    assert read_location('"k.py":3:4 to :9').stack == (SourceLoc("k.py", 3, 4),)
    loc = read_location("#loc4", aliases)
    assert [str(f) for f in loc.stack] == ["k.py:22:26", "k.py:8:36"] and loc.name == "m_new"
    assert [str(f) for f in read_location("#loc5", aliases).stack] == ["k.py:22:26", "k.py:8:36"]
    nested = read_location('loc(callsite("h.py":1:2 at callsite("g.py":3:4 at "k.py":5:6)))')
    assert [str(f) for f in nested.stack] == ["k.py:5:6", "g.py:3:4", "h.py:1:2"]
    fused = read_location('loc(fused<"x">[unknown, "k.py":7:1, "k.py":8:1])')
    assert fused.stack == (SourceLoc("k.py", 7, 1),)
    assert read_location("loc(unknown)").stack == ()


def test_bad_locations_are_named():
    with pytest.raises(LocationError, match=r"#loc9 is used but never defined"):
        read_location("#loc9", {})
    with pytest.raises(LocationError, match=r"too deep"):
        read_location("#loc1", {"#loc1": "loc(#loc2)", "#loc2": "loc(#loc1)"})
    with pytest.raises(LocationError, match=r"cannot read location"):
        read_location('loc(callsite("k.py":1:2))')


# ---- edits ---------------------------------------------------------------------------------------------
def test_checked_edit_refuses_broken_or_lossy_edits(mix, mix_ttgir):
    assert checked_edit(mix_ttgir, mix, "identity") == mix_ttgir
    store = next(o for o in mix.ops if o.name == "tt.store")
    lines = mix_ttgir.splitlines()
    dropped = "\n".join(ln for k, ln in enumerate(lines, 1) if k != store.line_no)
    with pytest.raises(TtgirError, match=r"the test edit lost tt.store"):
        checked_edit(dropped, mix, "test")
    lines.insert(store.line_no - 1, "    %argus_bad = arith.addi %undefined, %undefined : i32")
    with pytest.raises(TtgirError, match=r"the test edit broke the TTGIR: <test>:\d+: MLIR cannot parse"):
        checked_edit("\n".join(lines), mix, "test")


def test_text_locations_are_checked_against_the_bindings(mix_ttgir, monkeypatch):
    real = Module._text_location

    def shifted(self, expr):  # a text reader that gets one position wrong
        loc = real(self, expr)
        return type(loc)(tuple(SourceLoc(f.file, f.line + 1, f.col) for f in loc.stack), loc.name)

    monkeypatch.setattr(Module, "_text_location", shifted)
    with pytest.raises(TtgirError, match=r"the text's location .* differs from MLIR's"):
        Module(mix_ttgir)


def test_discovery_without_get_int_attr_reads_the_same_from_the_text(tma_ttgir, monkeypatch):
    from argus_rt.kinds.triton.async_sites import discover

    with_bindings = discover(Module(tma_ttgir), "tma_matmul/kloop", iterations=8)
    monkeypatch.setattr(mlir_ir, "has_int_attr", lambda: False)  # as on Triton 3.6
    from_text = discover(Module(tma_ttgir), "tma_matmul/kloop", iterations=8)
    assert [s.to_json() for s in from_text.sites] == [s.to_json() for s in with_bindings.sites]
