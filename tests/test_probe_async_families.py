"""Forced-wait probes of cp.async copies and WGMMA dots, on the CPU (issue 20 item 4).

On the two corpus kernels that keep these ops in flight across loop trips: ``linear_cp_async``
(fp32, ``num_stages=3``) and ``matmul_autotuned`` (fp16, config 0, ``num_stages=3``): each commits
one cp.async group per tile and waits with ``ttg.async_wait {num = 2}``, and its ``isAsync``
``ttng.warp_group_dot`` is retired by ``ttng.warp_group_dot_wait {pendings = 1}`` (the dot of trip t
is still in flight while trip t + 1 issues its own).

Checked for a selected (op, iteration) of each family: the probe TTGIR is the reference plus inserted
lines only (and, for a dot, its later uses renamed to the waited value); everything with an effect
(waits, barriers, clock reads, stores) sits in an ``scf.if`` on ``iv == lb + trip * step``; the
probe compiles for sm_90a with the installed Triton on the CPU, and its SASS has exactly one more
zero-count wait than the reference (``DEPBAR.LE SB0, 0x0`` for cp.async, ``WARPGROUP.DEPBAR.LE gsb0,
0x0`` for WGMMA) and the reference's HGMMA and ``WARPGROUP.ARRIVE`` counts (the dots are not
serialised). The GPU side is ``tests/test_probe_async_families_gpu.py``.
"""
from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

triton = pytest.importorskip("triton")

from argus_rt.kinds.triton import probes as P  # noqa: E402
from argus_rt.kinds.triton.async_sites import PROBE_KINDS, DiscoveryError, discover  # noqa: E402
from argus_rt.kinds.triton.discovery import async_sites_document  # noqa: E402
from argus_rt.kinds.triton.layout import PROBE_RECORD_DTYPE  # noqa: E402
from argus_rt.kinds.triton.program import program_ttgir  # noqa: E402
from argus_rt.kinds.triton.ttgir_module import parse_module, text_name  # noqa: E402
from argus_rt.program import load_program  # noqa: E402
from argus_rt.sass import disassemble  # noqa: E402
from argus_rt.synthesis import EvidenceError  # noqa: E402

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "triton_corpus"
PROGRAMS = ("linear_cp_async", "matmul_autotuned")
# (program, label, iteration): a prologue copy, an in-loop copy, the last in-loop copy, dots early and last
SELECTED = [("matmul_autotuned", "a", 0), ("matmul_autotuned", "b", 5), ("matmul_autotuned", "acc", 5),
            ("matmul_autotuned", "acc", 15), ("linear_cp_async", "x", 31), ("linear_cp_async", "acc", 0)]
PURE_OUTSIDE = {"arith.constant", "arith.cmpi", "arith.addi", "arith.muli", "tt.get_program_id", "tt.get_num_programs",
                "tt.addptr", "scf.if"}


@pytest.fixture(scope="module")
def kernels():
    """name -> (program, reference TTGIR, discovery over the whole kernel)."""
    out = {}
    for name in PROGRAMS:
        program = load_program(CORPUS / name / "argus_program.json")
        ttgir, iterations = program_ttgir(program)
        out[name] = (program, ttgir, discover(ttgir, None, iterations=iterations))
    return out


