"""Discovery analysis: the asynchronous operation sites inside a region of a Triton kernel's TTGIR.

Output: every supported async site in the region's subtree, each with

* a stable **op ID**: a 32-bit hash of (kernel, region, kind, source call stack relative to the
  kernel's ``def`` line). Pipelining clones a load (prologue copies + the in-loop copy); all clones
  share the source position, so they are instances of one logical op with one ID. Recompiling the
  same program version gives the same IDs. An op inlined from a helper has one site per call site.
* its **completion condition**: for a TMA load the mbarrier it signals (an element of a barrier
  array, or a single barrier straight from ``ttg.local_alloc``), the ``barrier_expect`` group it
  belongs to (bytes), and, per logical iteration, the barrier slot and phase parity the consumer
  waits on; for WGMMA the ``warp_group_dot_wait`` that retires it; for cp.async its commit group
  and the ``async_wait`` that consumes the group's token.
* its **logical iterations**: software pipelining with ``num_stages=S`` peels the first S-1
  iterations' loads into the prologue, and the in-loop load of trip t fetches iteration t+S-1.
  Discovery does not assume this: it *interprets* the loop's scalar integer ops trip by trip
  (:mod:`argus_rt.kinds.triton.loop_trips`) and checks that the slot each producer instance signals
  is the slot the consumer waits on for the iteration it is mapped to. A mismatch is an error.
  A loop's trips may differ between CTAs (causal attention: the key loop below the diagonal runs
  ``2 * program_id`` trips). ``iterations`` (the program's ``launch.iterations``) bounds every loop;
  a loop whose trip count is the same in every CTA (:func:`.loop_trips.static_trip_count`, e.g. the
  diagonal loop's 2) serves only its own trips, so no probe is planned for a trip no CTA runs. Where
  the count depends on the CTA, discovery cannot know it on the CPU: the traced reference records
  each CTA's trips, and synthesis reports an iteration no CTA runs as not reached.

Every family found is a probe candidate (:data:`PROBE_KINDS`; the probes are
:mod:`argus_rt.kinds.triton.probes`). Each in-loop site names the wait inside its loop that the traced
reference times per trip (``Completion.consumer_wait_line``): the TMA consumer's ``wait_barrier``, the
``async_wait`` of the cp.async group, the dot's ``warp_group_dot_wait``. For cp.async the pipeline
mapping (prologue copy k fetches iteration k, the loop copy of trip t iteration t + prologue copies)
is checked against the shared-memory ring: each copy must write the slot the loop reads in the trip
that consumes its iteration.

Region membership is decided by source call stack (:mod:`argus_rt.kinds.triton.ttgir_regions`).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field

from ...errors import ArgusInputError
from ...regions import RegionError, RegionTree
from .loop_trips import simulate_loop, static_trip_count
from .ttgir_locations import Location, SourceLoc
from .ttgir_module import ForLoop, Module, Op, element_bytes, memdesc_shape, parse_module, text_name
from .ttgir_regions import HELPER_REGIONS, RegionSpan, innermost, region_spans

TMA_LOAD = "ttng.async_tma_copy_global_to_local"
WGMMA = "ttng.warp_group_dot"
WGMMA_WAIT = "ttng.warp_group_dot_wait"
CP_ASYNC = "ttg.async_copy_global_to_local"
CP_ASYNC_COMMIT = "ttg.async_commit_group"
CP_ASYNC_WAIT = "ttg.async_wait"
BARRIER_ALLOC = "ttg.local_alloc"

SITE_KINDS = {TMA_LOAD: "tma_load", WGMMA: "wgmma", CP_ASYNC: "cp_async"}
# The families a forced-wait probe can be built for (:mod:`.probes`): every discovered family.
PROBE_KINDS = ("tma_load", "cp_async", "wgmma")
# Async ops Argus recognises but cannot yet give a completion condition for.
UNSUPPORTED_ASYNC = {
    "ttng.async_tma_copy_local_to_global": "TMA store (completion is a bulk-group wait, not yet modelled)",
    "ttng.async_tma_gather": "TMA gather",
    "ttng.async_tma_scatter": "TMA scatter",
    "ttng.async_tma_reduce": "TMA reduce",
    "ttng.tc_gen5_mma": "Blackwell tcgen05 MMA",
    "ttng.async_tma_prefetch": "TMA prefetch",
}


class DiscoveryError(ArgusInputError):
    """Discovery could not analyse the region; the message names the op and TTGIR line."""


class UnsupportedOpError(DiscoveryError):
    """An async op Argus does not support was found where a supported one was required."""


@dataclass
class Instance:
    """One physical copy of a logical op in the TTGIR, mapped to the logical iteration it serves."""

    ttgir_line: int
    placement: str  # "prologue" (before the loop), "loop" (inside it), "straight" (no loop involved)
    iterations: list[int]  # logical iterations served (a loop instance serves several, one per trip)
    trip_offset: int = 0  # logical iteration = trip + trip_offset for loop instances


@dataclass
class Completion:
    """How the completion of one op instance is observed."""

    kind: str  # "mbarrier", "wgmma_wait", "cp_async_group"
    # mbarrier: the shared barrier array, the expect group and per-iteration slot/phase
    barrier_alloc: str | None = None
    barrier_slots: int | None = None
    expect_bytes: int | None = None
    op_bytes: int | None = None
    group_ops: int | None = None  # how many copies signal the same barrier per stage
    slot_by_iteration: dict[int, int] = field(default_factory=dict)
    phase_by_iteration: dict[int, int] = field(default_factory=dict)
    # the wait inside the op's loop that the traced reference times for each trip (the join's
    # reference): the TMA consumer's wait_barrier, cp.async's async_wait, WGMMA's warp_group_dot_wait;
    # None for an op whose completion is waited for outside any loop
    consumer_wait_line: int | None = None
    # wgmma / cp.async: the waiting op and its count argument (pendings / num: how many groups may
    # still be in flight when it returns; > 0 means the op stays in flight across a loop trip)
    wait_line: int | None = None
    wait_count: int | None = None
    commit_line: int | None = None
    # the trip count of the op's loop when it is the same in every CTA (None: varies per CTA or not
    # known on the CPU; the program's ``iterations`` bounds it); not set for ops outside loops
    loop_trips: int | None = None

    def describe(self, iteration: int | None = None) -> str:
        if self.kind == "mbarrier":
            base = f"mbarrier {self.barrier_alloc}[{self.barrier_slots} slots], expect {self.expect_bytes} B " \
                   f"({self.group_ops} loads, this one {self.op_bytes} B)"
            if iteration is not None and iteration in self.slot_by_iteration:
                base += f"; iteration {iteration}: slot {self.slot_by_iteration[iteration]}, " \
                        f"phase {self.phase_by_iteration[iteration]}"
            return base
        if self.kind == "wgmma_wait":
            return f"warp_group_dot_wait pendings={self.wait_count} (TTGIR line {self.wait_line})"
        return f"commit group (line {self.commit_line}) retired by async_wait num={self.wait_count} " \
               f"(line {self.wait_line})"


@dataclass
class Site:
    """One logical async operation in the region, with a stable op ID."""

    op_id: int
    kind: str  # "tma_load", "wgmma", "cp_async"
    op_name: str  # TTGIR op name
    region: str  # innermost region containing it
    source: SourceLoc  # outermost frame: the position in the kernel's body (a helper's call site)
    label: str  # the value name Triton kept ("a", "b", "acc")
    instances: list[Instance]
    completion: Completion
    call_stack: str = ""  # the full source call stack, "k.py:22:26 > k.py:8:36" for a helper's op
    call_site: str | None = None  # the call prefix of the region span it was found in (None: kernel body)

    @property
    def iterations(self) -> list[int]:
        return sorted({i for inst in self.instances for i in inst.iterations})

    def to_json(self) -> dict:
        d = asdict(self)
        d["source"] = str(self.source)
        d["op_id"] = f"0x{self.op_id:08x}"
        return d


@dataclass
class Discovery:
    """What discovery returns: the region, its subtree, its spans and the sites found in it."""

    kernel: str
    region: str
    region_tree: RegionTree
    sites: list[Site]
    iterations: int
    unsupported: list[str]
    spans: list[RegionSpan] = field(default_factory=list)
    helper_regions: str = HELPER_REGIONS

    def site(self, key: int | str) -> Site:
        """A site by op ID (int or ``0x...`` string) or label; raises naming the valid choices."""
        for s in self.sites:
            if key == s.op_id or (isinstance(key, str) and (key.lower() == f"0x{s.op_id:08x}" or key == s.label)):
                return s
        valid = ", ".join(f"0x{s.op_id:08x} ({s.kind} {s.label})" for s in self.sites) or "none"
        raise DiscoveryError(f"no site {key!r} in region {self.region!r}; valid: {valid}")

    def candidates(self, kind: str | None = None) -> list[tuple[Site, int]]:
        """All (site, logical iteration) pairs of one kind (None: every probed family,
        :data:`PROBE_KINDS`): the probe candidates."""
        kinds = PROBE_KINDS if kind is None else (kind,)
        return [(s, i) for s in self.sites if s.kind in kinds for i in s.iterations]


# ---- operands of the async ops, found by type (their operand order differs between releases) -------
def _is_barrier_type(t: str) -> bool:
    return t.startswith("!ttg.memdesc<") and "xi64" in t.split(",")[0]


def tma_parts(module: Module, op: Op) -> tuple[str, str, int]:
    """(barrier SSA, predicate SSA, bytes) of a TMA load."""
    bars = [n for n, t in zip(op.operands, op.operand_types) if _is_barrier_type(t)]
    bufs = [t for t in op.operand_types if t.startswith("!ttg.memdesc<") and not _is_barrier_type(t)]
    preds = [n for n, t in zip(op.operands, op.operand_types) if t == "i1"]
    if len(bars) != 1 or len(bufs) != 1 or not preds:
        raise DiscoveryError(f"{op}: expected one shared buffer, one mbarrier and a predicate among its operands; "
                             f"operand types: {op.operand_types}")
    dims, elem = memdesc_shape(bufs[0])
    size = element_bytes(elem)
    for d in dims:
        size *= d
    return bars[0], preds[-1], size


def barrier_index(module: Module, op: Op, barrier: str) -> tuple[str, str | None, int]:
    """(alloc SSA, index SSA or None for a single barrier, slots) of an mbarrier operand: an element
    ``ttg.memdesc_index %alloc[%idx]`` of a barrier array, or a barrier straight from ``ttg.local_alloc``."""
    d = module.def_of(barrier, op)
    if d.name == BARRIER_ALLOC:
        return barrier, None, 1
    if d.name != "ttg.memdesc_index":
        raise UnsupportedOpError(f"{op}: its mbarrier {barrier} comes from {d.name} (line {d.line_no}); Argus "
                                 "follows barriers through ttg.memdesc_index of a ttg.local_alloc, or straight "
                                 "from ttg.local_alloc")
    alloc, idx = d.operands[0], d.operands[1]
    a = module.def_of(alloc, d)
    if a.name != BARRIER_ALLOC:
        raise UnsupportedOpError(f"{op}: barrier array {alloc} is made by {a.name}, expected {BARRIER_ALLOC}")
    dims, _ = memdesc_shape(a.result_types[0])
    return alloc, idx, dims[0]


def _slot_value(module: Module, idx: str | None, env: dict | None = None) -> int | None:
    if idx is None:
        return 0
    if env is not None and idx in env:
        return env[idx]
    return module.constant_int(idx)


def _expect_for(module: Module, op: Op, barrier: str) -> tuple[Op, list[Op]]:
    """The barrier_expect that opens ``op``'s group and all TMA loads of that group (same barrier)."""
    expect = None
    for prev in reversed(module.ops[: op.index]):
        if prev.loop != op.loop or prev.block_depth != op.block_depth:
            continue
        if prev.name == "ttng.barrier_expect" and prev.operands and prev.operands[0] == barrier:
            expect = prev
            break
    if expect is None:
        raise UnsupportedOpError(f"{op}: no ttng.barrier_expect on its barrier {barrier} before it in the same block")
    end = next((o.index for o in module.ops[expect.index + 1:] if o.name == "ttng.barrier_expect"
                and o.operands and o.operands[0] == barrier), len(module.ops))
    group = [o for o in module.ops[expect.index + 1:end]
             if o.name == TMA_LOAD and o.loop == op.loop and o.block_depth == op.block_depth
             and tma_parts(module, o)[0] == barrier]
    return expect, group


