"""Forced-wait probes: a TTGIR variant that waits for one TMA load's completion right after issuing it,
in one logical iteration only, and timestamps issue and completion.

A TMA load signals an mbarrier shared with the other loads of its pipeline stage (one
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
Every other iteration runs exactly the reference code. The variant is a new program version
linked to its origin (``origin_hash``) and to the op ID; collection effects: ``forces_completion``,
``perturbs_timing``.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from .async_sites import TMA_LOAD, Discovery, UnsupportedOpError, barrier_index, tma_parts
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
from .ttgir_module import parse_module, text_name

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

    Raises :class:`ProbeError` naming the op for non-TMA sites, unknown iterations, or TTGIR whose
    shape differs from what discovery saw.
    """
    site = discovery.site(op)
    if site.kind != "tma_load":
        raise UnsupportedOpError(
            f"forced-wait probes support TMA loads ({TMA_LOAD}); site 0x{site.op_id:08x} is {site.op_name} "
            f"({site.kind}) at {site.source}. Valid probe sites: "
            + (", ".join(f"0x{s.op_id:08x} ({s.label})" for s in discovery.sites if s.kind == "tma_load") or "none"))
    if iteration not in site.iterations:
        raise ProbeError(f"iteration {iteration!r} is not served by op 0x{site.op_id:08x} ({site.label}); "
                         f"valid iterations: {site.iterations}")
    module = parse_module(ttgir)
    if module.func_name != discovery.kernel:
        raise ProbeError(f"TTGIR is for kernel {module.func_name!r}, discovery was for {discovery.kernel!r}")
    inst = next(i for i in site.instances if iteration in i.iterations)
    by_line = {o.line_no: o for o in module.ops}
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


# ---- traced reference: per-iteration consumer wait, for the join ------------------------------------
def make_iteration_trace(ttgir: str, discovery: Discovery) -> str:
    """The traced reference variant: around the consumer's ``wait_barrier`` of every loop trip,
    read ``%globaltimer`` before and after and store them (``iterations`` ``ArgusIterationWait``
    records per CTA: ``csrc/argus/argus_iteration_wait.h``) in the extra argument ``argus_probe_out``.

    This is the reference side of the join: for iteration i it says how long the consumer waited
    for iteration i's tiles in an unprobed run (observed), next to the probe's issue-to-completion
    latency of each load of iteration i (derived).
    """
    module = parse_module(ttgir)
    tma = [s for s in discovery.sites if s.kind == "tma_load" and s.completion.consumer_wait_line]
    if not tma:
        raise ProbeError(f"kernel {discovery.kernel!r} has no pipelined TMA load with a consumer wait to trace")
    wait = module.op_at_line(tma[0].completion.consumer_wait_line)
    loop = module.loop_of(wait)
    words = ITERATION_WAIT_WORDS * discovery.iterations
    begin_w, end_w = word(ITERATION_WAIT_DTYPE, "begin_ns"), word(ITERATION_WAIT_DTYPE, "end_ns")
    lines = lines_with_pointer_arg(module, PROBE_ARG)
    first = module.ops[0]
    fi = _indent(first.text)
    setup = cta_slice_lines(fi, "argus", PROBE_ARG, words) + [
        f"{fi}%argus_two = arith.constant {ITERATION_WAIT_WORDS} : i32",
        f"{fi}%argus_one = arith.constant {end_w - begin_w} : i32",
        f"{fi}%argus_niter = arith.constant {discovery.iterations} : i32",
    ]
    ind, loc = _indent(wait.text), _loc_suffix(wait.text)

    def timer(name: str) -> str:
        return special_reg_line(ind, name, "%globaltimer", loc)

    trip_lines, trip = trip_index_lines(ind, "argus", loop, loc)
    # off0: the trip's begin_ns word (its record's first word, plus begin's position in the record)
    off0_lines = [f"{ind}%argus_off0 = arith.muli {trip}, %argus_two : i32{loc}"]
    if begin_w:
        off0_lines = [f"{ind}%argus_offr = arith.muli {trip}, %argus_two : i32{loc}",
                      f"{ind}%argus_offb = arith.constant {begin_w} : i32{loc}",
                      f"{ind}%argus_off0 = arith.addi %argus_offr, %argus_offb : i32{loc}"]
    before = trip_lines + [f"{ind}%argus_in = arith.cmpi slt, {trip}, %argus_niter : i32{loc}"] + off0_lines + [
        f"{ind}%argus_off1 = arith.addi %argus_off0, %argus_one : i32{loc}",
        f"{ind}%argus_q0 = tt.addptr %argus_p0, %argus_off0 : !tt.ptr<i64>, i32{loc}",
        f"{ind}%argus_q1 = tt.addptr %argus_p0, %argus_off1 : !tt.ptr<i64>, i32{loc}",
        timer("%argus_w0"),
    ]
    after = [timer("%argus_w1"),
             f"{ind}tt.store %argus_q0, %argus_w0, %argus_in : !tt.ptr<i64>{loc}",
             f"{ind}tt.store %argus_q1, %argus_w1, %argus_in : !tt.ptr<i64>{loc}"]
    out = []
    for i, text in enumerate(lines):
        if i == wait.line_no - 1:
            out += before + [text] + after
            continue
        if i == first.line_no - 1:
            out += setup
        out.append(text)
    return checked_edit("\n".join(out) + "\n", module, "traced reference")


