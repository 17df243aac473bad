"""PC-to-region map n(r, p) from the marker-only build's SASS plus per-PC execution counts.

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

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..evidence import PcCounters
from ..markers import MARKER_WORDS, MarkerDecodeError, decode_marker, is_marker_tag
from ..pc_regions import NO_REGION, PC_METHODS, AttributedValue, PcMapError, PcOwnership, PcRegionMap, Stack  # noqa: F401  (re-exported)
from ..sass import SassFunction, kernel_key
from .base import BackendAdapter, register_backend
from .ncu import NCU_EFFECTS

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


# ---- the mapping run (backend "pcmap") -------------------------------------------------------

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


# The mapping run's steps that run while ncu does, where ncu starts first (StepClock).
OVERLAPPED_STEPS = ("build", "disassemble")


class StepClock:
    """Wall seconds of the mapping run's steps (``provenance.seconds``), the profiled process split
    by the phase stamps it writes (:data:`argus_rt.kinds.run_variant.TIMINGS_ENV`):
    ``ncu_to_main`` (ncu and interpreter start, imports), ``runner_setup``, ``runner_run`` (CUDA
    context, the launch under replay and saving its arguments; a Triton program's run also imports
    torch, compiles (cached) and checks), ``ncu_after_exit`` (the runner's exit, ncu's report and
    CSV). A program runner that stamps its own phases (``ctx.phase``,
    :mod:`argus_rt.kinds.cuda.runner`) splits ``runner_run`` further: ``runner_run.<phase>`` is the
    time up to that phase's stamp. The mapping run's other steps: ``build``, ``disassemble`` (the
    cubin read, :func:`read_cubin`), ``ncu``, ``reference`` (the parent's check of the profiled
    launch's outputs, CUDA programs described in JSON) and ``map``.

    Where ncu starts before the build (a kind that ``builds_alongside_ncu``), ``build`` and ``disassemble``
    (:data:`OVERLAPPED_STEPS`) run while ncu does: ``ncu`` is then the whole ncu run from its start, so
    it overlaps them, and ``ncu_wait`` is the part of it after them, the time the mapping run waited;
    the steps' sum exceeds the wall by the overlap.

    ``say`` (default: a line on stderr) announces each step as it starts and ends, so a long query
    shows what it is doing."""

    def __init__(self, say=None) -> None:
        self.seconds: dict[str, float] = {}
        self._last = self._start = time.time()
        self._say = say or progress

    def step(self, what: str) -> None:
        """Announce the step that starts now."""
        self._say(f"{what} (at {time.time() - self._start:.1f} s)")

    def lap(self, step: str) -> None:
        now = time.time()
        self.seconds[step] = round(now - self._last, 3)
        self._last = now
        self._say(f"{step}: {self.seconds[step]:.1f} s")

    def profiled_run(self, stamps_path: Path, started: float | None = None) -> None:
        """Record the ncu step, split by the runner's stamps. ``started``: when ncu started, where that
        was before the previous steps (they overlap it); else it started at the last lap."""
        end = time.time()
        if started is None:
            start = self._last
            self.lap("ncu")
        else:
            start = started
            self.seconds["ncu"] = round(end - started, 3)
            self.lap("ncu_wait")
        try:
            stamps = json.loads(stamps_path.read_text(encoding="utf-8"))
            main, run, ran = (float(stamps[k]) for k in ("main", "run", "ran"))
        except (OSError, ValueError, KeyError, TypeError):
            return  # the runner wrote no stamps (it failed, or ran elsewhere): the total stands alone
        if start <= main <= run <= ran <= end:
            self.seconds.update(ncu_to_main=round(main - start, 3), runner_setup=round(run - main, 3),
                                runner_run=round(ran - run, 3), ncu_after_exit=round(end - ran, 3))
            last = run
            for name, stamp in sorted((stamps.get("phases") or {}).items(), key=lambda kv: kv[1]):
                if isinstance(stamp, (int, float)) and last <= stamp <= ran:
                    self.seconds[f"runner_run.{name}"] = round(stamp - last, 3)
                    last = stamp
            self._say("profiled run: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items()
                                                    if k.startswith(("ncu_", "runner_"))))


def progress(msg: str) -> None:
    """One progress line of the mapping run on stderr (a device worker relays it to the query's stderr)."""
    print(f"argus pcmap: {msg}", file=sys.stderr, flush=True)


def mapping_command(program, outdir: Path, *, kernel: str, sections: tuple[str, ...] = ("SourceCounters",),
                    cubin: Path | None = None, symbol: str | None = None,
                    outputs: Path | None = None) -> tuple[list[str], dict, Path]:
    """The Nsight Compute run of the mapping (nothing is run): (ncu argv, its environment, the path
    the profiled runner writes its phase stamps to). The argv profiles ``kernel`` only
    (``-k regex:<kernel>``), its first launch only (``-c 1``), by kernel replay, in the runner of
    the program's marker-only variant (:mod:`argus_rt.kinds.run_variant`), that process only
    (``--target-processes application-only``). ``cubin``/``symbol``: the
    binary this process built and read, which the runner launches as is; ``outputs``: where the
    runner saves the launch's arguments for this process's reference check instead of checking them."""
    from ..kinds.run_variant import TIMINGS_ENV, runner_argv, runner_env
    from . import ncu

    sections = ("SourceCounters",) + tuple(s for s in sections if s != "SourceCounters")
    env, stamps_path = runner_env(), Path(outdir) / "run_timings.json"
    env[TIMINGS_ENV] = str(stamps_path)
    argv = runner_argv(program, "marker_only", Path(outdir), cubin=cubin, symbol=symbol, outputs=outputs)
    # The runner launches the kernel in its own process. What it starts (Triton's `ptxas --version` and
    # `ldconfig -p`, nvcc where a runner builds) launches no kernel: ncu need not attach to those.
    cmd = ncu.ncu_command(argv, kernel, launches=1, sections=sections, target_processes="application-only")
    return cmd, env, stamps_path


def device_capability() -> tuple[int, int]:
    """The visible GPU's compute capability: from the driver (cuda-python; no torch import, no
    context), else from torch."""
    from ..launch import device_capability as driver_capability

    try:
        return driver_capability(0)
    except Exception:  # no cuda-python, or the driver refused: torch's answer (or its error)
        import torch

        return tuple(torch.cuda.get_device_capability())


def read_cubin(cubin: Path, kernel: str):
    """(the kernel's SASS function with line info and indirect-branch targets, the binary's SASS
    architecture) from one ``cuobjdump -elf`` (milliseconds: architecture, jump tables) and one
    ``nvdisasm -g`` run (the SASS; the same instructions, PCs, targets and markers as
    ``cuobjdump -sass``, which would be a second disassembler start of about a second)."""
    from ..kinds.cuda.elf import cubin_elf, elf_arch
    from ..sass import (
        disassemble,
        parse_indirect_branch_targets,
        parse_sass,
        sass_arch,
        select_function,
        with_indirect_targets,
    )

    elf = cubin_elf(cubin)
    listing = disassemble(cubin, tool="nvdisasm", line_info=True)
    function = select_function(parse_sass(listing), kernel_key(kernel))
    function = with_indirect_targets(function, parse_indirect_branch_targets(elf).get(function.name, {}))
    return function, elf_arch(elf) or sass_arch(listing)


def mapping_run(program, outdir: Path, *, kernel: str | None = None, sections: tuple[str, ...] = ("SourceCounters",)):
    """Build the marker-only variant, count per-PC executions with Nsight Compute, and map.

    Returns (the ``argus.pc_region_counts/1`` document, extended with ``source_file_attribution``
    (plain ``-lineinfo`` attribution of the same counts, for side-by-side reports) and provenance;
    the kernel's Nsight Compute profile, whose per-PC counters the attributed signals read).
    ``sections``: the ncu sections of that one run; SourceCounters (the per-PC executions) is always in.

    The kind (:mod:`argus_rt.kinds.registry`) builds the variant (``variant_cubin``), names the kernel
    (``kernel``; else ``program.launch["kernel"]``) and runs it in the profiled process (``run_once``).
    For a kind that ``hands_over`` (CUDA), the profiled process launches the cubin built here, and when
    the kind ``saves_outputs`` (a launch described in JSON: no torch there) it saves its arguments and
    this process checks them against the reference (``check_saved_run``, step ``reference``). For a
    kind that ``builds_alongside_ncu`` (Triton), whose runner compiles the kernel itself, ncu starts
    first and this process builds and reads the variant while it runs (``provenance.ncu_alongside``);
    :func:`check_same_binary` then confirms that ncu profiled the binary mapped here.
    """
    from ..kinds.registry import get_kind
    from ..kinds.run_variant import variant_cubin
    from . import ncu

    kind = get_kind(program.kind)
    if kernel is None:
        kernel = kind.call("kernel", program) if kind.kernel else program.launch.get("kernel")
    if not kernel:
        raise PcMapError(f"program {program.name!r}: no kernel named (launch['kernel'])")
    clock = StepClock()
    running = None  # the ncu run, when it was started before the build
    if not kind.hands_over and kind.builds_alongside_ncu:
        cmd, env, stamps_path = mapping_command(program, outdir, kernel=kernel, sections=sections)
        clock.step(f"Nsight Compute started on kernel {kernel_key(kernel)} only, its first launch, kernel replay; "
                   f"its runner compiles the kernel itself, so this process builds and reads the variant meanwhile. "
                   f"Command: {' '.join(cmd)}")
        running = ncu.start_ncu_command(cmd, outdir=outdir, env=env)
    try:
        clock.step(f"{program.name}: building the marker-only variant ({program.kind}; cached by content hash)")
        cubin = variant_cubin(program, "marker_only")
        clock.lap("build")
        clock.step(f"reading {cubin.name} (cuobjdump -elf, nvdisasm -g) and its CFG")
        function, arch = read_cubin(cubin, kernel)
        ncu.check_arch(arch, device_capability())
    except BaseException:
        if running is not None:
            running.stop()  # the build failed: its error is the query's, and no half-written CSV stays
        raise
    outputs = None
    if running is None:
        if kind.hands_over and kind.saves_outputs and kind.call("saves_outputs", program):
            outputs = Path(outdir) / "profiled_run.npz"
            outputs.unlink(missing_ok=True)  # only this run's launch may be checked
        cmd, env, stamps_path = mapping_command(program, outdir, kernel=kernel, sections=sections,
                                                cubin=cubin if kind.hands_over else None,
                                                symbol=function.name if kind.hands_over else None, outputs=outputs)
    clock.lap("disassemble")
    sections_run = [cmd[k + 1] for k, word in enumerate(cmd) if word == "--section"]
    what = f"{len(function.instructions)} SASS instructions; sections {', '.join(sections_run)}"
    if running is None:
        clock.step(f"Nsight Compute on kernel {kernel_key(kernel)} only, its first launch, kernel replay "
                   f"({what}); the runner's own lines follow. Command: {' '.join(cmd)}")
        raw, profiles = ncu.run_ncu_command(cmd, outdir=outdir, env=env)
        clock.profiled_run(stamps_path)
    else:
        clock.step(f"waiting for Nsight Compute on kernel {kernel_key(kernel)} ({what}), started "
                   f"{time.time() - running.started:.1f} s ago")
        raw, profiles = running.wait()
        clock.profiled_run(stamps_path, started=running.started)
    reference = None
    if outputs is not None:
        clock.step(f"checking the profiled launch's outputs against {program.launch.get('reference')}")
        reference = kind.call("check_saved_run", program, outputs)
        clock.lap("reference")
    clock.step(f"mapping {len(function.instructions)} PCs to regions (CFG, -lineinfo view)")
    profile = ncu.select_profile(profiles, kernel)
    check_same_binary(function, profile.function())
    doc = map_document(function, function, profile)  # one listing: the CFG's and the line info's
    clock.lap("map")
    doc["provenance"] = {"cubin": cubin.name, "kernel_symbol": function.name, "ncu_csv": raw.name,
                         "weights": "ncu 'Instructions Executed' (warp-level) of the same cubin",
                         "ncu_command": cmd[1:cmd.index(sys.executable)] if sys.executable in cmd else cmd[1:],
                         "seconds": clock.seconds}
    if running is not None:
        doc["provenance"]["ncu_alongside"] = list(OVERLAPPED_STEPS)
    if kind.mapping_provenance:
        doc["provenance"].update(kind.call("mapping_provenance", program))
    if outputs is not None:
        doc["provenance"]["reference_check"] = {"max_rel_err": reference, "where": "the mapping run's parent, on "
                                                "the profiled launch's saved arguments"}
    return doc, profile


class PcMapAdapter(BackendAdapter):
    """n(r, p) by the SASS-CFG + Nsight Compute method on a program's marker-only build, and that
    run's per-PC counters (``argus.pc_counters/1``, as the ``ncu`` adapter writes them), so that a
    query of the map and of per-PC signals profiles the kernel once.
    Config: ``kernel`` (defaults to ``program.launch["kernel"]``), ``sections`` (extra ncu sections of
    the run, e.g. ``["WarpStateStats"]`` for stall samples; SourceCounters is always collected)."""

    name = "pcmap"
    outputs = ("pc_region_counts", "pc_counters", "ncu_csv")
    effects = NCU_EFFECTS  # the mapping run is an Nsight Compute run

    def available(self) -> tuple[bool, str]:
        from .ncu import NcuAdapter

        return NcuAdapter().available()

    def validate_config(self, config: dict) -> None:
        bad = sorted(set(config) - {"kernel", "sections"})
        if bad:
            raise ValueError(f"unknown pcmap config key(s) {bad}; valid: kernel, sections")
        sections = config.get("sections", ["SourceCounters"])
        if not (isinstance(sections, (list, tuple)) and sections and all(isinstance(s, str) and s.isidentifier() for s in sections)):
            raise ValueError(f"pcmap config 'sections' must be a non-empty list of ncu section names, got {sections!r}")

    def collect(self, ctx) -> dict[str, Path]:
        self.validate_config(ctx.config)
        outdir = Path(ctx.outdir)
        doc, profile = mapping_run(ctx.program, outdir, kernel=ctx.config.get("kernel"),
                                   sections=tuple(ctx.config.get("sections", ("SourceCounters",))))
        return {"pc_region_counts": ctx.write_json("pc_region_counts", doc),
                **ctx.publish(PcCounters.from_document(profile.to_evidence(), "mapping run profile")),
                "ncu_csv": outdir / "ncu_source_sass.csv"}


register_backend(PcMapAdapter())
