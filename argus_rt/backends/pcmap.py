"""The ``pcmap`` tool adapter: the mapping run, which collects what the PC-to-region map n(r, p) needs and
hands it to the analysis (:mod:`argus_rt.pc_region_analysis`).

It builds the program's marker-only variant, reads the cubin's SASS with line info and indirect-branch
targets (:func:`read_cubin`), profiles the kind's checked launch of the same binary with Nsight Compute
(per-PC ``inst_executed``, :mod:`argus_rt.backends.ncu`), checks both are the same code and publishes
the map as typed :class:`~argus_rt.evidence.PcRegionCounts` plus the typed per-PC counters. The analysis' names (``static_ownership``,
``build_pc_region_map``, ``map_document``, ...) and the map's (:mod:`argus_rt.pc_regions`) are
re-exported here for older imports.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..evidence import PcCounters, PcRegionCounts
from ..pc_region_analysis import (  # noqa: F401  (re-exported: the analysis' public names)
    METHOD,
    SOURCE_FILE_METRICS,
    StaticOwnership,
    attribute_by_source_file,
    build_pc_region_map,
    check_same_binary,
    map_document,
    static_ownership,
)
from ..pc_regions import NO_REGION, PC_METHODS, AttributedValue, PcMapError, PcOwnership, PcRegionMap, Stack  # noqa: F401  (re-exported)
from ..sass import kernel_key
from .base import BackendAdapter, refuse_unknown_keys, register_backend
from .ncu import NCU_EFFECTS

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
    from ..elf import cubin_elf, elf_arch
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

    Returns (the map's inline ``argus.pc_region_counts/1`` document (the adapter publishes it typed,
    :class:`~argus_rt.evidence.PcRegionCounts`), extended with ``source_file_attribution``
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
    run's per-PC counters (typed :class:`~argus_rt.evidence.PcCounters`, as the ``ncu`` adapter publishes them), so that a
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
        refuse_unknown_keys(config, ("kernel", "sections"), "pcmap config")
        sections = config.get("sections", ["SourceCounters"])
        if not (isinstance(sections, (list, tuple)) and sections and all(isinstance(s, str) and s.isidentifier() for s in sections)):
            raise ValueError(f"pcmap config 'sections' must be a non-empty list of ncu section names, got {sections!r}")

    def collect(self, ctx) -> dict[str, Path]:
        self.validate_config(ctx.config)
        outdir = Path(ctx.outdir)
        doc, profile = mapping_run(ctx.program, outdir, kernel=ctx.config.get("kernel"),
                                   sections=tuple(ctx.config.get("sections", ("SourceCounters",))))
        return {**ctx.publish(PcRegionCounts.from_document(doc, "mapping run map")),
                **ctx.publish(PcCounters.from_document(profile.to_evidence(), "mapping run profile")),
                "ncu_csv": outdir / "ncu_source_sass.csv"}


register_backend(PcMapAdapter())
