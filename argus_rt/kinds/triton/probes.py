"""Forced-wait probes: a TTGIR variant that waits for one async op's completion right after issuing it,
in one logical iteration only, and timestamps issue and completion. Every discovered family is
probed (:data:`.async_sites.PROBE_KINDS`): TMA loads, cp.async copies and WGMMA dots.

**TMA loads.** A TMA load signals an mbarrier shared with the other loads of its pipeline stage (one
``barrier_expect`` covers all their bytes). Waiting on that shared barrier right after the first
load would deadlock (the second load is not issued yet) and would measure the group, not the op.
So, in the selected iteration only, the probe:

1. lowers the stage barrier's expected bytes by this load's bytes (the consumer's wait and
   results are unchanged: the data is in shared memory before the consumer reads it);
2. sends this load to a private one-shot mbarrier (``barrier_expect`` of its bytes);
3. reads ``%globaltimer`` and ``%clock64`` just before the issue and just after
   ``wait_barrier`` on the private barrier (phase 0) returns, and stores the four values for the CTA
   in an extra kernel argument ``argus_probe_out`` (one ``ArgusProbeRecord`` per CTA:
   ``csrc/argus/argus_probe_record.h``, mirrored in :mod:`argus_rt.kinds.triton.layout`).

For a load peeled into the prologue the selection is static; for the in-loop copy the trip is
selected with ``iv == lb + (iteration - trip_offset) * step`` and all edits are predicated on it.

**cp.async and WGMMA** (:func:`_group_wait_probe`). Both complete through a count of pending groups
(``ttg.async_wait {num = N}`` after ``ttg.async_commit_group``; ``ttng.warp_group_dot_wait
{pendings = N}`` after an ``isAsync`` ``ttng.warp_group_dot``), so the forced wait is the same wait
with zero pending, placed right after the selected op: after its commit group for cp.async, after
the dot for WGMMA. Neither wait takes a predicate, so the probe's code sits in ``scf.if`` on the
selection (``iv == lb + trip * step``; a constant true for a prologue or straight-line instance):

1. before the op: ``gpu.barrier`` (the CTA's warps reach the issue together), then ``%globaltimer``
   and ``%clock64`` (the issue timestamps; zero in the other trips, never stored);
2. after it: the zero-pending wait, ``gpu.barrier`` (every warp's wait returned: a cp.async wait
   covers its own thread's copies, a WGMMA wait its own warpgroup), both clocks, ``%smid``, and the
   record stores. For WGMMA the ``scf.if`` yields the waited accumulator and the dot's later uses
   take it (the registers of an in-flight dot are never read before its wait).

Zero pending waits for every older group still in flight as well (cp.async groups and WGMMA groups
retire in issue order); a chained WGMMA accumulator cannot complete before the previous dot anyway.
The CTA's record is written by one thread, once, in the selected iteration.

Every other iteration runs the reference code (for cp.async / WGMMA plus one compare and two
untaken branches per trip). The variant is a new program version linked to its origin
(``origin_hash``) and to the op ID; collection effects: ``forces_completion``, ``perturbs_timing``.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...evidence import EvidenceError, check_recording_ctas
from .async_sites import (
    CP_ASYNC,
    CP_ASYNC_COMMIT,
    PROBE_KINDS,
    TMA_LOAD,
    WGMMA,
    Discovery,
    Site,
    UnsupportedOpError,
    barrier_index,
    tma_parts,
)
from .kernel_check import (  # noqa: F401
    ProbeError,
    _kernel_module,
    check_module_reference,
    compile_ttgir,
    program_variant,
    timed_variant_columns,
)
from .layout import (
    ITERATION_WAIT_DTYPE,
    ITERATION_WAIT_WORDS,
    PROBE_RECORD_DTYPE,
    PROBE_RECORD_WORDS,
    records,
    word,
)
from .ttgir_edit import (
    SMID_ASM,
    checked_edit,
    cta_slice_lines,
    i64_asm_line,
    iv_for_trip_lines,
    lines_with_pointer_arg,
    special_reg_line,
    trip_index_lines,
)
from .ttgir_edit import indent as _indent
from .ttgir_edit import loc_suffix as _loc_suffix
from .ttgir_module import Module, Op, parse_module, text_name

PROBE_ARG = "%argus_probe_out"
# the SSA value the probe stores into each ArgusProbeRecord field
_PROBE_VALUES = {"issue_ns": "%argus_ns0", "complete_ns": "%argus_ns1", "issue_cycles": "%argus_clk0",
                 "complete_cycles": "%argus_clk1", "sm": "%argus_sm"}
WORDS_PER_CTA = PROBE_RECORD_WORDS  # one ArgusProbeRecord per CTA
EFFECTS = ("forces_completion", "perturbs_timing")


@dataclass
class ForcedWaitProbe:
    """One probe variant: (op, iteration) of one program version, as TTGIR text."""

    origin_hash: str  # sha256 of the reference TTGIR
    op_id: int
    iteration: int
    kind: str
    label: str
    ttgir: str
    effects: tuple[str, ...] = EFFECTS
    notes: list[str] = field(default_factory=list)

    @property
    def variant_hash(self) -> str:
        return hashlib.sha256(self.ttgir.encode()).hexdigest()

    @property
    def key(self) -> str:
        return f"0x{self.op_id:08x}@{self.iteration}"

    def descriptor(self) -> dict:
        """JSON-able description linking the variant to its origin (no TTGIR text)."""
        return {"origin_hash": self.origin_hash, "variant_hash": self.variant_hash, "op_id": f"0x{self.op_id:08x}",
                "iteration": self.iteration, "kind": self.kind, "label": self.label, "effects": list(self.effects),
                "probe_arg": {"name": PROBE_ARG.lstrip("%"), "dtype": "int64", "words_per_cta": WORDS_PER_CTA}}


def make_forced_wait_probe(ttgir: str, discovery: Discovery, op: int | str, iteration: int) -> ForcedWaitProbe:
    """Build the forced-wait TTGIR for ``(op, iteration)`` from the reference ``ttgir``.

    Every family of :data:`.async_sites.PROBE_KINDS` is probed (TMA loads here, cp.async and WGMMA by
    :func:`_group_wait_probe`). Raises :class:`UnsupportedOpError` for a site of another family or a
    WGMMA that is not asynchronous, :class:`ProbeError` for unknown iterations or TTGIR whose shape
    differs from what discovery saw.
    """
    site = discovery.site(op)
    if site.kind not in PROBE_KINDS:
        raise UnsupportedOpError(
            f"forced-wait probes support {', '.join(PROBE_KINDS)}; site 0x{site.op_id:08x} is {site.op_name} "
            f"({site.kind}) at {site.source}. Valid probe sites: "
            + (", ".join(f"0x{s.op_id:08x} ({s.label})" for s in discovery.sites if s.kind in PROBE_KINDS) or "none"))
    if iteration not in site.iterations:
        raise ProbeError(f"iteration {iteration!r} is not served by op 0x{site.op_id:08x} ({site.label}); "
                         f"valid iterations: {site.iterations}")
    module = parse_module(ttgir)
    if module.func_name != discovery.kernel:
        raise ProbeError(f"TTGIR is for kernel {module.func_name!r}, discovery was for {discovery.kernel!r}")
    inst = next(i for i in site.instances if iteration in i.iterations)
    by_line = {o.line_no: o for o in module.ops}
    if site.kind != "tma_load":
        return _group_wait_probe(ttgir, module, site, inst, iteration)
    copy = by_line.get(inst.ttgir_line)
    if copy is None or copy.name != TMA_LOAD:
        raise ProbeError(f"TTGIR line {inst.ttgir_line} is not {TMA_LOAD}: this TTGIR is not the one discovery read")
    bar_key, pred_key, nbytes = tma_parts(module, copy)
    barrier_index(module, copy, bar_key)  # refuses barriers discovery cannot follow
    bar_type = module.value_types[bar_key]
    bar, pred = text_name(bar_key), text_name(pred_key)  # as the edited lines spell them
    # the private barrier: a one-slot array of barriers of the probed load's barrier type
    alloc_type = re.sub(r"memdesc<", "memdesc<1x", bar_type, count=1)
    expect = next((o for o in reversed(module.ops[: copy.index]) if o.name == "ttng.barrier_expect"
                   and o.operands and o.operands[0] == bar_key and o.loop == copy.loop), None)
    if expect is None:
        raise ProbeError(f"{copy}: no barrier_expect for its barrier {bar}")
    m = re.search(r"(ttng\.barrier_expect\s+%[\w.$-]+\s*,\s*)(\d+)(\s*,\s*)(%[\w.$-]+)", expect.text)
    if not m:
        raise ProbeError(f"{expect}: cannot read '<barrier>, <bytes>, <pred>'")
    expect_bytes, expect_pred = int(m.group(2)), m.group(4)
    remaining = expect_bytes - nbytes
    if remaining < 0:
        raise ProbeError(f"{expect}: expects {expect_bytes} B, less than the probed load's {nbytes} B")

    lines = lines_with_pointer_arg(module, PROBE_ARG)  # the timestamps' buffer
    loc = _loc_suffix(copy.text)
    ind = _indent(copy.text)
    out_ty = "!tt.ptr<i64>"
    pb, pbi = "%argus_pbar_all", "%argus_pbar"
    # constants + private barrier allocation + init, after the barrier inits that precede the copy at function level, so the private barrier
    # dominates it (a kernel may initialise later barriers after this copy)
    inits = [o for o in module.ops[: copy.index] if o.name == "ttng.init_barrier" and o.block_depth == 0]
    anchor = inits[-1] if inits else module.ops[0]
    ai = _indent(anchor.text)
    setup = [
        f"{ai}%argus_c0 = arith.constant 0 : i32",
        f"{ai}%argus_true = arith.constant true",
        f"{ai}{pb} = ttg.local_alloc : () -> {alloc_type}",
        f"{ai}{pbi} = ttg.memdesc_index {pb}[%argus_c0] : {alloc_type} -> {bar_type}",
        f"{ai}ttng.init_barrier {pbi}, 1 : {bar_type}",
    ] + cta_slice_lines(ai, "argus", PROBE_ARG, WORDS_PER_CTA)
    for k in range(1, WORDS_PER_CTA):
        setup += [f"{ai}%argus_c{k}w = arith.constant {k} : i32",
                  f"{ai}%argus_p{k} = tt.addptr %argus_p0, %argus_c{k}w : {out_ty}, i32"]
    edits: dict[int, tuple[list[str], str | None, list[str]]] = {}  # line index -> (before, replacement, after)

    def timer(name: str, reg: str) -> str:
        return special_reg_line(ind, name, reg, loc)

    copy_probe = copy.text.replace(f", {bar}, {pred} :", f", {pbi}, %argus_sel_pred :", 1)
    if copy_probe == copy.text:
        raise ProbeError(f"{copy}: could not retarget its barrier operand {bar}")
    if inst.placement in ("prologue", "straight"):
        sel_lines = [f"{ind}%argus_sel_pred = arith.andi {pred}, %argus_true : i1{loc}"]
        new_expect = expect.text[: m.start(2)] + str(remaining) + expect.text[m.end(2):]
        edits[expect.line_no - 1] = ([], new_expect, [])
        store_mask = "%argus_sel_pred"
        replaced_copy = None  # the original copy is replaced by the probe copy
    else:
        loop = module.loop_of(copy)
        trip = iteration - inst.trip_offset
        iv_lines, trip_iv = iv_for_trip_lines(ind, "argus_trip", module, loop, trip, loc)
        sel_lines = iv_lines + [
            f"{ind}%argus_sel = arith.cmpi eq, {text_name(loop.iv)}, {trip_iv} : {loop.iv_type}{loc}",
            f"{ind}%argus_nsel = arith.xori %argus_sel, %argus_true : i1{loc}",
            f"{ind}%argus_sel_pred = arith.andi {pred}, %argus_sel : i1{loc}",
            f"{ind}%argus_nsel_pred = arith.andi {pred}, %argus_nsel : i1{loc}",
        ]
        eind = _indent(expect.text)
        eloc = _loc_suffix(expect.text)
        keep = expect.text.replace(f", {expect_pred} :", ", %argus_e_nsel :", 1)
        reduced = expect.text[: m.start(2)] + str(remaining) + expect.text[m.end(2):]
        reduced = reduced.replace(f", {expect_pred} :", ", %argus_e_sel :", 1)
        e_lines, e_iv = iv_for_trip_lines(eind, "argus_e", module, loop, trip, eloc)
        edits[expect.line_no - 1] = (e_lines + [
            f"{eind}%argus_e_is = arith.cmpi eq, {text_name(loop.iv)}, {e_iv} : {loop.iv_type}{eloc}",
            f"{eind}%argus_e_not = arith.xori %argus_e_is, %argus_true : i1{eloc}",
            f"{eind}%argus_e_sel = arith.andi {expect_pred}, %argus_e_is : i1{eloc}",
            f"{eind}%argus_e_nsel = arith.andi {expect_pred}, %argus_e_not : i1{eloc}",
        ], keep + "\n" + reduced, [])
        store_mask = "%argus_sel_pred"
        replaced_copy = copy.text.replace(f", {bar}, {pred} :", f", {bar}, %argus_nsel_pred :", 1)
    probe_block = sel_lines + [
        timer("%argus_ns0", "%globaltimer"),
        timer("%argus_clk0", "%clock64"),
        f"{ind}ttng.barrier_expect {pbi}, {nbytes}, %argus_sel_pred : {bar_type}{loc}",
        copy_probe,
        f"{ind}ttng.wait_barrier {pbi}, %argus_c0, %argus_sel_pred : {bar_type}{loc}",
        timer("%argus_ns1", "%globaltimer"),
        timer("%argus_clk1", "%clock64"),
        i64_asm_line(ind, "%argus_sm", SMID_ASM, loc),
    ] + [f"{ind}tt.store %argus_p{word(PROBE_RECORD_DTYPE, f)}, {_PROBE_VALUES[f]}, {store_mask} : {out_ty}{loc}"
         for f in PROBE_RECORD_DTYPE.names]
    if replaced_copy is None:
        edits[copy.line_no - 1] = (probe_block, "", [])
    else:
        # selection predicates first: the original copy is now predicated on "not selected"
        edits[copy.line_no - 1] = (sel_lines, replaced_copy, probe_block[len(sel_lines):])
    new_lines = []
    for i, text in enumerate(lines):
        if i in edits:
            before, repl, after = edits[i]
            new_lines += before
            if repl:
                new_lines.append(repl)
            new_lines += after
        else:
            new_lines.append(text)
        if i == anchor.line_no - 1:
            new_lines += setup
    out = checked_edit("\n".join(new_lines) + "\n", module, f"forced-wait probe {site.label}@{iteration}")
    origin = hashlib.sha256(ttgir.encode()).hexdigest()
    return ForcedWaitProbe(origin, site.op_id, iteration, site.kind, site.label, out,
                           notes=[f"{inst.placement} instance at TTGIR line {inst.ttgir_line}",
                                  site.completion.describe(iteration)])


def _inside_warp_specialize(module: Module, op: Op) -> bool:
    p = op.parent
    while p is not None:
        if module.ops[p].name.startswith("ttg.warp_specialize"):
            return True
        p = module.ops[p].parent
    return False


def _rename_uses(lines: list[str], name: str, new: str, start: int, end: int) -> int:
    """Replace every use of SSA value ``name`` by ``new`` in ``lines[start:end]`` (0-based, in place);
    returns how many lines changed."""
    pat = re.compile(re.escape(name) + r"(?![\w.$#-])")
    changed = 0
    for i in range(start, end):
        repl = pat.sub(new, lines[i])
        if repl != lines[i]:
            lines[i] = repl
            changed += 1
    return changed


def _group_wait_probe(ttgir: str, module: Module, site: Site, inst, iteration: int) -> ForcedWaitProbe:
    """The forced-wait probe of a cp.async copy or a WGMMA dot (the module docstring says how)."""
    want = CP_ASYNC if site.kind == "cp_async" else WGMMA
    op = next((o for o in module.ops if o.line_no == inst.ttgir_line), None)
    if op is None or op.name != want:
        raise ProbeError(f"TTGIR line {inst.ttgir_line} is not {want}: this TTGIR is not the one discovery read")
    if _inside_warp_specialize(module, op):
        raise UnsupportedOpError(f"{op} (site 0x{site.op_id:08x}, {site.label}) runs in a warp-specialized partition: "
                                 "the probe's CTA barriers would wait for warps that never reach them")
    if site.kind == "wgmma" and not re.search(r"\bisAsync\s*=\s*true\b", op.text):
        raise UnsupportedOpError(f"{op} (site 0x{site.op_id:08x}, {site.label}) is not asynchronous (no isAsync = "
                                 "true): it completes before the next op, so there is no wait to force")
    loc, ind = _loc_suffix(op.text), _indent(op.text)
    inner = ind + "  "
    if inst.placement == "loop":
        loop = module.loop_of(op)
        trip = iteration - inst.trip_offset
        iv_lines, trip_iv = iv_for_trip_lines(ind, "argus_trip", module, loop, trip, loc)
        select = iv_lines + [f"{ind}%argus_sel = arith.cmpi eq, {text_name(loop.iv)}, {trip_iv} : {loop.iv_type}{loc}"]
        where = f"loop trip {trip} (iteration {iteration})"
    else:
        select = [f"{ind}%argus_sel = arith.constant true{loc}"]
        where = f"{inst.placement} instance (iteration {iteration})"
    issue = select + [
        f"{ind}%argus_issue:2 = scf.if %argus_sel -> (i64, i64) {{",
        f"{inner}gpu.barrier{loc}",
        special_reg_line(inner, "%argus_ns0", "%globaltimer", loc),
        special_reg_line(inner, "%argus_clk0", "%clock64", loc),
        f"{inner}scf.yield %argus_ns0, %argus_clk0 : i64, i64{loc}",
        f"{ind}}} else {{",
        f"{inner}scf.yield %argus_z64, %argus_z64 : i64, i64{loc}",
        f"{ind}}}{loc}",
    ]
    values = {"issue_ns": "%argus_issue#0", "complete_ns": "%argus_ns1", "issue_cycles": "%argus_issue#1",
              "complete_cycles": "%argus_clk1", "sm": "%argus_sm"}
    record = [
        f"{inner}gpu.barrier{loc}",
        special_reg_line(inner, "%argus_ns1", "%globaltimer", loc),
        special_reg_line(inner, "%argus_clk1", "%clock64", loc),
        i64_asm_line(inner, "%argus_sm", SMID_ASM, loc),
    ] + [f"{inner}tt.store %argus_p{word(PROBE_RECORD_DTYPE, f)}, {values[f]} : !tt.ptr<i64>{loc}"
         for f in PROBE_RECORD_DTYPE.names]
    lines = lines_with_pointer_arg(module, PROBE_ARG)
    notes = [f"{where}: TTGIR line {inst.ttgir_line}", site.completion.describe(iteration)]
    if site.kind == "cp_async":
        commit = next((o for o in module.ops[op.index + 1:] if o.name == CP_ASYNC_COMMIT
                       and op.results and op.results[0] in o.operands), None)
        if commit is None or commit.parent != op.parent:
            raise ProbeError(f"{op}: no {CP_ASYNC_COMMIT} of its token in the same block")
        copies = sum(1 for o in module.ops if o.name == CP_ASYNC and o.results and o.results[0] in commit.operands)
        after_line = commit.end_line_no
        done = [f"{ind}scf.if %argus_sel {{",
                f"{inner}%argus_drained = ttg.async_wait {{num = 0 : i32}}{loc}"] + record + [
                f"{inner}scf.yield{loc}",  # explicit: the text then maps one op per line, as the reader expects
                f"{ind}}}{loc}"]
        notes.append(f"forced wait: ttg.async_wait {{num = 0}} after the commit group (line {commit.line_no}, "
                     f"{copies} cop{'y' if copies == 1 else 'ies'}); it also retires any older group still in flight")
    else:
        acc = text_name(op.results[0])
        ty = op.result_types[0]
        after_line = op.end_line_no
        done = [f"{ind}%argus_acc = scf.if %argus_sel -> ({ty}) {{",
                f"{inner}%argus_drained = ttng.warp_group_dot_wait {acc} {{pendings = 0 : i32}} : {ty}{loc}"] + record + [
                f"{inner}scf.yield %argus_drained : {ty}{loc}",
                f"{ind}}} else {{",
                f"{inner}scf.yield {acc} : {ty}{loc}",
                f"{ind}}}{loc}"]
        # the dot's later uses take the waited value: in its own block (and the blocks nested in it)
        end = module.ops[op.parent].end_line_no - 1 if op.parent is not None else len(lines)
        if not _rename_uses(lines, acc, "%argus_acc", after_line, end):
            raise ProbeError(f"{op}: its result {acc} is never used after it; nothing waits for the dot")
        notes.append(f"forced wait: ttng.warp_group_dot_wait {{pendings = 0}} right after the dot (the reference "
                     f"waits with pendings = {site.completion.wait_count} at line {site.completion.wait_line})")
    first = module.ops[0]
    fi = _indent(first.text)
    setup = cta_slice_lines(fi, "argus", PROBE_ARG, WORDS_PER_CTA) + [f"{fi}%argus_z64 = arith.constant 0 : i64"]
    for k in range(1, WORDS_PER_CTA):
        setup += [f"{fi}%argus_c{k}w = arith.constant {k} : i32",
                  f"{fi}%argus_p{k} = tt.addptr %argus_p0, %argus_c{k}w : !tt.ptr<i64>, i32"]
    out = []
    for i, text in enumerate(lines):
        if i == first.line_no - 1:
            out += setup
        if i == op.line_no - 1:
            out += issue
        out.append(text)
        if i == after_line - 1:
            out += done
    text = checked_edit("\n".join(out) + "\n", module, f"forced-wait probe {site.label}@{iteration}")
    return ForcedWaitProbe(hashlib.sha256(ttgir.encode()).hexdigest(), site.op_id, iteration, site.kind, site.label,
                           text, notes=notes)


# ---- traced reference: per-iteration consumer wait, for the join ------------------------------------
# A loop's trip count may differ between CTAs (causal attention: the key loop below the diagonal runs
# 2 * program_id trips, the diagonal loop 2). Each CTA records the trips it runs, 0 .. t_c - 1, in the
# first t_c records of its slice; the rest stay zero. So per CTA the recorded trips must be a prefix:
# a missing trip followed by a recorded later one is a recording failure, never a short loop.


def traced_wait_lines(discovery: Discovery, kinds: tuple[str, ...] = PROBE_KINDS) -> list[int]:
    """TTGIR lines of the consumer waits the traced reference times, in TTGIR order (the index of
    each one's block in the buffer, called its "loop"): every in-loop wait a probed site of ``kinds``
    is joined to (``Completion.consumer_wait_line``): a TMA load's ``wait_barrier``, cp.async's
    ``async_wait``, WGMMA's ``warp_group_dot_wait``. One loop may hold several (a TMA matmul's barrier
    wait and its dot wait); sites that share one (a loop's K and V loads) share its block."""
    return sorted({s.completion.consumer_wait_line for s in discovery.sites
                   if s.kind in kinds and s.completion.consumer_wait_line})


def make_iteration_trace(ttgir: str, discovery: Discovery, kinds: tuple[str, ...] = PROBE_KINDS) -> str:
    """The traced reference variant: around each consumer wait of every loop trip, read
    ``%globaltimer`` before and after and store them in the extra argument ``argus_probe_out``.

    Every wait of :func:`traced_wait_lines` (``kinds``: the families whose probes are joined to it) is
    traced (causal attention's TMA waits: below the diagonal and on it). Per CTA the buffer holds, for
    each traced wait in TTGIR order, ``iterations`` ``ArgusIterationWait`` records
    (``csrc/argus/argus_iteration_wait.h``): record t is trip t of that wait's loop; a CTA that runs
    t_c trips writes records 0 .. t_c - 1 (trips past ``iterations`` are not stored).

    This is the reference side of the join: for iteration i of a loop it says how long the consumer
    waited in trip i in an unprobed run (observed), next to the probe's issue-to-completion latency of
    each op of that loop's iteration i (derived). For TMA and cp.async the trip-i wait is the one for
    iteration i's tiles; a WGMMA wait with ``pendings = N`` in trip i retires the dot of trip i - N.
    """
    module = parse_module(ttgir)
    lines_of_waits = traced_wait_lines(discovery, kinds)
    if not lines_of_waits:
        raise ProbeError(f"kernel {discovery.kernel!r} has no probed async site ({', '.join(kinds)}) with a consumer "
                         "wait in a loop to trace")
    waits = [module.op_at_line(line) for line in lines_of_waits]
    per_loop = ITERATION_WAIT_WORDS * discovery.iterations
    begin_w, end_w = word(ITERATION_WAIT_DTYPE, "begin_ns"), word(ITERATION_WAIT_DTYPE, "end_ns")
    lines = lines_with_pointer_arg(module, PROBE_ARG)
    first = module.ops[0]
    fi = _indent(first.text)
    setup = cta_slice_lines(fi, "argus", PROBE_ARG, per_loop * len(waits)) + [
        f"{fi}%argus_two = arith.constant {ITERATION_WAIT_WORDS} : i32",
        f"{fi}%argus_one = arith.constant {end_w - begin_w} : i32",
        f"{fi}%argus_niter = arith.constant {discovery.iterations} : i32",
    ]
    edits: dict[int, tuple[list[str], list[str]]] = {}
    for j, wait in enumerate(waits):
        loop = module.loop_of(wait)
        ind, loc = _indent(wait.text), _loc_suffix(wait.text)
        p = "%argus" if j == 0 else f"%argus_l{j}"  # loop 0 keeps the single-loop names

        def timer(name: str, ind=ind, loc=loc) -> str:
            return special_reg_line(ind, name, "%globaltimer", loc)

        trip_lines, trip = trip_index_lines(ind, p.lstrip("%"), loop, loc)
        first_word = j * per_loop + begin_w  # this loop's block, then begin_ns's position in the record
        off0_lines = [f"{ind}{p}_off0 = arith.muli {trip}, %argus_two : i32{loc}"]
        if first_word:
            off0_lines = [f"{ind}{p}_offr = arith.muli {trip}, %argus_two : i32{loc}",
                          f"{ind}{p}_offb = arith.constant {first_word} : i32{loc}",
                          f"{ind}{p}_off0 = arith.addi {p}_offr, {p}_offb : i32{loc}"]
        before = trip_lines + [f"{ind}{p}_in = arith.cmpi slt, {trip}, %argus_niter : i32{loc}"] + off0_lines + [
            f"{ind}{p}_off1 = arith.addi {p}_off0, %argus_one : i32{loc}",
            f"{ind}{p}_q0 = tt.addptr %argus_p0, {p}_off0 : !tt.ptr<i64>, i32{loc}",
            f"{ind}{p}_q1 = tt.addptr %argus_p0, {p}_off1 : !tt.ptr<i64>, i32{loc}",
            timer(f"{p}_w0"),
        ]
        after = [timer(f"{p}_w1"),
                 f"{ind}tt.store {p}_q0, {p}_w0, {p}_in : !tt.ptr<i64>{loc}",
                 f"{ind}tt.store {p}_q1, {p}_w1, {p}_in : !tt.ptr<i64>{loc}"]
        edits[wait.line_no - 1] = (before, after)
    out = []
    for i, text in enumerate(lines):
        if i in edits:
            out += edits[i][0] + [text] + edits[i][1]
            continue
        if i == first.line_no - 1:
            out += setup
        out.append(text)
    return checked_edit("\n".join(out) + "\n", module, "traced reference")


def _wait_records(buffer, n_ctas: int, iterations: int, loops: int):
    """The traced reference's buffer as (CTA, loop, trip) records, and each (CTA, loop)'s observed
    trip count. :class:`ProbeError` naming the CTA, loop and trip if the recorded trips of a CTA are
    not a prefix 0 .. t_c - 1 (a hole before a recorded trip), or a wait ends before it begins."""
    import numpy as np

    rec = records(buffer, ITERATION_WAIT_DTYPE, n_ctas, loops * iterations).reshape(n_ctas, loops, iterations)
    written = rec["begin_ns"] != 0
    partial = ~written & (rec["end_ns"] != 0)
    if partial.any():  # begin and end are stored under one predicate: both or neither
        cta, loop, it = (int(x[0]) for x in np.nonzero(partial))
        raise ProbeError(f"the traced reference's CTA {cta}, loop {loop}, iteration {it} has an end but no begin "
                         "timestamp: the buffer is not what the trace writes")
    trips = np.where(written.all(axis=2), iterations, written.argmin(axis=2))  # the recorded prefix's length
    hole = written & (np.arange(iterations) >= trips[:, :, None])  # recorded past the CTA's first gap
    if hole.any():
        cta, loop, it = (int(x[0]) for x in np.nonzero(hole))
        gap = int(trips[cta, loop])
        raise ProbeError(f"the traced reference's CTA {cta} did not record iteration {gap} of loop {loop} but "
                         f"recorded iteration {it} after it: {int(hole.sum())} (CTA, loop, iteration) wait(s) "
                         "past a gap (a CTA runs trips 0 .. t-1; a gap is a recording failure)")
    bad = written & (rec["end_ns"] < rec["begin_ns"])
    if bad.any():
        cta, loop, it = (int(x[0]) for x in np.nonzero(bad))
        raise ProbeError(f"the traced reference's CTA {cta}, loop {loop}, iteration {it}: the wait ends before "
                         "it begins (end timestamp missing or the clock went backwards)")
    return rec, trips


def observed_trips(buffer, n_ctas: int, iterations: int, loops: int = 1):
    """Each CTA's trip count per traced loop, ``(n_ctas, loops)``, from the traced reference's buffer
    (at most ``iterations``: trips past it are not stored). Raises as :func:`_wait_records`."""
    return _wait_records(buffer, n_ctas, iterations, loops)[1]


def iteration_wait_stats(buffer, n_ctas: int, iterations: int, *, loops: int = 1, loop: int = 0) -> dict[int, dict]:
    """Per iteration of traced loop ``loop``: median of the consumer's wait (ns) over the CTAs that ran
    it, and how many did (``{"median_ns", "ctas", "of_ctas"}``). An iteration no CTA ran is absent."""
    import numpy as np

    rec, trips = _wait_records(buffer, n_ctas, iterations, loops)
    waits = rec["end_ns"][:, loop] - rec["begin_ns"][:, loop]
    out = {}
    for i in range(iterations):
        ran = trips[:, loop] > i
        if ran.any():
            out[i] = {"median_ns": float(np.median(waits[ran, i])), "ctas": int(ran.sum()), "of_ctas": n_ctas}
    return out


def iteration_waits(buffer, n_ctas: int, iterations: int, *, loops: int = 1, loop: int = 0) -> dict[int, float]:
    """Median over the CTAs that ran it of the consumer's wait (ns) per iteration of traced loop
    ``loop``, from the traced reference buffer; iterations no CTA ran are absent
    (:func:`iteration_wait_stats` says over how many CTAs)."""
    return {i: s["median_ns"] for i, s in iteration_wait_stats(buffer, n_ctas, iterations, loops=loops,
                                                                loop=loop).items()}


def iteration_waits_document(buffer, n_ctas: int, iterations: int, *, wait: str = "", launch: int = 0,
                             wait_lines: tuple[int | None, ...] = (None,)) -> dict:
    """``argus.iteration_waits/1`` evidence of one traced-reference launch: one row per (CTA, loop,
    iteration) the CTA ran, begin and end of the consumer's wait in ns (``%globaltimer``, one clock
    within the run), and the CTA's trip count of that loop (``trips``).

    ``wait_lines``: the consumer wait's TTGIR line of each traced loop (:func:`traced_wait_lines`;
    ``(None,)``: one loop, unnamed). ``loops`` maps the ``loop`` column to them; ``trips`` holds every
    (CTA, loop)'s trip count, zeros included (a CTA that runs no trip has no row); ``ctas``: the grid."""
    import numpy as np

    loops = len(wait_lines)
    rec, trips = _wait_records(buffer, n_ctas, iterations, loops)
    cta, loop, it = np.meshgrid(np.arange(n_ctas), np.arange(loops), np.arange(iterations), indexing="ij")
    ran = it < trips[:, :, None]
    tc, tl = np.meshgrid(np.arange(n_ctas), np.arange(loops), indexing="ij")
    return {"format": "argus.iteration_waits/1", "clock": "ns", "wait": wait, "ctas": n_ctas,
            "loops": [{"loop": j, "wait_line": line} for j, line in enumerate(wait_lines)],
            "columns": {
                "cta": cta[ran].tolist(), "loop": loop[ran].tolist(), "iteration": it[ran].tolist(),
                "begin": rec["begin_ns"][ran].tolist(), "end": rec["end_ns"][ran].tolist(),
                "trips": np.broadcast_to(trips[:, :, None], ran.shape)[ran].tolist(),
                "launch": [launch] * int(ran.sum())},
            "trips": {"cta": tc.ravel().tolist(), "loop": tl.ravel().tolist(), "trips": trips.ravel().tolist(),
                      "launch": [launch] * (n_ctas * loops)}}


# ---- synthesis helpers: probes joined with the traced reference by (loop, iteration) ----------------
def _probe_rows(buffer, n_ctas: int):
    """The probe buffer's records and which CTAs recorded the probe (``issue_ns`` written); a record
    with an issue but no later completion is a recording failure (:class:`ProbeError`, naming the CTA)."""
    import numpy as np

    rec = records(buffer, PROBE_RECORD_DTYPE, n_ctas)[:, 0]
    written = rec["issue_ns"] != 0
    partial = ~written & np.any([rec[f] != 0 for f in PROBE_RECORD_DTYPE.names], axis=0)
    if partial.any():  # the probe stores every field under one predicate: all or none
        raise ProbeError(f"{int(partial.sum())} CTA(s) wrote part of a probe record without its issue timestamp "
                         f"(first: CTA {int(np.nonzero(partial)[0][0])}): the buffer is not what the probe writes")
    bad = written & (rec["complete_ns"] < rec["issue_ns"])
    if bad.any():
        raise ProbeError(f"{int(bad.sum())} of {int(written.sum())} recording CTAs have a completion before the "
                         f"issue (first: CTA {int(np.nonzero(bad)[0][0])}): completion missing or timestamps "
                         "went backwards")
    return rec, written


def probe_latencies(buffer, n_ctas: int) -> dict:
    """Issue-to-completion latency of one probe from its ``argus_probe_out`` buffer (``n_ctas``
    ``ArgusProbeRecord``): median / min / max over the CTAs that recorded it, in ns (``%globaltimer``)
    and cycles (``%clock64``). Only the CTAs that run the probed iteration record it (a causal loop's
    trip count differs per CTA); ``recorded`` says how many did. :class:`ProbeError` if none did."""
    import numpy as np

    rec, written = _probe_rows(buffer, n_ctas)
    if not written.any():
        raise ProbeError(f"none of {n_ctas} CTAs recorded the probe (the selected instance never ran)")
    rec = rec[written]
    ns = rec["complete_ns"] - rec["issue_ns"]
    cyc = rec["complete_cycles"] - rec["issue_cycles"]
    return {"ctas": n_ctas, "recorded": int(written.sum()), "latency_ns_median": float(np.median(ns)),
            "latency_ns_min": int(ns.min()), "latency_ns_max": int(ns.max()),
            "latency_cycles_median": float(np.median(cyc))}


def op_events_document(buffer, n_ctas: int, op_id: int, iteration: int, *, launch: int = 0) -> dict:
    """``argus.op_events/1`` evidence of one probe launch: one row per CTA that recorded the probe
    (issue and completion in ns). ``ctas`` is the grid, ``recorded`` how many CTAs have a row: the
    CTAs that run the probed iteration. Zero rows is evidence too (no CTA ran the iteration, or the
    probe failed): synthesis tells them apart against the traced reference."""
    import numpy as np

    rec, written = _probe_rows(buffer, n_ctas)
    rec, ctas = rec[written], np.nonzero(written)[0]
    n = int(written.sum())
    return {"format": "argus.op_events/1", "clock": "ns", "ctas": n_ctas, "recorded": n, "columns": {
        "op_id": [f"0x{op_id:08x}"] * n, "iteration": [iteration] * n,
        "issue": rec["issue_ns"].tolist(), "complete": rec["complete_ns"].tolist(),
        "issue_cycles": rec["issue_cycles"].tolist(), "complete_cycles": rec["complete_cycles"].tolist(),
        "sm": rec["sm"].tolist(), "cta": ctas.tolist(), "launch": [launch] * n}}


def reference_ctas(trips_by_cta: dict[int, int], iteration: int) -> set[int]:
    """The CTAs whose loop runs ``iteration`` (trip count > iteration): exactly those must record a
    probe of that loop's ``iteration``."""
    return {c for c, t in trips_by_cta.items() if t > iteration}


def check_probe_ctas(label: str, iteration: int, expected: set[int], recorded_by_launch: dict[int, set[int]],
                     n_ctas: int | None = None, error: type[Exception] = ProbeError) -> bool:
    """:func:`argus_rt.evidence.check_recording_ctas` (the one join-time CTA-set check), raising ``error``
    (default :class:`ProbeError`, a failure of the probe run) instead of its EvidenceError."""
    try:
        return check_recording_ctas(label, iteration, expected, recorded_by_launch, n_ctas)
    except EvidenceError as exc:
        raise error(str(exc)) from None


def join_probes(discovery: Discovery, probes: dict[tuple[int, int], dict], reference_waits: dict[int, float] | None,
                *, waits_by_line: dict[int, dict[int, float]] | None = None):
    """Rows keyed by (op ID, iteration): the probe's latency (derived) joined with the traced
    reference's consumer wait for the *same* iteration of the op's own loop (observed). No timestamps
    are compared across runs: each number is a difference of two timestamps taken in one run.

    ``reference_waits``: one traced loop's ``{iteration: ns}`` (:func:`iteration_waits`);
    ``waits_by_line``: ``{consumer wait line: {iteration: ns}}`` when several loops are traced. An op
    outside every traced loop (a load before the loop) gets no reference wait."""
    rows = []
    for (op_id, it), lat in sorted(probes.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        site = discovery.site(op_id)
        line = site.completion.consumer_wait_line
        if waits_by_line is not None:
            waits = waits_by_line.get(line) if line else None
        else:
            waits = reference_waits if line else None
        rows.append({
            "op_id": f"0x{op_id:08x}", "label": site.label, "iteration": it,
            "slot": site.completion.slot_by_iteration.get(it), "phase": site.completion.phase_by_iteration.get(it),
            "latency_ns": lat["latency_ns_median"], "latency_cycles": lat["latency_cycles_median"],
            "ctas": lat.get("recorded", lat.get("ctas")), "qualification": "derived",
            "reference_wait_ns": None if waits is None else waits.get(it),
            "reference_qualification": None if waits is None else "observed",
        })
    return rows


# ---- collection on the GPU (for a Triton-aware Collect) -------------------------------------------------
def _same_every_launch(label: str, by_launch: dict[int, object], what: str) -> None:
    """Which CTAs ran / recorded what is fixed by the kernel and its inputs, not by timing: every
    launch must agree, else a recording was lost (:class:`ProbeError`)."""
    first = next(iter(by_launch.values()), None)
    for launch, got in by_launch.items():
        if got != first:
            raise ProbeError(f"{label}: {what} differs between launch 0 and launch {launch} (a launch lost "
                             "records: the CTAs that run an iteration do not change between launches)")


def collect_triton_probe(program, probe_ttgir: Path, workdir: Path, *, repeats: int = 3, seed: int | None = None) -> dict:
    """Run one probe variant of a Triton program on the current GPU and return its evidence.

    The kernel module named by ``program.launch["module"]`` provides ``make_inputs(seed)`` (fresh
    random inputs, outputs poisoned), ``run(compiled, inputs, probe_out=None)`` (returns the output
    tensor), ``n_ctas()`` and ``reference(a, b)``. The reference TTGIR (the base program's) runs first
    on the same inputs and is checked against ``reference`` (:data:`.triton_kernel_check.REFERENCE_REL_TOL`);
    every probe launch must reproduce its output bit for bit (a forced wait changes timing, not
    results), else :class:`ProbeError`. The first probe launch loads the module and is not evidence.

    Only the CTAs that run the probed iteration record it (``recorded`` of ``ctas``); every launch must
    be recorded by the same CTAs. Zero is accepted here (no CTA may run the iteration: a loop bound
    that depends on the program id); synthesis checks the set against the traced reference, where a
    zero that the reference contradicts is refused. Returns ``{"op_events": doc}`` with all timed
    launches' rows.
    """
    from .jit_equivalence import check_against_jit
    from .program import program_compiled

    mod = _kernel_module(program)
    params = program.params
    op_id = int(str(params["op_id"]), 16) if isinstance(params["op_id"], str) else int(params["op_id"])
    iteration = int(params["iteration"])
    ref = program_compiled(program)
    probe = program_variant(program, Path(probe_ttgir).read_text(encoding="utf-8"), workdir, "probe")
    jit = check_against_jit(program, mod)
    label = f"probe 0x{op_id:08x}@{iteration}"
    recorded: dict[int, list[int]] = {}
    n_ctas: list[int] = []

    def document(out, launch, n):
        doc = op_events_document(out, n, op_id, iteration, launch=launch)
        recorded[launch] = doc["columns"]["cta"]
        n_ctas[:] = [n]
        return doc

    cols, rel = timed_variant_columns(mod, ref, probe, WORDS_PER_CTA, label, seed, repeats, document)
    _same_every_launch(label, recorded, "the set of CTAs that recorded the probe")
    count = len(next(iter(recorded.values()), []))
    notes = [] if count else [f"no CTA recorded {label}: either no CTA runs iteration {iteration} (not reached) "
                              "or the probe failed; synthesis decides against the traced reference"]
    return {"op_events": {"format": "argus.op_events/1", "clock": "ns", "columns": cols, "launches": repeats,
                          "ctas": n_ctas[0] if n_ctas else None, "recorded": count, "notes": notes,
                          "reference_rel_error": rel, "jit_check": jit}}


def collect_triton_reference(program, workdir: Path, *, repeats: int = 1, seed: int | None = None) -> dict:
    """Run the traced reference (:func:`make_iteration_trace`) of a Triton program on the current GPU.

    The plain reference TTGIR runs first on fresh random inputs and is checked against the module's
    PyTorch ``reference`` (:data:`.triton_kernel_check.REFERENCE_REL_TOL`); every traced launch must reproduce
    its output bit for bit (the timer reads change timing, not results), else :class:`ProbeError`.
    The first traced launch loads the module and is not evidence. Returns the
    ``argus.iteration_waits/1`` document of all timed launches: rows for the (CTA, loop, iteration)
    waits each CTA ran, and ``trips``, each (CTA, loop)'s trip count. Every launch must show the same
    trips, and a loop whose trip count is the same in every CTA (discovery's ``loop_trips``) must show
    it in every CTA, else :class:`ProbeError`.
    """
    from .async_sites import discover
    from .jit_equivalence import check_against_jit
    from .program import program_compiled, program_ttgir

    mod = _kernel_module(program)
    ttgir, iterations = program_ttgir(program)
    d = discover(ttgir, None, iterations=iterations)
    wait_lines = tuple(traced_wait_lines(d))
    if not wait_lines:
        # nothing to time (a kernel without a pipelined async op): an empty, explained answer, so that
        # the query's other signals are not lost with it
        return {"format": "argus.iteration_waits/1", "clock": "ns", "wait": no_wait_note(d), "ctas": None,
                "loops": [], "columns": {k: [] for k in ("cta", "loop", "iteration", "begin", "end", "trips", "launch")},
                "trips": {k: [] for k in ("cta", "loop", "trips", "launch")}, "launches": 0,
                "reference_rel_error": None, "jit_check": check_against_jit(program, mod)}
    traced_text = make_iteration_trace(ttgir, d)
    module = parse_module(ttgir)
    what = (f"consumer waits ({', '.join(f'{module.op_at_line(w).name} at TTGIR line {w}' for w in wait_lines)}) "
            f"of {d.kernel}'s pipelined async ops, per loop iteration")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ref = program_compiled(program)
    traced = program_variant(program, traced_text, workdir, "traced_reference")
    jit = check_against_jit(program, mod)
    trips_docs: dict[int, dict] = {}
    n_ctas: list[int] = []

    def document(out, launch, n):
        doc = iteration_waits_document(out, n, iterations, wait=what, launch=launch, wait_lines=wait_lines)
        trips_docs[launch] = doc["trips"]
        n_ctas[:] = [n]
        return doc

    cols, rel = timed_variant_columns(mod, ref, traced, ITERATION_WAIT_WORDS * iterations * len(wait_lines),
                                      "the traced reference", seed, repeats, document)
    _same_every_launch("the traced reference", {k: v["trips"] for k, v in trips_docs.items()},
                       "the trip count of some (CTA, loop)")
    trips = {k: [x for t in trips_docs.values() for x in t[k]] for k in ("cta", "loop", "trips", "launch")}
    check_static_trips(d, wait_lines, trips, iterations)
    if trips["trips"] and not any(trips["trips"]):
        raise ProbeError(f"the traced reference recorded no wait in any CTA of any traced loop (TTGIR line(s) "
                         f"{', '.join(map(str, wait_lines))}): the trace did not run")
    return {"format": "argus.iteration_waits/1", "clock": "ns", "wait": what, "ctas": n_ctas[0] if n_ctas else None,
            "loops": [{"loop": j, "wait_line": line, "loop_trips": _static_trips_of(d, line)}
                      for j, line in enumerate(wait_lines)],
            "columns": cols, "trips": trips, "launches": repeats, "reference_rel_error": rel, "jit_check": jit}


def _static_trips_of(discovery: Discovery, wait_line: int) -> int | None:
    return next((s.completion.loop_trips for s in discovery.sites
                 if s.kind in PROBE_KINDS and s.completion.consumer_wait_line == wait_line), None)


def check_static_trips(discovery: Discovery, wait_lines, trips: dict, iterations: int) -> None:
    """A traced loop whose trip count discovery found to be the same in every CTA must show exactly
    that count (at most ``iterations``) in every CTA; :class:`ProbeError` naming the CTA otherwise."""
    for j, line in enumerate(wait_lines):
        static = _static_trips_of(discovery, line)
        if static is None:
            continue
        want = min(static, iterations)
        for c, lp, t in zip(trips["cta"], trips["loop"], trips["trips"]):
            if lp == j and t != want:
                raise ProbeError(f"the traced reference's CTA {c} ran {t} trip(s) of loop {j} (wait at TTGIR line "
                                 f"{line}), whose bounds give {want} in every CTA")


def no_wait_note(discovery: Discovery) -> str:
    kinds = sorted({s.kind for s in discovery.sites})
    return (f"none: kernel {discovery.kernel!r} has no pipelined async op with a consumer wait in a loop (its async "
            f"sites: {', '.join(kinds) or 'none'}), so no iteration wait is traced")