def _consumer_wait(module: Module, loop: ForLoop, alloc: str) -> tuple[Op, str | None, str]:
    """The wait_barrier in the loop on a slot of ``alloc``: (op, slot SSA or None, phase SSA)."""
    for i in loop.body:
        op = module.ops[i]
        if op.name != "ttng.wait_barrier" or op.loop != loop.op.index:
            continue
        bar = op.operands[0]
        if bar == alloc:
            return op, None, op.operands[1]
        d = module.defs.get(bar)
        if d is not None and d.name == "ttg.memdesc_index" and d.operands[0] == alloc:
            return op, d.operands[1], op.operands[1]
    raise UnsupportedOpError(f"{loop.op}: no ttng.wait_barrier on barrier {alloc} inside the loop; "
                             "cannot recover the phase that signals completion")


def loop_iterations(module: Module, loop: ForLoop, iterations: int) -> tuple[int, int | None]:
    """(logical iterations ``loop`` can serve, its static trip count or None): the program's
    ``iterations``, lowered to the loop's own trip count when that is the same in every CTA."""
    static = static_trip_count(module, loop)
    return (iterations if static is None else min(iterations, static)), static


def _analyse_tma(module: Module, ops: list[Op], iterations: int) -> tuple[list[Instance], Completion]:
    first = ops[0]
    bar, _pred, nbytes = tma_parts(module, first)
    alloc, _idx, slots = barrier_index(module, first, bar)
    expect, group = _expect_for(module, first, bar)
    expect_bytes = module.int_attr(expect, "size")
    group_bytes = sum(tma_parts(module, o)[2] for o in group)
    if group_bytes != expect_bytes:
        raise DiscoveryError(f"{expect}: expects {expect_bytes} B but its loads carry {group_bytes} B; "
                             "the barrier group is not understood")
    completion = Completion("mbarrier", barrier_alloc=alloc, barrier_slots=slots, expect_bytes=expect_bytes,
                            op_bytes=nbytes, group_ops=len(group))
    in_loop = [o for o in ops if o.loop is not None]
    outside = [o for o in ops if o.loop is None]
    if not in_loop:
        insts = [Instance(o.line_no, "straight", [k]) for k, o in enumerate(outside)]
        for k, o in enumerate(outside):
            b, _, _ = tma_parts(module, o)
            _, idx, _ = barrier_index(module, o, b)
            completion.slot_by_iteration[k] = _slot_value(module, idx) or 0
            completion.phase_by_iteration[k] = 0
        return insts, completion
    loop_ids = {o.loop for o in in_loop}
    if len(loop_ids) != 1 or len(in_loop) != 1:
        raise UnsupportedOpError(f"{first}: one in-loop copy per logical op is supported; found {len(in_loop)} "
                                 f"copies in {len(loop_ids)} loop(s)")
    loop = module.loops[in_loop[0].loop]
    iterations, completion.loop_trips = loop_iterations(module, loop, iterations)
    prologue = [o for o in outside if o.index < loop.op.index]
    distance = len(prologue)
    wait_op, wait_slot, wait_phase = _consumer_wait(module, loop, alloc)
    completion.consumer_wait_line = wait_op.line_no
    trace = simulate_loop(module, loop, iterations)
    for t, env in enumerate(trace):
        slot, phase = _slot_value(module, wait_slot, env), _slot_value(module, wait_phase, env)
        if slot is None or phase is None:
            raise DiscoveryError(f"{wait_op}: slot/phase {wait_slot}/{wait_phase} is not computable from constants "
                                 "and iter_args")
        completion.slot_by_iteration[t] = slot
        completion.phase_by_iteration[t] = phase & 1
    instances = []
    for k, o in enumerate(prologue):
        b, _, _ = tma_parts(module, o)
        _, idx, _ = barrier_index(module, o, b)
        slot = _slot_value(module, idx)
        if k < iterations and slot != completion.slot_by_iteration[k]:
            raise DiscoveryError(f"{o}: prologue copy {k} signals slot {slot} but the consumer waits on slot "
                                 f"{completion.slot_by_iteration[k]} for iteration {k}; pipeline mapping unknown")
        instances.append(Instance(o.line_no, "prologue", [k] if k < iterations else []))
    loop_bar, _, _ = tma_parts(module, in_loop[0])
    _, loop_idx, _ = barrier_index(module, in_loop[0], loop_bar)
    served = []
    for t, env in enumerate(trace):
        j = t + distance
        if j >= iterations:
            break  # the copy is predicated off in the last trips (it would fetch past K)
        slot = _slot_value(module, loop_idx, env)
        if slot is None:
            raise DiscoveryError(f"{in_loop[0]}: its barrier slot {loop_idx} is not computable per trip")
        if slot != completion.slot_by_iteration[j]:
            raise DiscoveryError(f"{in_loop[0]}: trip {t} signals slot {slot} but iteration {j} is consumed from "
                                 f"slot {completion.slot_by_iteration[j]}; pipeline mapping unknown")
        served.append(j)
    instances.append(Instance(in_loop[0].line_no, "loop", served, trip_offset=distance))
    return instances, completion