@pytest.fixture(scope="module")
def reference_sass(kernels, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    out = {}
    for name, (_, ttgir, _) in kernels.items():
        k = P.compile_ttgir(ttgir, tmp, name)
        out[name] = _sass(k, tmp / f"{name}.cubin")
    return out


def _sass(kernel, path: Path) -> str:
    path.write_bytes(kernel.asm["cubin"])
    return disassemble(path)


def _count(sass: str, pattern: str) -> int:
    return len(re.findall(pattern, sass))


def _probe(kernels, name, label, it):
    _, ttgir, d = kernels[name]
    site = next(s for s in d.sites if s.label == label)
    return ttgir, d, site, P.make_forced_wait_probe(ttgir, d, site.op_id, it)


def test_discovery_lists_every_family_with_its_in_flight_wait(kernels):
    for name, (program, _, d) in kernels.items():
        by = {s.label: s for s in d.sites}
        iters = program.launch["iterations"]
        assert sorted(s.kind for s in d.sites) == ["cp_async", "cp_async", "wgmma"], name
        dot = next(s for s in d.sites if s.kind == "wgmma")
        assert dot.completion.kind == "wgmma_wait" and dot.completion.wait_count == 1  # in flight across trips
        assert dot.iterations == list(range(iters)) and dot.completion.consumer_wait_line == dot.completion.wait_line
        for s in d.sites:
            if s.kind == "cp_async":
                assert s.completion.wait_count == 2 and s.completion.consumer_wait_line == s.completion.wait_line
                assert s.iterations == list(range(iters))
        # the candidates of every family are planned: the document lists their iterations
        doc = json.loads(json.dumps(async_sites_document(d, program.id)))
        assert {s["kind"] for s in doc["sites"] if s["iterations"]} == {"cp_async", "wgmma"}
        assert len(d.candidates()) == 3 * iters and set(PROBE_KINDS) >= {s.kind for s in d.sites}
        assert by[dot.label].completion.describe() == f"warp_group_dot_wait pendings=1 (TTGIR line {dot.completion.wait_line})"


def test_discovery_checks_the_cp_async_ring_mapping(kernels):
    """Prologue copy k must write the slot the loop reads in trip k: a prologue copy moved to another
    slot is refused, naming the copy."""
    _, ttgir, d = kernels["matmul_autotuned"]
    module = parse_module(ttgir)
    a = next(s for s in d.sites if s.label == "a")
    first = module.op_at_line(a.instances[0].ttgir_line)
    dest = module.defs[next(n for n, t in zip(first.operands, first.operand_types) if t.startswith("!ttg.memdesc"))]
    bad_line = dest.text.replace("[%c0_i32]", "[%c1_i32]")
    assert bad_line != dest.text
    lines = ttgir.splitlines()
    lines[dest.line_no - 1] = bad_line
    with pytest.raises(DiscoveryError, match=r"prologue copy 0 writes slot 1 of %a but the loop reads iteration 0 "
                                             r"from slot 0"):
        discover("\n".join(lines) + "\n", None, iterations=16)


def _normalised(probe_text: str, dot: str | None) -> list[str]:
    """The probe's lines with the extra kernel argument dropped and the dot's waited value renamed
    back: what must equal the reference plus inserted lines."""
    out = []
    for line in probe_text.splitlines():
        line = line.replace(f", {P.PROBE_ARG}: !tt.ptr<i64>", "")
        if dot and not line.lstrip().startswith("%argus_acc ="):
            line = re.sub(r"%argus_acc(?![\w.$#-])", dot, line)
        out.append(line)
    return out


def _inserted_blocks(ref: str, probe_lines: list[str]) -> list[tuple[int, list[str]]]:
    """(reference line index the block is inserted before, its lines); fails unless the probe is
    the reference plus insertions."""
    a = ref.splitlines()
    blocks = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=probe_lines, autojunk=False).get_opcodes():
        assert tag in ("equal", "insert"), (tag, a[i1:i2], probe_lines[j1:j2])
        if tag == "insert":
            blocks.append((i1, probe_lines[j1:j2]))
    return blocks


def _ops_outside_scf_if(block: list[str]) -> list[str]:
    """Op names of a block's lines that run unconditionally (not nested in an ``scf.if`` region)."""
    depth, names = 0, []
    for line in block:
        text = line.strip()
        if depth == 0 and not text.startswith("}"):
            m = re.match(r"(?:%[\w#:.$-]+(?:, %[\w#:.$-]+)* = )?([a-z_]+\.[\w.]+)", text)
            names.append(m.group(1) if m else text)
        depth += text.count("{") - text.count("}") if ("scf.if" in text or text.startswith("}")) else 0
    return names