# ---- synthesis: join probes with the traced reference by (op ID, iteration) ---------------------------
def probe_latencies(buffer, n_ctas: int) -> dict:
    """Issue-to-completion latency of one probe from its ``argus_probe_out`` buffer (``n_ctas``
    ``ArgusProbeRecord``): median / min / max over CTAs, in ns (``%globaltimer``) and cycles (``%clock64``)."""
    import numpy as np

    rec = records(buffer, PROBE_RECORD_DTYPE, n_ctas)[:, 0]
    written = (rec["issue_ns"] != 0) & (rec["complete_ns"] >= rec["issue_ns"])
    if not written.all():
        raise ProbeError(f"{int((~written).sum())} of {n_ctas} CTAs did not record the probe "
                         "(the selected instance never ran, or timestamps went backwards)")
    ns = rec["complete_ns"] - rec["issue_ns"]
    cyc = rec["complete_cycles"] - rec["issue_cycles"]
    return {"ctas": n_ctas, "latency_ns_median": float(np.median(ns)), "latency_ns_min": int(ns.min()),
            "latency_ns_max": int(ns.max()), "latency_cycles_median": float(np.median(cyc))}


def op_events_document(buffer, n_ctas: int, op_id: int, iteration: int) -> dict:
    """``argus.op_events/1`` evidence of one probe run: one row per CTA (issue and completion in ns)."""
    rec = records(buffer, PROBE_RECORD_DTYPE, n_ctas)[:, 0]
    probe_latencies(buffer, n_ctas)  # raises if a CTA did not record
    return {"format": "argus.op_events/1", "clock": "ns", "columns": {
        "op_id": [f"0x{op_id:08x}"] * n_ctas, "iteration": [iteration] * n_ctas,
        "issue": rec["issue_ns"].tolist(), "complete": rec["complete_ns"].tolist(),
        "issue_cycles": rec["issue_cycles"].tolist(), "complete_cycles": rec["complete_cycles"].tolist(),
        "sm": rec["sm"].tolist(), "cta": list(range(n_ctas))}}


def iteration_waits(buffer, n_ctas: int, iterations: int) -> dict[int, float]:
    """Median over CTAs of the consumer's wait (ns) per iteration, from the traced reference buffer."""
    import numpy as np

    rec = records(buffer, ITERATION_WAIT_DTYPE, n_ctas, iterations)
    if (rec["begin_ns"] == 0).any():
        raise ProbeError("the traced reference did not record every (CTA, iteration) wait")
    waits = rec["end_ns"] - rec["begin_ns"]
    return {i: float(np.median(waits[:, i])) for i in range(iterations)}


def iteration_waits_document(buffer, n_ctas: int, iterations: int, *, wait: str = "", launch: int = 0) -> dict:
    """``argus.iteration_waits/1`` evidence of one traced-reference launch: one row per (CTA, iteration),
    begin and end of the consumer's wait in ns (``%globaltimer``, one clock within the run)."""
    import numpy as np

    rec = records(buffer, ITERATION_WAIT_DTYPE, n_ctas, iterations)
    missing = rec["begin_ns"] == 0
    if missing.any():
        cta, it = (int(x[0]) for x in np.nonzero(missing))
        raise ProbeError(f"the traced reference did not record {int(missing.sum())} of {missing.size} "
                         f"(CTA, iteration) waits (first: CTA {cta}, iteration {it})")
    cta, it = np.meshgrid(np.arange(n_ctas), np.arange(iterations), indexing="ij")
    return {"format": "argus.iteration_waits/1", "clock": "ns", "wait": wait, "columns": {
        "cta": cta.ravel().tolist(), "iteration": it.ravel().tolist(),
        "begin": rec["begin_ns"].ravel().tolist(), "end": rec["end_ns"].ravel().tolist(),
        "launch": [launch] * (n_ctas * iterations)}}