def _analyse_wgmma(module: Module, ops: list[Op], iterations: int) -> tuple[list[Instance], Completion]:
    op = ops[0]
    if not op.results:
        raise UnsupportedOpError(f"{op}: a warp_group_dot without a result; its completion is unknown")
    # The wait that takes the dot's result retires it: right after it, or, when the accumulator is
    # carried around the loop (attention's P V), the next trip's wait on the iter_arg.
    direct = next((o for o in module.ops[op.index + 1:] if o.name == WGMMA_WAIT and op.results[0] in o.operands), None)
    wait = direct
    if wait is None:
        aliases = _carried_aliases(module, {op.results[0]})
        carried = [o for o in module.ops if o.name == WGMMA_WAIT and aliases & set(o.operands)]
        wait = next((o for o in carried if op.loop is not None and o.loop == op.loop), carried[0] if carried else None)
    if wait is None:
        raise UnsupportedOpError(f"{op}: no {WGMMA_WAIT} after it; its completion is unknown")
    pend = module.int_attr(wait, "pendings")
    placement = "loop" if op.loop is not None else "straight"
    trips = None
    if op.loop is not None:
        iterations, trips = loop_iterations(module, module.loops[op.loop], iterations)
    its = list(range(iterations)) if op.loop is not None else [0]
    in_loop_wait = op.loop is not None and wait.loop == op.loop
    return [Instance(op.line_no, placement, its)], Completion(
        "wgmma_wait", wait_line=wait.line_no, wait_count=pend, loop_trips=trips,
        consumer_wait_line=wait.line_no if in_loop_wait else None)