@pytest.mark.parametrize("name,label,it", SELECTED)
def test_probe_edits_only_the_selected_iteration(kernels, name, label, it):
    ttgir, d, site, probe = _probe(kernels, name, label, it)
    module = parse_module(ttgir)
    op = module.op_at_line(next(i for i in site.instances if it in i.iterations).ttgir_line)
    inst = next(i for i in site.instances if it in i.iterations)
    dot = text_name(op.results[0]) if site.kind == "wgmma" else None
    blocks = _inserted_blocks(ttgir, _normalised(probe.ttgir, dot))
    assert len(blocks) == 3, [b[0] for b in blocks]  # record setup, issue, forced wait
    (setup_at, setup), (issue_at, issue), (done_at, done) = blocks
    assert setup_at == module.ops[0].line_no - 1 and set(_ops_outside_scf_if(setup)) <= PURE_OUTSIDE
    assert issue_at == op.line_no - 1  # right before the copy / dot
    after = op if site.kind == "wgmma" else next(o for o in module.ops[op.index:] if o.name == "ttg.async_commit_group")
    assert done_at == after.end_line_no  # right after the dot / the copy's commit group
    # outside the selected iteration only the selection runs: a compare (or a constant) and two scf.if
    assert set(_ops_outside_scf_if(issue + done)) <= PURE_OUTSIDE
    assert _ops_outside_scf_if(done) == ["scf.if"]
    forced = (r"ttg\.async_wait \{num = 0 : i32\}" if site.kind == "cp_async"
              else rf"ttng\.warp_group_dot_wait {re.escape(dot)} \{{pendings = 0 : i32\}}")
    assert len(re.findall(forced, "\n".join(done))) == 1 and "gpu.barrier" in "\n".join(issue)
    # the IR: every new effect is nested in an scf.if on %argus_sel, which selects the trip's induction value
    pm = parse_module(probe.ttgir)
    sel = pm.defs["%argus_sel"]
    if inst.placement == "loop":
        loop = module.loop_of(op)
        trip = it - inst.trip_offset
        assert sel.name == "arith.cmpi" and sel.operands[0] == loop.iv
        assert pm.constant_int(sel.operands[1]) == module.constant_int(loop.lower) + trip * module.constant_int(loop.step)
    else:
        assert sel.name == "arith.constant" and pm.constant_int("%argus_sel") == 1 and op.loop is None
    ifs = {o.index for o in pm.ops if o.name == "scf.if" and o.operands[:1] == ["%argus_sel"]}
    assert len(ifs) == 2  # the issue timestamps, the forced wait and record
    inside = Counter(o.name for o in pm.ops if o.parent in ifs and o.name != "scf.yield")
    wait = "ttg.async_wait" if site.kind == "cp_async" else "ttng.warp_group_dot_wait"
    # two CTA barriers, five clock / SM reads, the record's five stores, the forced wait: nothing else
    assert inside == {"gpu.barrier": 2, "tt.elementwise_inline_asm": 5, "tt.store": 5, wait: 1}
    assert probe.kind == site.kind and probe.key == f"0x{site.op_id:08x}@{it}"
    desc = json.loads(json.dumps(probe.descriptor()))
    assert desc["kind"] == site.kind and desc["probe_arg"]["words_per_cta"] == len(PROBE_RECORD_DTYPE.names)


@pytest.mark.parametrize("name,label,it", SELECTED)
def test_probe_compiles_for_sm90a_and_its_sass_has_the_forced_wait(kernels, reference_sass, name, label, it, tmp_path):
    _, _, site, probe = _probe(kernels, name, label, it)
    k = P.compile_ttgir(probe.ttgir, tmp_path, "probe")
    assert ".target sm_90a" in k.asm["ptx"] and list(k.src.signature.values())[-1] == "*i64"
    assert "%globaltimer" in k.asm["ptx"] and "%clock64" in k.asm["ptx"] and "%smid" in k.asm["ptx"]
    sass, ref = _sass(k, tmp_path / "probe.cubin"), reference_sass[name]
    cp_zero, wg_zero = r"\bDEPBAR\.LE SB0, 0x0\b", r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0\b"
    extra_cp, extra_wg = (1, 0) if site.kind == "cp_async" else (0, 1)
    assert _count(sass, cp_zero) == _count(ref, cp_zero) + extra_cp
    assert _count(sass, wg_zero) == _count(ref, wg_zero) + extra_wg
    for same in (r"\bHGMMA\.", r"WARPGROUP\.ARRIVE", r"\bLDGDEPBAR\b", r"\bDEPBAR\.LE SB0, 0x[1-9]",
                 r"WARPGROUP\.DEPBAR\.LE gsb0, 0x[1-9]"):
        assert _count(sass, same) == _count(ref, same), same  # the pipeline itself is untouched
    assert _count(sass, r"\bBAR\.SYNC") == _count(ref, r"\bBAR\.SYNC") + 2  # the probe's two CTA barriers


def test_traced_reference_times_the_copies_and_dots_waits(kernels, tmp_path):
    _, ttgir, d = kernels["linear_cp_async"]
    lines = P.traced_wait_lines(d)
    module = parse_module(ttgir)
    assert [module.op_at_line(x).name for x in lines] == ["ttg.async_wait", "ttng.warp_group_dot_wait"]
    traced = P.make_iteration_trace(ttgir, d)
    assert traced.count("%globaltimer") == 4
    assert f"%argus_words = arith.constant {2 * 2 * d.iterations} : i32" in traced  # two wait blocks per CTA
    k = P.compile_ttgir(traced, tmp_path, "traced")
    assert list(k.src.signature.values())[-1] == "*i64"
    assert all(s.completion.loop_trips is None for s in d.sites)  # the K loop's bound is the argument K