def join_probes(discovery: Discovery, probes: dict[tuple[int, int], dict], reference_waits: dict[int, float] | None):
    """Rows keyed by (op ID, iteration): the probe's latency (derived) joined with the traced
    reference's consumer wait for the *same* iteration (observed). No timestamps are compared across
    runs: each number is a difference of two timestamps taken in one run."""
    rows = []
    for (op_id, it), lat in sorted(probes.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        site = discovery.site(op_id)
        rows.append({
            "op_id": f"0x{op_id:08x}", "label": site.label, "iteration": it,
            "slot": site.completion.slot_by_iteration.get(it), "phase": site.completion.phase_by_iteration.get(it),
            "latency_ns": lat["latency_ns_median"], "latency_cycles": lat["latency_cycles_median"],
            "qualification": "derived",
            "reference_wait_ns": None if reference_waits is None else reference_waits.get(it),
            "reference_qualification": None if reference_waits is None else "observed",
        })
    return rows


# ---- collection on the GPU (for a Triton-aware Collect) -------------------------------------------------
def collect_triton_probe(program, probe_ttgir: Path, workdir: Path, *, repeats: int = 3, seed: int | None = None) -> dict:
    """Run one probe variant of a Triton program on the current GPU and return its evidence.

    The kernel module named by ``program.launch["module"]`` provides ``make_inputs(seed)`` (fresh
    random inputs, outputs poisoned), ``run(compiled, inputs, probe_out=None)`` (returns the output
    tensor), ``n_ctas()`` and ``reference(a, b)``. The reference TTGIR (the base program's) runs first
    on the same inputs and is checked against ``reference`` (:data:`.triton_kernel_check.REFERENCE_REL_TOL`);
    every probe launch must reproduce its output bit for bit (a forced wait changes timing, not
    results), else :class:`ProbeError`. The first probe launch loads the module and is not evidence.
    Returns ``{"op_events": doc}`` with all timed launches' rows.
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
    cols, rel = timed_variant_columns(
        mod, ref, probe, WORDS_PER_CTA, f"probe 0x{op_id:08x}@{iteration}", seed, repeats,
        lambda out, launch, n: op_events_document(out, n, op_id, iteration))
    return {"op_events": {"format": "argus.op_events/1", "clock": "ns", "columns": cols, "launches": repeats,
                          "reference_rel_error": rel, "jit_check": jit}}


def collect_triton_reference(program, workdir: Path, *, repeats: int = 1, seed: int | None = None) -> dict:
    """Run the traced reference (:func:`make_iteration_trace`) of a Triton program on the current GPU.

    The plain reference TTGIR runs first on fresh random inputs and is checked against the module's
    PyTorch ``reference`` (:data:`.triton_kernel_check.REFERENCE_REL_TOL`); every traced launch must reproduce
    its output bit for bit (the timer reads change timing, not results), else :class:`ProbeError`.
    The first traced launch loads the module and is not evidence. Returns the
    ``argus.iteration_waits/1`` document of all timed launches.
    """
    from .async_sites import discover
    from .jit_equivalence import check_against_jit
    from .program import program_compiled, program_ttgir

    mod = _kernel_module(program)
    ttgir, iterations = program_ttgir(program)
    d = discover(ttgir, None, iterations=iterations)
    if not any(s.kind == "tma_load" and s.completion.consumer_wait_line for s in d.sites):
        # nothing to time (a kernel without pipelined TMA loads): an empty, explained answer, so that
        # the query's other signals are not lost with it
        return {"format": "argus.iteration_waits/1", "clock": "ns", "wait": no_tma_wait_note(d),
                "columns": {k: [] for k in ("cta", "iteration", "begin", "end", "launch")}, "launches": 0,
                "reference_rel_error": None, "jit_check": check_against_jit(program, mod)}
    traced_text = make_iteration_trace(ttgir, d)
    wait = next(s for s in d.sites if s.kind == "tma_load" and s.completion.consumer_wait_line)
    what = (f"consumer wait_barrier (TTGIR line {wait.completion.consumer_wait_line}) of {d.kernel}'s "
            f"pipelined TMA loads, per K-loop iteration")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ref = program_compiled(program)
    traced = program_variant(program, traced_text, workdir, "traced_reference")
    jit = check_against_jit(program, mod)
    cols, rel = timed_variant_columns(
        mod, ref, traced, 2 * iterations, "the traced reference", seed, repeats,
        lambda out, launch, n: iteration_waits_document(out, n, iterations, wait=what, launch=launch))
    return {"format": "argus.iteration_waits/1", "clock": "ns", "wait": what, "columns": cols, "launches": repeats,
            "reference_rel_error": rel, "jit_check": jit}


def no_tma_wait_note(discovery: Discovery) -> str:
    kinds = sorted({s.kind for s in discovery.sites})
    return (f"none: kernel {discovery.kernel!r} has no pipelined TMA load with a consumer wait (its async sites: "
            f"{', '.join(kinds) or 'none'}), so no iteration wait is traced and no forced-wait probe is built")