def _carried_aliases(module: Module, start: set[str]) -> set[str]:
    """``start`` and every loop iter_arg (and loop result) its values flow into through scf.for."""
    aliases = set(start)
    changed = True
    while changed:
        changed = False
        for loop in module.loops.values():
            pairs = list(zip(loop.iter_args, loop.inits))
            if loop.yield_op is not None:
                pairs += list(zip(loop.iter_args, loop.yield_op.operands))
                pairs += list(zip(loop.op.results, loop.yield_op.operands))
            for arg, src in pairs:
                if src in aliases and arg not in aliases:
                    aliases.add(arg)
                    changed = True
    return aliases


def _copy_slot(module: Module, op: Op) -> tuple[str, str | None] | None:
    """(buffer alloc SSA, slot index SSA) of a cp.async's destination ``ttg.memdesc_index %alloc[%i]``;
    None when the destination is not an element of a ``ttg.local_alloc`` ring."""
    dest = next((n for n, t in zip(op.operands, op.operand_types) if t.startswith("!ttg.memdesc<")), None)
    d = module.defs.get(dest) if dest else None
    if d is None or d.name != "ttg.memdesc_index" or len(d.operands) < 2:
        return None
    a = module.defs.get(d.operands[0])
    return (d.operands[0], d.operands[1]) if a is not None and a.name == BARRIER_ALLOC else None