def test_probe_records_decode_and_join_per_family(tmp_path, monkeypatch):
    """The records a cp.async or WGMMA probe writes decode like a TMA probe's and join through the
    same synthesis rule: per-CTA trips, the site's own traced wait, not-reached iterations, and the
    family in ``join.kind``."""
    from tests import test_probe_per_cta_trips as T

    sites = [{"op_id": "k0", "kind": "cp_async", "region": "main/load", "completion": {"consumer_wait_line": 112}},
             {"op_id": "k1", "kind": "wgmma", "region": "main/mma", "completion": {"consumer_wait_line": 209}},
             {"op_id": "q", "kind": "tma_load", "region": "main/load", "completion": {"consumer_wait_line": None}}]
    monkeypatch.setattr(T, "SITES", sites)
    buf = T.probe_buffer("k1", 1, range(T.N_CTAS))
    lat = P.probe_latencies(buf, T.N_CTAS)
    assert lat["recorded"] == T.N_CTAS and lat["latency_ns_median"] == np.median([T.probe_ns("k1", c, 1) for c in range(8)])
    _, got = T._join(tmp_path, {("k0", 3): list(range(4, 8)), ("k0", 14): [], ("k1", 1): list(range(8))})
    assert got[("k0", 3)]["join"]["kind"] == "cp_async" and got[("k1", 1)]["join"]["kind"] == "wgmma"
    assert got[("k0", 3)]["qualification"] == "derived" and got[("k0", 3)]["join"]["ctas"] == 4
    assert got[("k0", 3)]["join"]["reference_wait_ns"] == np.median([T.wait_ns(0, c, 3) for c in range(4, 8)])
    assert got[("k1", 1)]["join"]["reference_wait_ns"] == np.median([T.wait_ns(1, c, 1) for c in range(8)])
    assert got[("k0", 14)]["value"] is None and got[("k0", 14)]["join"]["reached"] is False
    # a traced reference that did not time this dot's wait (kept from an Argus that traced TMA waits only)
    monkeypatch.setattr(T, "SITES", sites + [{"op_id": "d", "kind": "wgmma", "region": "main/mma",
                                              "completion": {"consumer_wait_line": 300}}])
    with pytest.raises(EvidenceError, match=r"probe site d \(wgmma\) waits at TTGIR line 300, a loop the traced "
                                            r"reference did not trace \(traced: \[112, 209\]\).*collect it again"):
        T._join(tmp_path, {("d", 1): list(range(8))})


def test_unsupported_placements_are_refused(kernels):
    _, ttgir, d = kernels["linear_cp_async"]
    x = next(s for s in d.sites if s.label == "x")
    with pytest.raises(P.ProbeError, match=r"iteration 32 is not served .* valid iterations: \[0, 1, .*31\]"):
        P.make_forced_wait_probe(ttgir, d, x.op_id, 32)
    other = P.make_forced_wait_probe(ttgir, d, x.op_id, 0)
    with pytest.raises(P.ProbeError, match=r"is not ttg.async_copy_global_to_local"):
        P.make_forced_wait_probe(other.ttgir, d, x.op_id, 0)  # TTGIR lines moved: not what discovery read


def test_dot_probe_in_causal_attention_s_diagonal_loop_selects_its_trip_at_run_time(tmp_path):
    """The diagonal loop starts at a run-time bound (``start_m * BLOCK_M``): the probe's trip is found
    from the loop's own SSA bounds, and its two trips are the only ones planned for its dots."""
    program = load_program(CORPUS / "attention" / "argus_program.causal.json")
    ttgir, iterations = program_ttgir(program)
    d = discover(ttgir, None, iterations=iterations)
    diag = [s for s in d.sites if s.kind == "wgmma" and s.completion.loop_trips == 2]
    assert sorted(s.label for s in diag) == ["acc", "qk"] and all(s.iterations == [0, 1] for s in diag)
    module = parse_module(ttgir)
    pv = next(s for s in diag if s.label == "acc")
    loop = module.loop_of(module.op_at_line(pv.instances[0].ttgir_line))
    probe = P.make_forced_wait_probe(ttgir, d, pv.op_id, 1)
    assert f"%argus_trip_iv = arith.addi {text_name(loop.lower)}, %argus_trip_toff" in probe.ttgir
    k = P.compile_ttgir(probe.ttgir, tmp_path, "causal_pv")
    assert ".target sm_90a" in k.asm["ptx"] and len(k.asm["cubin"]) > 0
