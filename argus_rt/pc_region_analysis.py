"""The PC-to-region analysis, n(r, p), from the marker-only build's SASS plus per-PC execution counts:
kind-independent (any cubin whose markers are the PMTRIG words of :mod:`argus_rt.markers`), its result a
:class:`argus_rt.pc_regions.PcRegionMap`. The mapping run (:mod:`argus_rt.backends.pcmap`) collects the
inputs; this module only computes.

Method (``"sass_cfg+ncu"``), in two steps, each recorded per PC:

1. **Static ownership** (``static_cfg``). In the marker-only build every ``ARGUS_BEGIN/END`` is three
   ``PMTRIG`` words (:mod:`argus_rt.markers`). A forward data-flow pass over each code entry's CFG
   (the kernel body from PC 0, every ``__noinline__`` subroutine from its call target) carries the
   stack of open regions; a begin pushes, an end pops. Every block must be reached with one stack
   (else the markers are unbalanced on some path: :class:`PcMapError` names the PC). Marker words,
   and anything ptxas scheduled between them, belong to the region they open or close.
2. **Dynamic weights.** Per-PC warp-level execution counts c(p) (Nsight Compute's "Instructions
   Executed" for the same build) give n(r, p) = c(p) for kernel-body PCs, whose owner is fixed.
   Code in a subroutine is shared by its callers (``call_site_split``): each caller context gets the
   share c(call site) / sum of c(call sites), and the callee's own stack is appended to the caller's.
   This assumes every call runs the subroutine for the same number of instructions; a helper whose
   work depends on its caller is split by calls, not by work, and its entropy says it was shared.

Ownership is by innermost region (``leaf``); ``inclusive=True`` sums a region's whole subtree.
Region ID 0 stands for "outside every region". The association entropy of a PC is
H(p) = -sum_r alpha(r, p) log alpha(r, p) (nats) over leaf owners: ambiguity metadata, not an error bound.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .markers import MARKER_WORDS, MarkerDecodeError, decode_marker, is_marker_tag
from .pc_regions import PcMapError, PcOwnership, PcRegionMap, Stack
from .sass import SassFunction, kernel_key

METHOD = "sass_cfg+ncu"


@dataclass
class StaticOwnership:
    """Per PC: which code entry reaches it (0 = kernel body, else a subroutine's entry PC) and the
    stack of regions open at it, relative to that entry."""

    function: SassFunction
    entry_of: dict[int, int] = field(default_factory=dict)
    local_stack: dict[int, Stack] = field(default_factory=dict)
    markers: list[tuple[int, str, int]] = field(default_factory=list)  # (pc of tag word, kind, region id)

    @property
    def unreachable(self) -> list[int]:
        return [i.pc for i in self.function.instructions if i.pc not in self.entry_of]


def static_ownership(function: SassFunction) -> StaticOwnership:
    """Region stack at every reachable PC, from the PMTRIG marker words and the CFG."""
    own = StaticOwnership(function)
    for entry in [0] + [e for e in function.subroutine_entries if e != 0]:
        _propagate(function, entry, own)
    return own


def _propagate(function: SassFunction, entry: int, own: StaticOwnership) -> None:
    state_in: dict[int, Stack] = {entry: ()}
    work = [entry]
    while work:
        start = work.pop()
        block = function.blocks[start]
        stack = _run_block(function, block, state_in[start], entry, own)
        for succ in block.successors:
            if succ not in state_in:
                state_in[succ] = stack
                work.append(succ)
            elif state_in[succ] != stack:
                raise PcMapError(
                    f"{function.name}: block 0x{succ:04x} is reached with open regions "
                    f"{_fmt(state_in[succ])} and {_fmt(stack)} (from block 0x{start:04x}); a begin/end "
                    "marker is unbalanced on some path, or the compiler moved code across a marker"
                )
        if block.indirect and not block.instructions[-1].targets:  # targets: sass.with_indirect_targets
            raise PcMapError(
                f"{function.name}: indirect branch at 0x{block.instructions[-1].pc:04x} "
                f"({block.instructions[-1].text}); its targets are unknown, so region ownership after it is too"
            )


def _run_block(function: SassFunction, block, stack: Stack, entry: int, own: StaticOwnership) -> Stack:
    ins = block.instructions
    k = 0
    while k < len(ins):
        cur = ins[k]
        if cur.pc in own.entry_of and own.entry_of[cur.pc] != entry:
            raise PcMapError(
                f"{function.name}: PC 0x{cur.pc:04x} is reached from entry 0x{own.entry_of[cur.pc]:04x} and "
                f"from entry 0x{entry:04x}; code shared between a kernel body and a subroutine is not supported"
            )
        if cur.is_marker_word and is_marker_tag(cur.marker_immediate):
            # ptxas may schedule other instructions between the three words (seen in Triton
            # kernels, whose markers carry no memory clobber): take the next PMTRIGs of the block.
            idx = [k] + [j for j in range(k + 1, len(ins)) if ins[j].is_marker_word][:MARKER_WORDS - 1]
            if len(idx) < MARKER_WORDS:
                raise PcMapError(
                    f"{function.name}: marker tag PMTRIG 0x{cur.marker_immediate:04x} at 0x{cur.pc:04x} is not "
                    f"followed by {MARKER_WORDS - 1} PMTRIG words in the same block"
                )
            words = [ins[j] for j in idx]
            span = ins[k:idx[-1] + 1]  # the words and whatever ptxas put between them
            try:
                marker = decode_marker([w.marker_immediate for w in words])
            except MarkerDecodeError as exc:
                raise PcMapError(f"{function.name}: bad marker at 0x{cur.pc:04x}: {exc}") from None
            own.markers.append((cur.pc, marker.kind, marker.region_id))
            if marker.kind == "begin":
                stack = stack + (marker.region_id,)
                _assign(own, span, entry, stack)
            else:
                if not stack or stack[-1] != marker.region_id:
                    raise PcMapError(
                        f"{function.name}: end of region 0x{marker.region_id:08x} at 0x{cur.pc:04x} but the "
                        f"innermost open region is {_fmt(stack)}"
                    )
                _assign(own, span, entry, stack)
                stack = stack[:-1]
            k = idx[-1] + 1
            continue
        _assign(own, [cur], entry, stack)
        k += 1
    return stack


def _assign(own: StaticOwnership, instructions, entry: int, stack: Stack) -> None:
    for ins in instructions:
        own.entry_of[ins.pc] = entry
        own.local_stack[ins.pc] = stack


def _fmt(stack: Stack) -> str:
    return "[" + ", ".join(f"0x{r:08x}" for r in stack) + "]" if stack else "[] (none)"


def build_pc_region_map(function: SassFunction, counts: dict[int, float], *, method: str = METHOD) -> PcRegionMap:
    """n(r, p) for ``function`` from its SASS and per-PC execution counts (PC offset -> warp count).

    Every instruction PC must have a count (0 allowed); a count for a PC that is not an instruction
    means the counts come from another build, and raises :class:`PcMapError`.
    """
    extra = sorted(set(counts) - {i.pc for i in function.instructions})
    if extra:
        raise PcMapError(
            f"counts name PCs that {function.name!r} does not have (first: 0x{extra[0]:x}); "
            "were the counts collected on a different build than this SASS?"
        )
    missing = [i.pc for i in function.instructions if i.pc not in counts]
    if missing:
        raise PcMapError(f"no execution count for {len(missing)} PCs of {function.name!r} (first: 0x{missing[0]:x})")
    own = static_ownership(function)
    contexts = _entry_contexts(function, own, counts)
    pcs: dict[int, PcOwnership] = {}
    for ins in function.instructions:
        c = float(counts[ins.pc])
        entry = own.entry_of.get(ins.pc)
        if entry is None:
            if c > 0:
                raise PcMapError(
                    f"{function.name}: PC 0x{ins.pc:04x} ({ins.text}) ran {c:g} times but is unreachable in the CFG"
                )
            pcs[ins.pc] = PcOwnership(ins.pc, {(): 0.0}, "unreachable")
            continue
        local = own.local_stack[ins.pc]
        stacks: dict[Stack, float] = {}
        for prefix, w in contexts[entry].items():
            stacks[prefix + local] = stacks.get(prefix + local, 0.0) + c * w
        if c == 0:
            pcs[ins.pc] = PcOwnership(ins.pc, {s: 0.0 for s in stacks} or {local: 0.0}, "unexecuted")
        else:
            pcs[ins.pc] = PcOwnership(ins.pc, stacks, "static_cfg" if entry == 0 else "call_site_split")
    return PcRegionMap(kernel_key(function.name), method, pcs, {i.pc: i.base for i in function.instructions})


def _entry_contexts(function: SassFunction, own: StaticOwnership, counts: dict[int, float]) -> dict[int, dict[Stack, float]]:
    """For each code entry, the distribution of caller region stacks (weights sum to 1)."""
    contexts: dict[int, dict[Stack, float]] = {0: {(): 1.0}}
    pending = {e for e in function.subroutine_entries if e != 0}
    while pending:
        progressed = False
        for entry in sorted(pending):
            sites = [(pc, own.entry_of.get(pc)) for pc, t in function.call_sites if t == entry]
            if any(caller is not None and caller not in contexts for _, caller in sites):
                continue  # a caller's own contexts are not known yet
            dist: dict[Stack, float] = {}
            for pc, caller in sites:
                if caller is None:
                    continue  # call from unreachable code
                for prefix, w in contexts[caller].items():
                    s = prefix + own.local_stack[pc]
                    dist[s] = dist.get(s, 0.0) + float(counts.get(pc, 0.0)) * w
            total = sum(dist.values())
            if total > 0:
                contexts[entry] = {s: n / total for s, n in dist.items()}
            else:  # never called in this run: keep the static owners with equal weights
                static = {s for s in dist} or {()}
                contexts[entry] = {s: 1.0 / len(static) for s in static}
            pending.discard(entry)
            progressed = True
        if not progressed:
            raise PcMapError(
                f"{function.name}: recursive calls among subroutines at "
                + ", ".join(f"0x{e:04x}" for e in sorted(pending)) + "; call-site splitting needs an acyclic call graph"
            )
    return contexts


def attribute_by_source_file(function: SassFunction, metric: dict[int, float]) -> dict[str, float]:
    """Plain ``-lineinfo`` attribution: each PC's value goes to the file its line info names.

    ``function`` must come from ``nvdisasm -g`` of a ``-lineinfo`` build; PCs without line info go
    to ``"<no line info>"``.
    """
    if not any(i.source for i in function.instructions):
        raise PcMapError(f"{function.name!r} has no line info: build with -lineinfo and disassemble with nvdisasm -g")
    out: dict[str, float] = {}
    for pc, value in metric.items():
        src = function[pc].source
        f = os.path.basename(src[0]) if src else "<no line info>"
        out[f] = out.get(f, 0.0) + value
    return out


def check_same_binary(function: SassFunction, ncu_function: SassFunction) -> None:
    """Raise :class:`PcMapError` unless Nsight Compute's SASS is the disassembled cubin's, PC for PC."""
    a = [(i.pc, i.opcode) for i in function.instructions]
    b = [(i.pc, i.opcode) for i in ncu_function.instructions]
    if a != b:
        first = next((x, y) for x, y in zip(a + [None] * len(b), b + [None] * len(a)) if x != y)
        raise PcMapError(f"Nsight Compute profiled other code than the mapped cubin (first difference: {first}); "
                         "the counts and the SASS must come from the same build")


# Per-PC metrics that get a plain -lineinfo view next to the region view.
SOURCE_FILE_METRICS = ("inst_executed", "barrier_inst_executed", "branch_inst_executed")


def map_document(function: SassFunction, lined: SassFunction, profile) -> dict:
    """The ``argus.pc_region_counts/1`` document of one profiled binary, without running anything.

    ``function``: the marker-only build's SASS; ``lined``: the same binary from ``nvdisasm -g``
    (line info); ``profile``: its Nsight Compute source page (``ncu.NcuProfile``). Weights are the
    warp-level ``inst_executed`` counts. Adds ``source_file_attribution`` {metric: {file: count}}:
    what plain ``-lineinfo`` attribution says for the same counts (the metrics the page has).
    """
    check_same_binary(function, lined)
    pmap = build_pc_region_map(function, profile.metric("inst_executed"))
    doc = pmap.to_evidence()
    if any(i.source for i in lined.instructions):
        doc["source_file_attribution"] = {name: attribute_by_source_file(lined, profile.metric(name))
                                          for name in SOURCE_FILE_METRICS if name in profile.metrics}
    else:
        doc["source_file_attribution"] = {}
        doc["notes"] = ["the cubin has no line info: no -lineinfo source-file view"]
    return doc