def _check_cp_async_slots(module: Module, loop: ForLoop, prologue: list[Op], copy: Op, iterations: int) -> None:
    """The pipeline mapping discovery assumes (prologue copy k fetches iteration k, the loop copy of
    trip t iteration t + len(prologue)) checked against the shared-memory ring: the slot each copy
    writes must be the slot the loop reads in the trip that consumes that iteration. Checked where the
    ring's slots are computable (constants and iter_args); a mismatch is a :class:`DiscoveryError`."""
    mine = _copy_slot(module, copy)
    if mine is None:
        return
    alloc, write_idx = mine
    reads = [module.ops[i] for i in loop.body if module.ops[i].name == "ttg.memdesc_index"
             and module.ops[i].loop == loop.op.index and module.ops[i].operands[:1] == [alloc]
             and module.ops[i].operands[1] != write_idx]
    if len(reads) != 1:
        return  # no single read of the ring in the loop: nothing to check against
    read_idx = reads[0].operands[1]
    trace = simulate_loop(module, loop, iterations)
    read = [_slot_value(module, read_idx, env) for env in trace]
    distance = len(prologue)
    for k, o in enumerate(prologue[:iterations]):
        got = _copy_slot(module, o)
        slot = _slot_value(module, got[1]) if got and got[0] == alloc else None
        if slot is not None and read[k] is not None and slot != read[k]:
            raise DiscoveryError(f"{o}: prologue copy {k} writes slot {slot} of {text_name(alloc)} but the loop "
                                 f"reads iteration {k} from slot {read[k]}; pipeline mapping unknown")
    for t, env in enumerate(trace):
        j = t + distance
        if j >= iterations:
            break
        slot = _slot_value(module, write_idx, env)
        if slot is not None and read[j] is not None and slot != read[j]:
            raise DiscoveryError(f"{copy}: trip {t} writes slot {slot} of {text_name(alloc)} but iteration {j} is "
                                 f"read from slot {read[j]}; pipeline mapping unknown")


