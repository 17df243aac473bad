"""Region tracing for Triton kernels: a TTGIR variant in which every Argus marker also records a timestamp.

The marker-only build (:mod:`argus_rt.triton_regions`) is left as it is: its markers are PMTRIG words
only, which is what the PC-to-region map reads. This module makes a *separate* traced variant from the
same TTGIR: right after each marker op (``tt.elementwise_inline_asm`` carrying ``/* argus:begin|end
<name> */``) it reads ``%globaltimer`` and stores ``(tag, ns)`` into an extra int64 kernel argument
``argus_region_out``, where ``tag = kind << 32 | region_id`` (kind 1 = begin, 2 = end).

Granularity: **per CTA**, not per warp. A scalar ``tt.store`` in TTGIR is lowered by Triton to a store
from one thread of the CTA, so each record is that one thread's (warp 0's) timer reading; a per-warp
record would need a per-warp tensor store, which this transform does not build. The ``warp`` column of
the published intervals is therefore always 0.

Buffer layout, per CTA (``words_per_cta`` int64 words, CTA index linearised as x + nx * (y + ny * z)),
defined in ``csrc/argus/argus_region_trace.h`` and mirrored in :mod:`argus_rt.kinds.triton.layout`::

    ArgusRegionTraceHeader   sm_plus_one: SM id + 1 (0 means the CTA recorded nothing)
    ArgusRegionTraceSlot[n]  tag (0: slot not reached), ns (%globaltimer)

Slots are static: every marker site outside a loop owns one slot, every marker site inside an
``scf.for`` owns ``iterations`` slots indexed by the trip ``(iv - lb) / step``, computed at run time
from the loop's own SSA bounds, so a loop with a run-time lower bound (causal attention) is traced
too (stores beyond ``iterations`` trips are masked off, and the decoder reports the loop as
incomplete only if it finds a half-written slot). Sites in nested loops or in ``scf.while`` are
refused. A region marked in a ``@triton.jit`` helper has one marker site per call site (each call
is inlined), so each call's occurrence is recorded and decoded on its own. Because slots are static, the
decoder orders a CTA's records by program order (site position, trip), not by timestamps, so two
markers within one timer tick still pair correctly.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ...trace.layout import COORD_NONE  # same "no coordinate" value as the CUDA trace
from .layout import (
    REGION_TRACE_HEADER_DTYPE,
    REGION_TRACE_HEADER_WORDS,
    REGION_TRACE_KIND_SHIFT,
    REGION_TRACE_KINDS,
    REGION_TRACE_SLOT_DTYPE,
    REGION_TRACE_SLOT_WORDS,
    records,
    word,
)
from .ttgir_edit import (
    SMID_ASM,
    checked_edit,
    cta_slice_lines,
    i64_asm_line,
    lines_with_pointer_arg,
    special_reg_line,
    trip_index_lines,
)
from .ttgir_edit import indent as _indent
from .ttgir_edit import loc_suffix as _loc_suffix
from .ttgir_module import Module, parse_module
from .ttgir_regions import markers

REGION_ARG = "%argus_region_out"
KIND_CODES = REGION_TRACE_KINDS
HEADER_WORDS = REGION_TRACE_HEADER_WORDS
WORDS_PER_RECORD = REGION_TRACE_SLOT_WORDS
_TAG_WORD, _NS_WORD = word(REGION_TRACE_SLOT_DTYPE, "tag"), word(REGION_TRACE_SLOT_DTYPE, "ns")


class RegionTraceError(ValueError):
    """A traced variant that cannot be built or a buffer that cannot be decoded; the message says which
    marker, CTA or slot and what was expected."""


@dataclass(frozen=True)
class MarkerSite:
    """One marker op of the TTGIR and the slots it records into."""

    kind: str  # "begin" | "end"
    name: str  # qualified region name
    region_id: int
    ttgir_line: int  # 1-based line of the marker op
    loop_line: int | None  # line of the enclosing scf.for, None at function level
    first_slot: int
    slots: int  # 1, or the number of traced trips for a site inside a loop

    @property
    def tag(self) -> int:
        return (KIND_CODES[self.kind] << REGION_TRACE_KIND_SHIFT) | self.region_id

    def order_key(self, trip: int) -> tuple[int, int, int]:
        """Program order of (site, trip): a loop body's sites run trip by trip at the loop's position."""
        if self.loop_line is None:
            return (self.ttgir_line, 0, 0)
        return (self.loop_line, trip, self.ttgir_line)


@dataclass
class TracedRegionVariant:
    """The traced TTGIR of one program version and the static slot table needed to decode its buffer."""

    origin_hash: str
    ttgir: str
    sites: list[MarkerSite]
    iterations: int
    notes: list[str] = field(default_factory=list)

    @property
    def slots(self) -> int:
        return sum(s.slots for s in self.sites)

    @property
    def words_per_cta(self) -> int:
        return HEADER_WORDS + WORDS_PER_RECORD * self.slots

    def descriptor(self) -> dict:
        """JSON-able description (no TTGIR text): what the buffer holds and how to decode it."""
        return {"origin_hash": self.origin_hash, "variant_hash": hashlib.sha256(self.ttgir.encode()).hexdigest(),
                "arg": {"name": REGION_ARG.lstrip("%"), "dtype": "int64", "words_per_cta": self.words_per_cta},
                "granularity": "cta", "clock": "ns", "iterations": self.iterations,
                "sites": [s.__dict__ for s in self.sites]}


def marker_sites(module: Module, iterations: int) -> list[MarkerSite]:
    """Every Argus marker op of ``module``, in TTGIR order, with its slots (see the module docstring)."""
    sites = []
    slot = 0
    for mk in markers(module):
        op = mk.op
        if mk.words[0] != 0xA500 | KIND_CODES[mk.kind]:
            raise RegionTraceError(f"TTGIR line {op.line_no}: marker word 0x{mk.words[0]:04x} does not match "
                                   f"its kind {mk.kind!r}")
        loop = module.loop_of(op)
        if loop is not None and loop.op.loop is not None:
            raise RegionTraceError(f"TTGIR line {op.line_no}: marker {mk.kind} {mk.name!r} sits in "
                                   "a nested scf.for; only markers at function level or in one loop level are traced")
        parent = op.parent
        while parent is not None:
            if module.ops[parent].name == "scf.while":
                raise RegionTraceError(f"TTGIR line {op.line_no}: marker {mk.kind} {mk.name!r} sits in an scf.while "
                                       f"(line {module.ops[parent].line_no}); only scf.for trips are indexed")
            parent = module.ops[parent].parent
        n = 1 if loop is None else iterations
        sites.append(MarkerSite(mk.kind, mk.name, mk.region_id, op.line_no,
                                None if loop is None else loop.op.line_no, slot, n))
        slot += n
    return sites


def make_region_trace(ttgir: str, iterations: int) -> TracedRegionVariant:
    """Build the traced variant of ``ttgir``: each marker also stores ``(tag, %globaltimer)``.

    ``iterations`` is how many trips of a marker-carrying loop get their own slots (the program's
    logical loop iterations). Raises :class:`RegionTraceError` for TTGIR without markers or with
    markers in nested loops or ``scf.while``.
    """
    if not isinstance(iterations, int) or iterations < 1:
        raise RegionTraceError(f"iterations must be a positive int, got {iterations!r}")
    module = parse_module(ttgir)
    sites = marker_sites(module, iterations)
    if not sites:
        raise RegionTraceError(f"kernel {module.func_name!r} has no Argus markers (argus.begin/end) to trace")
    words = HEADER_WORDS + WORDS_PER_RECORD * sum(s.slots for s in sites)
    lines = lines_with_pointer_arg(module, REGION_ARG)
    first = module.ops[0]
    fi = _indent(first.text)
    setup = cta_slice_lines(fi, "argus_rt", REGION_ARG, words) + [
        f"{fi}%argus_rt_one64 = arith.constant 1 : i64",
        i64_asm_line(fi, "%argus_rt_sm", SMID_ASM),
        f"{fi}%argus_rt_sm1 = arith.addi %argus_rt_sm, %argus_rt_one64 : i64",
        f"{fi}tt.store %argus_rt_p0, %argus_rt_sm1 : !tt.ptr<i64>",  # the header's one word: sm_plus_one
        f"{fi}%argus_rt_niter = arith.constant {iterations} : i32",
    ]
    after: dict[int, list[str]] = {}
    for k, s in enumerate(sites):
        op = module.op_at_line(s.ttgir_line)
        ind, loc = _indent(op.text), _loc_suffix(op.text)
        v = f"%argus_rt_s{k}"
        block = [f"{ind}{v}_tag = arith.constant {s.tag} : i64{loc}",
                 special_reg_line(ind, f"{v}_ns", "%globaltimer", loc)]
        word0 = HEADER_WORDS + WORDS_PER_RECORD * s.first_slot
        if s.loop_line is None:
            block += [f"{ind}{v}_o0 = arith.constant {word0 + _TAG_WORD} : i32{loc}",
                      f"{ind}{v}_o1 = arith.constant {word0 + _NS_WORD} : i32{loc}"]
            mask = ""
        else:
            trip_lines, trip = trip_index_lines(ind, f"argus_rt_s{k}", module.loop_of(op), loc)
            block += trip_lines + [
                      f"{ind}{v}_in = arith.cmpi slt, {trip}, %argus_rt_niter : i32{loc}",
                      f"{ind}{v}_two = arith.constant {WORDS_PER_RECORD} : i32{loc}",
                      f"{ind}{v}_w0 = arith.constant {word0 + _TAG_WORD} : i32{loc}",
                      f"{ind}{v}_tw = arith.muli {trip}, {v}_two : i32{loc}",
                      f"{ind}{v}_o0 = arith.addi {v}_w0, {v}_tw : i32{loc}",
                      f"{ind}{v}_c1 = arith.constant {_NS_WORD - _TAG_WORD} : i32{loc}",
                      f"{ind}{v}_o1 = arith.addi {v}_o0, {v}_c1 : i32{loc}"]
            mask = f", {v}_in"
        block += [f"{ind}{v}_q0 = tt.addptr %argus_rt_p0, {v}_o0 : !tt.ptr<i64>, i32{loc}",
                  f"{ind}{v}_q1 = tt.addptr %argus_rt_p0, {v}_o1 : !tt.ptr<i64>, i32{loc}",
                  f"{ind}tt.store {v}_q0, {v}_tag{mask} : !tt.ptr<i64>{loc}",
                  f"{ind}tt.store {v}_q1, {v}_ns{mask} : !tt.ptr<i64>{loc}"]
        after[s.ttgir_line - 1] = block
    out = []
    for i, text in enumerate(lines):
        if i == first.line_no - 1:
            out += setup
        out.append(text)
        out += after.get(i, [])
    notes = [f"{len(sites)} marker sites, {sum(s.slots for s in sites)} slots, {words} int64 words per CTA",
             "granularity: per CTA (one thread's %globaltimer per marker)"]
    text = checked_edit("\n".join(out) + "\n", module, "region trace")
    return TracedRegionVariant(hashlib.sha256(ttgir.encode()).hexdigest(), text, sites, iterations, notes)


def decode_region_buffer(buffer, n_ctas: int, sites: list[MarkerSite], *, launch: int = 0) -> dict:
    """Columns of ``argus.region_intervals/1`` from one traced launch's buffer (int64, ``n_ctas`` x
    ``words_per_cta``): one row per region occurrence per CTA, start/end in ns.

    Records of each CTA are paired begin/end in program order (site position, trip) with a stack;
    :class:`RegionTraceError` names the CTA and slot of a record with a wrong tag, an end without its
    begin, a region left open, or an end earlier than its begin.
    """
    import numpy as np

    n_slots = sum(s.slots for s in sites)
    words = np.asarray(buffer, dtype=np.int64)
    per_cta = HEADER_WORDS + WORDS_PER_RECORD * n_slots
    if words.size != n_ctas * per_cta:
        raise RegionTraceError(f"buffer has {words.size} words; {n_ctas} CTAs x {per_cta} words expected")
    words = words.reshape(n_ctas, per_cta)
    headers = records(words[:, :HEADER_WORDS], REGION_TRACE_HEADER_DTYPE, n_ctas)[:, 0]
    slots = records(words[:, HEADER_WORDS:], REGION_TRACE_SLOT_DTYPE, n_ctas, n_slots)
    order = sorted(((s.order_key(t), s, t) for s in sites for t in range(s.slots)), key=lambda x: x[0])
    cols: dict[str, list] = {k: [] for k in ("region_id", "start", "end", "sm", "cta", "warp", "coord", "launch")}
    for cta in range(n_ctas):
        if headers["sm_plus_one"][cta] == 0:
            raise RegionTraceError(f"CTA {cta} recorded nothing (its header word is 0): the traced kernel did not run "
                                   "it, or the buffer is not this variant's")
        sm = int(headers["sm_plus_one"][cta]) - 1
        stack: list[tuple[MarkerSite, int, int]] = []
        for _key, s, trip in order:
            slot = slots[cta, s.first_slot + trip]
            tag, ns = int(slot["tag"]), int(slot["ns"])
            if tag == 0:
                continue  # a loop trip beyond the trips this launch ran
            if tag != s.tag:
                raise RegionTraceError(f"CTA {cta} slot {s.first_slot + trip}: tag 0x{tag:x}, expected 0x{s.tag:x} "
                                       f"({s.kind} {s.name})")
            coord = trip if s.loop_line is not None else COORD_NONE
            if s.kind == "begin":
                stack.append((s, coord, ns))
                continue
            if not stack or stack[-1][0].region_id != s.region_id:
                open_name = stack[-1][0].name if stack else "none"
                raise RegionTraceError(f"CTA {cta}: end of {s.name!r} (trip {trip}) but the open region is {open_name}")
            b, bcoord, start = stack.pop()
            if ns < start:
                raise RegionTraceError(f"CTA {cta}: {s.name!r} ends at {ns} ns before it begins at {start} ns")
            for k, v in (("region_id", s.region_id), ("start", start), ("end", ns), ("sm", sm), ("cta", cta),
                         ("warp", 0), ("coord", bcoord), ("launch", launch)):
                cols[k].append(v)
        if stack:
            raise RegionTraceError(f"CTA {cta}: region(s) {[b.name for b, _, _ in stack]} begun but never ended")
    return cols


def region_intervals_document(columns: dict, *, launches: int, reference_rel_error: float | None = None,
                              notes: list[str] | None = None) -> dict:
    """``argus.region_intervals/1`` in the same shape the CUDA trace adapter publishes."""
    return {"format": "argus.region_intervals/1", "clock": "ns", "columns": columns, "coord_kind": "iteration",
            "launches": launches, "dropped": 0, "incomplete": False, "problems": [], "granularity": "cta",
            "reference_check": {"max_rel_err": reference_rel_error}, "notes": list(notes or [])}


def collect_triton_region_trace(program, workdir, *, repeats: int = 1, seed: int | None = None) -> dict:
    """Run the region-traced variant of a Triton program on the current GPU; return its
    ``argus.region_intervals/1`` document (all timed launches; the first launch loads the module and
    is not evidence).

    The plain reference TTGIR runs first on fresh random inputs and is checked against the module's
    PyTorch ``reference`` (relative error <= :data:`argus_rt.kinds.triton.kernel_check.REFERENCE_REL_TOL`);
    every traced launch must then reproduce that output bit for bit (timer reads and stores change
    timing, not arithmetic), else :class:`RegionTraceError`. Before that, the kernel is checked to be
    the JIT's (:func:`argus_rt.kinds.triton.jit_equivalence.check_against_jit`; ``doc["jit_check"]``).
    """
    from pathlib import Path

    from .jit_equivalence import check_against_jit
    from .kernel_check import _kernel_module, program_variant, timed_variant_columns
    from .program import program_compiled, program_ttgir

    if repeats < 1:
        raise RegionTraceError(f"repeats must be >= 1, got {repeats!r}")
    mod = _kernel_module(program)
    ttgir, iterations = program_ttgir(program)
    variant = make_region_trace(ttgir, iterations)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ref = program_compiled(program)
    traced = program_variant(program, variant.ttgir, workdir, "region_traced")
    jit = check_against_jit(program, mod)
    cols, rel = timed_variant_columns(
        mod, ref, traced, variant.words_per_cta, "the region-traced variant", seed, repeats,
        lambda out, launch, n: {"columns": decode_region_buffer(out, n, variant.sites, launch=launch)},
        error=RegionTraceError)
    doc = region_intervals_document(cols, launches=repeats, reference_rel_error=rel, notes=variant.notes)
    doc["jit_check"] = jit
    return doc