def _analyse_cp_async(module: Module, ops: list[Op], iterations: int) -> tuple[list[Instance], Completion]:
    first = ops[0]
    token = first.results[0] if first.results else None
    commit = next((o for o in module.ops[first.index + 1:] if o.name == CP_ASYNC_COMMIT and token in o.operands), None)
    if commit is None:
        raise UnsupportedOpError(f"{first}: its token {token} is never committed (no {CP_ASYNC_COMMIT})")
    aliases = _carried_aliases(module, set(commit.results))
    waits = [o for o in module.ops if o.name == CP_ASYNC_WAIT and aliases & set(o.operands)]
    wait = next((w for w in waits if w.loop is not None), waits[0] if waits else None)
    if wait is None:
        raise UnsupportedOpError(f"{first}: no {CP_ASYNC_WAIT} consumes its commit group {sorted(aliases)}; "
                                 "its completion is unknown")
    in_loop = [o for o in ops if o.loop is not None]
    prologue = [o for o in ops if o.loop is None]
    if len({o.loop for o in in_loop}) > 1 or len(in_loop) > 1:
        raise UnsupportedOpError(f"{first}: one in-loop copy per logical op is supported; found {len(in_loop)} "
                                 f"copies in {len({o.loop for o in in_loop})} loop(s)")
    trips = None
    consumer = None
    if in_loop:
        loop = module.loops[in_loop[0].loop]
        iterations, trips = loop_iterations(module, loop, iterations)
        prologue = [o for o in prologue if o.index < loop.op.index]
        _check_cp_async_slots(module, loop, prologue, in_loop[0], iterations)
        consumer = wait.line_no if wait.loop == loop.op.index else None
    instances = [Instance(o.line_no, "prologue", [k]) for k, o in enumerate(prologue) if k < iterations]
    if in_loop:
        instances.append(Instance(in_loop[0].line_no, "loop", list(range(len(prologue), iterations)),
                                  trip_offset=len(prologue)))
    return instances, Completion("cp_async_group", commit_line=commit.line_no, wait_line=wait.line_no,
                                 wait_count=module.int_attr(wait, "num"), loop_trips=trips,
                                 consumer_wait_line=consumer)


def _label(op: Op) -> str:
    if op.location.name:
        return op.location.name
    return op.results[0].lstrip("%").split("#")[0] if op.results else op.name.split(".")[-1]


def stable_op_id(kernel: str, region: str, kind: str, rel_line: int, col: int, inner: tuple[SourceLoc, ...] = ()) -> int:
    """32-bit op ID from what is invariant for one program version (not TTGIR line numbers).

    ``rel_line``/``col``: the outermost frame, relative to the kernel's ``def`` line; ``inner``: the
    frames inside helpers (absolute positions in the helper's file), empty in the kernel's body.
    """
    key = f"{kernel}|{region}|{kind}|{rel_line}:{col}"
    key += "".join(f"|{f.file.rsplit('/', 1)[-1]}:{f.line}:{f.col}" for f in inner)
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "little") or 1


_ANALYSES = {"tma_load": _analyse_tma, "wgmma": _analyse_wgmma, "cp_async": _analyse_cp_async}


def discover(ttgir: str | Module, region: str | None, *, iterations: int) -> Discovery:
    """Find the async sites in ``region``'s subtree of a TTGIR module (``None``: every region).

    ``iterations`` is the logical trip count of the pipelined loop (K / BLOCK_K); slot and phase are
    computed for each. Op IDs use source positions relative to the kernel's ``def`` line, so they do
    not change when code above the kernel moves.
    """
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        raise DiscoveryError(f"iterations must be an int >= 1, got {iterations!r}")
    module = parse_module(ttgir)
    tree, spans = region_spans(module)
    if region is None:
        if not len(tree):
            raise DiscoveryError(f"kernel {module.func_name!r} has no Argus regions; mark one with argus.begin/end")
        names = set(tree.names)
        root_name = "*"
    else:
        try:
            root = tree[region]
        except RegionError as exc:
            raise DiscoveryError(str(exc)) from None
        names = {r.name for r in tree.subtree(root.name)}
        root_name = root.name
    selected = [s for s in spans if s.name in names]
    def_loc = module.func_location.outer
    def_line = def_loc.line if def_loc else 0
    groups: dict[tuple, list[Op]] = {}
    span_of: dict[tuple, RegionSpan] = {}
    unsupported = []
    for op in module.ops:
        if op.name not in SITE_KINDS and op.name not in UNSUPPORTED_ASYNC:
            continue
        span = innermost(selected, op.location)
        if span is None:
            continue
        if op.name in UNSUPPORTED_ASYNC:
            unsupported.append(f"{op} in region {span.name!r}: {UNSUPPORTED_ASYNC[op.name]}")
            continue
        key = (op.name, op.location.stack, span.name, span.call_prefix)
        groups.setdefault(key, []).append(op)
        span_of[key] = span
    sites = []
    for key, ops in groups.items():
        name, stack, span_name, _ = key
        kind = SITE_KINDS[name]
        instances, completion = _ANALYSES[kind](module, ops, iterations)
        outer = stack[0]
        op_id = stable_op_id(module.func_name, span_name, kind, outer.line - def_line, outer.col, stack[1:])
        sites.append(Site(op_id, kind, name, span_name, outer, _label(ops[0]), instances, completion,
                          str(Location(stack)), span_of[key].call_site))
    sites.sort(key=lambda s: (s.source.line, s.source.col, s.call_stack, s.kind))
    ids = [s.op_id for s in sites]
    if len(set(ids)) != len(ids):
        raise DiscoveryError(f"op ID collision among sites of {region!r}: {[hex(i) for i in ids]}")
    return Discovery(module.func_name, root_name, tree, sites, iterations, unsupported,
                     [s for s in spans if s.name in names])
