"""Nsight Compute adapter: per-SASS-PC counters from ``ncu --page source --print-source sass --csv``.

The command (seen working on our H200s, ncu 2025.3.1)::

    ncu --section SourceCounters --page source --print-source sass --csv --clock-control none \
        --replay-mode kernel -k regex:<kernel> -c <launches> <program> <args...>

The kernel filter and the launch count are what keep a run short: without them ncu profiles every
kernel the program launches (a PyTorch runner launches thousands: weight init, reference), each
replayed pass by pass. ``--replay-mode kernel`` (ncu's default, named so that no config file changes
it) replays the one launch in place; application replay would rerun the whole program per pass.

prints, per profiled launch, a ``"Kernel Name","<demangled name>",`` line, a header row and one row
per SASS instruction: ``"Address"`` (absolute, the function's base plus the PC offset), ``"Source"``
(the SASS text) and metric columns. Metric names Argus publishes (``argus.pc_counters/1``):

============================  ===============================================  ==========
name                          from column                                      level
============================  ===============================================  ==========
``inst_executed``             Instructions Executed                            warp
``thread_inst_executed``      Thread Instructions Executed                     thread
``predicated_on_thread_inst`` Predicated-On Thread Instructions Executed       thread
``predicated_off``            thread_inst_executed - predicated_on_thread_inst thread
``branch_inst_executed``      inst_executed where the opcode is a branch       warp
``barrier_inst_executed``     inst_executed where the opcode is a barrier      warp
``divergent_branches``        Divergent Branches                               warp
``warp_stall_samples``        Warp Stall Sampling (All Samples)                samples
``stall:<reason>``            stall_<reason>                                   samples
============================  ===============================================  ==========

Branch and barrier counts are opcode classes of the SASS text times the executed count: the source
page has no per-PC branch column. :data:`BRANCH_CLASS` matches what ncu's kernel-level "Branch
Instructions" counts (checked on the saved ground-truth capture: BRA, CALL, RET and EXIT).

Replay effects: ncu replays each profiled kernel (memory saved and restored between passes), holds
the process's one CUPTI subscriber, serialises kernels and changes their timing; counts are per
launch, not per replay pass. Instrumented times must never be used as region durations.
"""
from __future__ import annotations

import collections
import csv
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..evidence import PcCounters
from ..gpu_env import multicast_off_env
from ..sass import SassFunction, function_from_rows, kernel_key, pc_key
from ..tools import ToolNotFoundError, find_tool
from . import base
from .base import BackendAdapter, BackendError, BackendUnavailableError, register_backend, tool_availability

REQUIRED_COLUMNS = ("Address", "Source", "Instructions Executed")
COLUMN_METRICS = {
    "Instructions Executed": "inst_executed",
    "Thread Instructions Executed": "thread_inst_executed",
    "Predicated-On Thread Instructions Executed": "predicated_on_thread_inst",
    "Divergent Branches": "divergent_branches",
    "Warp Stall Sampling (All Samples)": "warp_stall_samples",
}
BRANCH_CLASS = frozenset({"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT"})
BARRIER_CLASS = frozenset({"BAR", "BARRIER"})
NCU_EFFECTS = frozenset({"replays_kernel", "exclusive_profiler", "perturbs_timing", "serialises_kernels"})
DEFAULT_SECTIONS = ("SourceCounters",)


class NcuError(BackendError):
    """Nsight Compute ran but its output cannot be used; the message says why."""


class NcuOutputError(NcuError, ValueError):
    """The CSV lacks required columns or rows."""


class NcuNoKernelError(NcuError):
    """ncu profiled no kernel (the filter matched none); lists the kernels it saw."""


class WrongArchError(BackendUnavailableError):
    """The binary's SASS architecture does not run on (or is not the one profiled on) this GPU."""


@dataclass
class NcuKernelProfile:
    """Per-PC metrics of one profiled launch. PCs are offsets from the function's base address."""

    kernel_name: str  # as ncu prints it (demangled)
    base_address: int
    pcs: list[int]
    sass: list[str]
    metrics: dict[str, list[float]] = field(default_factory=dict)
    _function: tuple | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def kernel(self) -> str:
        return kernel_key(self.kernel_name)

    def metric(self, name: str) -> dict[int, float]:
        if name not in self.metrics:
            raise NcuOutputError(f"metric {name!r} was not collected; have: {', '.join(sorted(self.metrics))}")
        return dict(zip(self.pcs, self.metrics[name]))

    def function(self) -> SassFunction:
        """The SASS of the profiled kernel as ncu lists it (for a CFG when no binary is at hand).

        Parsed once per profile (blocks and CFG of the whole kernel: ~0.1 s for the megakernel's
        17k instructions) and kept; the rows are not meant to change after parsing."""
        key = (self.kernel_name, self.base_address, len(self.pcs))
        if self._function is None or self._function[0] != key:
            rows = [(self.base_address + pc, t) for pc, t in zip(self.pcs, self.sass)]
            self._function = (key, function_from_rows(self.kernel_name, rows))
        return self._function[1]

    def opcodes(self) -> list[str]:
        """Opcode family of each PC, in ``pcs`` order. One parse of the listing for all PCs: a parse per
        PC made this quadratic (17,440 PCs x 0.1 s = ~30 min per call on the megakernel, issue 16)."""
        function = self.function()
        return [function[pc].base for pc in self.pcs]

    def to_evidence(self, method: str = "ncu_source_sass") -> dict:
        """The ``argus.pc_counters/1`` document."""
        return {"format": "argus.pc_counters/1", "method": method, "kernel": self.kernel,
                "kernel_name": self.kernel_name,
                "pcs": [pc_key(self.kernel, pc) for pc in self.pcs], "opcodes": self.opcodes(),
                "sass": self.sass, "metrics": self.metrics}


def _number(cell: str, column: str, row: int) -> float:
    cell = cell.strip().replace(",", "")
    if cell in ("", "-", "n/a", "N/A"):
        return 0.0
    try:
        return float(cell)
    except ValueError:
        raise NcuOutputError(f"row {row}: column {column!r} holds {cell!r}, not a number") from None


def parse_source_csv(text: str) -> list[NcuKernelProfile]:
    """Every profiled launch in the output of ``ncu --page source --print-source sass --csv``.

    Lines that are not CSV (``==PROF==`` notes, the program's own output) are skipped. Raises
    :class:`NcuNoKernelError` when ncu says it profiled nothing, :class:`NcuOutputError` when a
    required column is missing (the message lists the columns present).
    """
    errors = [l for l in text.splitlines() if l.startswith("==ERROR==")]
    if errors:
        raise NcuError("ncu reported errors: " + " | ".join(errors[:5]))
    if "==WARNING== No kernels were profiled" in text:
        avail = re.findall(r"^\s*\d+\.\s+(\S.*)$", text.split("No kernels were profiled", 1)[1], re.M)
        raise NcuNoKernelError(
            "ncu profiled no kernel: the kernel filter matched nothing; kernels the program launched: "
            + (", ".join(avail) if avail else "none listed")
        )
    profiles: list[NcuKernelProfile] = []
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        if not lines[k].startswith('"Kernel Name"'):
            k += 1
            continue
        name = next(csv.reader([lines[k]]))[1]
        if k + 1 >= len(lines) or not lines[k + 1].startswith('"'):
            raise NcuOutputError(f"kernel {name!r}: no header row after the 'Kernel Name' line")
        header = next(csv.reader([lines[k + 1]]))
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise NcuOutputError(
                f"kernel {name!r}: source-page CSV lacks column(s) {missing}; columns present: {header}. "
                "Was it collected with --page source --print-source sass and a section that has "
                "per-instruction counters (SourceCounters)?"
            )
        body = []
        k += 2
        while k < len(lines) and lines[k].startswith('"0x'):
            body.append(lines[k])
            k += 1
        if not body:
            raise NcuOutputError(f"kernel {name!r}: the source page lists no SASS rows")
        profiles.append(_profile_from_rows(name, header, list(csv.reader(body))))
    if not profiles:
        raise NcuOutputError(
            "no per-PC table in the ncu output (expected a '\"Kernel Name\",...' line followed by an "
            "'\"Address\",\"Source\",...' header); was it run with --page source --print-source sass --csv?"
        )
    return profiles


def _profile_from_rows(name: str, header: list[str], rows: list[list[str]]) -> NcuKernelProfile:
    col = {c: i for i, c in enumerate(header)}
    addresses = []
    for n, r in enumerate(rows):
        if len(r) < len(header):
            raise NcuOutputError(f"kernel {name!r}: row {n} has {len(r)} cells, header has {len(header)}")
        addresses.append(int(r[col["Address"]], 16))
    base = addresses[0]
    pcs = [a - base for a in addresses]
    sass = [r[col["Source"]].strip() for r in rows]
    metrics: dict[str, list[float]] = {}
    for column, metric in COLUMN_METRICS.items():
        if column in col:
            metrics[metric] = [_number(r[col[column]], column, n) for n, r in enumerate(rows)]
    for column in header:
        if column.startswith("stall_") and "(Not Issued)" not in column:
            metrics["stall:" + column[len("stall_"):]] = [_number(r[col[column]], column, n) for n, r in enumerate(rows)]
    prof = NcuKernelProfile(name, base, pcs, sass, metrics)
    if "thread_inst_executed" in metrics and "predicated_on_thread_inst" in metrics:
        metrics["predicated_off"] = [t - p for t, p in zip(metrics["thread_inst_executed"], metrics["predicated_on_thread_inst"])]
    ops = prof.opcodes()
    inst = metrics["inst_executed"]
    metrics["branch_inst_executed"] = [c if op in BRANCH_CLASS else 0.0 for c, op in zip(inst, ops)]
    metrics["barrier_inst_executed"] = [c if op in BARRIER_CLASS else 0.0 for c, op in zip(inst, ops)]
    return prof


def select_profile(profiles: list[NcuKernelProfile], kernel: str, launch: int = 0) -> NcuKernelProfile:
    """The ``launch``-th profiled launch of ``kernel`` (matched by :func:`kernel_key`)."""
    want = kernel_key(kernel)
    hits = [p for p in profiles if p.kernel == want]
    if not hits:
        raise NcuNoKernelError(f"kernel {kernel!r} is not in the ncu output; profiled: {sorted({p.kernel for p in profiles})}")
    if launch >= len(hits):
        raise NcuOutputError(f"launch {launch} of {kernel!r} requested; ncu profiled {len(hits)} launch(es)")
    return hits[launch]


def parse_details_csv(text: str) -> dict[str, dict[str, float]]:
    """Kernel-level metrics (``ncu --csv`` details page): {kernel_key: {"Section/Metric (unit)": value}}."""
    rows = [l for l in text.splitlines() if l.startswith('"')]
    if not rows:
        raise NcuOutputError("no CSV rows in the ncu details output")
    reader = csv.DictReader(io.StringIO("\n".join(rows)))
    need = {"Kernel Name", "Section Name", "Metric Name", "Metric Value"}
    if not need <= set(reader.fieldnames or []):
        raise NcuOutputError(f"ncu details CSV lacks {sorted(need - set(reader.fieldnames or []))}; has {reader.fieldnames}")
    out: dict[str, dict[str, float]] = {}
    for r in reader:
        try:
            v = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            continue
        out.setdefault(kernel_key(r["Kernel Name"]), {})[f"{r['Section Name']}/{r['Metric Name']}"] = v
    return out


# ---- running ncu -----------------------------------------------------------------------------

def find_ncu() -> Path:
    """The ``ncu`` executable, by the one search order of :mod:`argus_rt.tools` ($ARGUS_NCU, $NCU first)."""
    try:
        return find_tool("ncu")
    except ToolNotFoundError as exc:
        raise BackendUnavailableError(str(exc)) from exc


TARGET_PROCESSES = ("all", "application-only")


def ncu_command(program: list[str], kernel: str | None = None, *, launches: int = 1, launch_skip: int = 0,
                sections: tuple[str, ...] = DEFAULT_SECTIONS, ncu: str | os.PathLike | None = None,
                target_processes: str = "all") -> list[str]:
    """The ncu argument list (no shell) for per-PC counters of ``kernel`` in ``program``.
    ``target_processes``: ``"all"`` (the program and every process it starts: a user's program may
    launch its kernels in a child) or ``"application-only"`` (the program's own process: ncu does not
    attach to the short helper processes it starts)."""
    if not program:
        raise ValueError("program must be a non-empty argument list, e.g. ['./a.out', '128']")
    if launches < 1 or launch_skip < 0:
        raise ValueError(f"launches must be >= 1 and launch_skip >= 0, got {launches}, {launch_skip}")
    if target_processes not in TARGET_PROCESSES:
        raise ValueError(f"target_processes {target_processes!r} unknown; valid: {', '.join(TARGET_PROCESSES)}")
    cmd = [str(ncu or find_ncu())]
    for s in sections:
        cmd += ["--section", s]
    cmd += ["--page", "source", "--print-source", "sass", "--csv", "--clock-control", "none",
            "--replay-mode", "kernel", "--target-processes", target_processes, "-c", str(launches)]
    if launch_skip:
        cmd += ["-s", str(launch_skip)]
    if kernel:
        cmd += ["-k", f"regex:{re.escape(kernel_key(kernel))}"]
    return cmd + [str(p) for p in program]


def run_ncu(program: list[str], kernel: str | None = None, *, outdir: str | os.PathLike, launches: int = 1,
            timeout_s: float = 600.0, env: dict | None = None,
            sections: tuple[str, ...] = DEFAULT_SECTIONS) -> tuple[Path, list[NcuKernelProfile]]:
    """Run ncu on ``program``; save the raw CSV as ``outdir/ncu_source_sass.csv``; return it and the profiles."""
    cmd = ncu_command(program, kernel, launches=launches, sections=sections)
    return run_ncu_command(cmd, outdir=outdir, timeout_s=timeout_s, env=env)


PROGRESS_PREFIX = "argus ncu:"


def _say(msg: str) -> None:
    """One progress line on stderr (a device worker relays its stderr to the query's)."""
    print(f"{PROGRESS_PREFIX} {msg}", file=sys.stderr, flush=True)


def _relay(stream, sink, tail: collections.deque, echo, notes: list | None = None) -> None:
    for line in stream:
        if sink is not None:
            sink.write(line)
        tail.append(line.rstrip("\n"))
        if notes is not None and line.startswith("=="):
            notes.append(line.rstrip("\n"))  # ncu's own ==PROF==/==WARNING==/==ERROR== lines, all kept
        if echo(line):
            try:
                sys.stderr.write(line)
                sys.stderr.flush()
            except (OSError, ValueError):
                pass  # our stderr is gone: keep draining the pipe


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (Linux /proc; [] elsewhere), children first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for t in os.listdir(f"/proc/{p}/task")
                    for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
        except (OSError, ValueError):
            kids = []
        out += kids
        todo += kids
    return out


def _stop(proc: subprocess.Popen) -> None:
    """End ncu and the program it started (by their ids), SIGTERM first."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in [proc.pid] + _descendants(proc.pid):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def run_ncu_command(cmd: list[str], *, outdir: str | os.PathLike, timeout_s: float = 600.0,
                    env: dict | None = None) -> tuple[Path, list[NcuKernelProfile]]:
    """Run a built ncu command line (:func:`ncu_command`) to its end: :func:`start_ncu_command`, then
    :meth:`NcuRun.wait`."""
    return start_ncu_command(cmd, outdir=outdir, timeout_s=timeout_s, env=env).wait()


def start_ncu_command(cmd: list[str], *, outdir: str | os.PathLike, timeout_s: float = 600.0,
                      env: dict | None = None) -> NcuRun:
    """Start a built ncu command line (:func:`ncu_command`) and return at once, so the caller can work
    while it runs; :meth:`NcuRun.wait` for its profiles, :meth:`NcuRun.stop` to end it instead."""
    return NcuRun(cmd, Path(outdir), timeout_s, env)


class NcuRun:
    """One running ncu command. stdout (the CSV) goes to a ``.part`` file beside
    ``outdir/ncu_source_sass.csv`` that becomes that file when ncu exits; ncu's own messages and the
    program's stderr are relayed to stderr as they come (the profiled program's progress lines,
    ``==PROF==`` pass counts), so a long run shows what it is doing. ``timeout_s`` counts from the start."""

    def __init__(self, cmd: list[str], outdir: Path, timeout_s: float, env: dict | None) -> None:
        self.cmd, self.timeout_s = cmd, timeout_s
        self.raw = outdir / "ncu_source_sass.csv"
        self._tmp = self.raw.with_name(f".{self.raw.name}.{os.getpid()}.part")
        self.started = time.time()
        self._out_tail: collections.deque = collections.deque(maxlen=40)
        self._err_tail: collections.deque = collections.deque(maxlen=40)
        self._notes: list[str] = []  # ncu's messages on stderr
        self._sink = open(self._tmp, "w", encoding="utf-8")
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, errors="replace",
                                          env=multicast_off_env(env))
        except BaseException:
            self._discard()
            raise
        self._readers = [threading.Thread(target=_relay, args=(self._proc.stdout, self._sink, self._out_tail,
                                                               lambda line: not line.startswith('"')), daemon=True),
                         threading.Thread(target=_relay, args=(self._proc.stderr, None, self._err_tail,
                                                               lambda line: True, self._notes), daemon=True)]
        for r in self._readers:
            r.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _discard(self) -> None:
        self._sink.close()
        self._tmp.unlink(missing_ok=True)

    def stop(self) -> None:
        """End ncu and the program it started (by their ids) and drop its partial output: for a caller
        whose own work failed while ncu ran. Nothing is written to ``outdir/ncu_source_sass.csv``."""
        if self._proc.poll() is None:
            _stop(self._proc)
        for r in self._readers:
            r.join(timeout=10)
        self._discard()

    def wait(self) -> tuple[Path, list[NcuKernelProfile]]:
        """Wait for ncu to exit; save its CSV as ``outdir/ncu_source_sass.csv``; return it and the profiles.
        A run past ``timeout_s`` (from the start) is stopped and raises :class:`NcuError` with its last lines."""
        timed_out = False
        try:
            try:
                rc = self._proc.wait(timeout=max(0.0, self.timeout_s - (time.time() - self.started)))
            except subprocess.TimeoutExpired:
                timed_out = True
                _stop(self._proc)
                rc = self._proc.returncode
            except BaseException:  # interrupted while waiting: ncu and its program must not outlive us
                self.stop()
                raise
            for r in self._readers:
                r.join(timeout=10 if timed_out else None)
            self._sink.close()
            self._tmp.replace(self.raw)
        finally:
            self._discard()  # only a part file that did not become the CSV is left to remove
        raw, err_tail, out_tail, notes = self.raw, self._err_tail, self._out_tail, self._notes
        if timed_out:
            last = " | ".join(list(err_tail)[-8:] + list(out_tail)[-4:])
            raise NcuError(f"ncu did not finish within {self.timeout_s:g} s and was stopped; its output so far is in "
                           f"{raw}; last lines: {last[-1500:]}")
        text = raw.read_text(encoding="utf-8")
        if rc != 0:
            last = "\n".join(err_tail) or "\n".join(out_tail)
            raise NcuError(f"ncu exited with {rc}: {last.strip()[-800:]}")
        said = "\n".join(notes + list(err_tail))
        if any(word in said + text for word in ("LibraryNotLoaded", "ERR_NVGPUCTRPERM")):
            raise BackendUnavailableError(
                "ncu cannot read the GPU's hardware counters here (profiler library not loaded or no permission)"
            )
        _say(f"ncu finished in {time.time() - self.started:.1f} s ({len(text) // 1024} KiB of CSV); parsing the source page")
        # ncu's ==ERROR== and "No kernels were profiled" lines may come on either stream
        return raw, parse_source_csv("\n".join(notes) + "\n" + text if notes else text)


def check_arch(sass_arch: str | None, device_capability: tuple[int, int]) -> None:
    """Raise :class:`WrongArchError` when SASS built for ``sass_arch`` (``"sm_90a"``) cannot run on
    a GPU of ``device_capability`` (``(9, 0)``); arch-specific ``a`` targets need the exact major.minor."""
    if sass_arch is None:
        raise WrongArchError("the binary holds no SASS (PTX only?): per-PC maps need SASS built for this GPU")
    m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", sass_arch)
    if not m:
        raise WrongArchError(f"unrecognised SASS architecture {sass_arch!r}; expected like 'sm_90' or 'sm_90a'")
    built = (int(m.group(1)), int(m.group(2)))
    if built != tuple(device_capability):
        raise WrongArchError(
            f"binary SASS is {sass_arch} (compute capability {built[0]}.{built[1]}) but the GPU is "
            f"{device_capability[0]}.{device_capability[1]}: the driver would JIT other code (or refuse), "
            f"so PCs would not match; rebuild with -gencode=arch=compute_{device_capability[0]}{device_capability[1]}"
            f"{'a' if m.group(3) == 'a' else ''},code=sm_{device_capability[0]}{device_capability[1]}"
            f"{'a' if m.group(3) == 'a' else ''}"
        )


class NcuAdapter(BackendAdapter):
    """Collect per-PC counters of one kernel with Nsight Compute.

    Config: ``kernel`` (name or key; default ``program.launch["kernel"]``), ``sections`` (ncu
    sections, default ``["SourceCounters"]``), ``launches`` (int, default 1), ``args`` (extra program
    arguments). The program run is ``program.launch["argv"]`` when given, else (CUDA programs) the
    runner of :mod:`argus_rt.kinds.run_variant` on this task's variant, so PCs match that very cubin.
    """

    name = "ncu"
    effects = NCU_EFFECTS
    outputs = ("pc_counters", "ncu_csv")
    VALID_KEYS = ("kernel", "sections", "launches", "args")

    def available(self) -> tuple[bool, str]:
        return tool_availability(find_ncu)

    def validate_config(self, config: dict) -> None:
        base.refuse_unknown_keys(config, self.VALID_KEYS, "ncu config")
        if "launches" in config and (not isinstance(config["launches"], int) or config["launches"] < 1):
            raise ValueError(f"ncu config 'launches' must be an int >= 1, got {config['launches']!r}")
        sections = config.get("sections", list(DEFAULT_SECTIONS))
        if not (isinstance(sections, (list, tuple)) and sections and all(isinstance(s, str) and s.isidentifier() for s in sections)):
            raise ValueError(f"ncu config 'sections' must be a non-empty list of section names, got {sections!r}")

    def command(self, ctx) -> tuple[list[str], dict | None, str]:
        """(ncu argv, the program's environment, kernel) of this collection, without running it: the
        kernel filter and launch count are always on the command line."""
        self.validate_config(ctx.config)
        argv, env = program_argv(ctx)
        argv += [str(a) for a in ctx.config.get("args", [])]
        kernel = ctx.config.get("kernel") or (getattr(ctx.program, "launch", {}) or {}).get("kernel")
        if not kernel:
            raise ValueError("ncu collection needs config 'kernel' (or program.launch['kernel'])")
        cmd = ncu_command(argv, kernel, launches=int(ctx.config.get("launches", 1)),
                          sections=tuple(ctx.config.get("sections", DEFAULT_SECTIONS)))
        return cmd, env, kernel

    def collect(self, ctx) -> dict[str, Path]:
        cmd, env, kernel = self.command(ctx)
        _say(f"profiling kernel {kernel_key(kernel)} only: {' '.join(cmd)}")
        raw, profiles = run_ncu_command(cmd, outdir=Path(ctx.outdir), env=env)
        prof = select_profile(profiles, kernel)
        return {**ctx.publish(PcCounters.from_document(prof.to_evidence(), "ncu profile")), "ncu_csv": raw}


def program_argv(ctx) -> tuple[list[str], dict | None]:
    """How to run the program of a Collect context, and its environment (None: inherit)."""
    launch = getattr(ctx.program, "launch", None) or {}
    if launch.get("argv"):
        return [str(a) for a in launch["argv"]], None
    exe = ctx.inputs.get("executable")
    if exe:
        return [str(exe)], None
    from ..kinds.registry import find_kind, kinds

    kind = find_kind(getattr(ctx.program, "kind", None))
    if kind is not None and kind.run_once and kind.runner_variants:
        from ..kinds.run_variant import runner_argv, runner_env

        variants = kind.runner_variants  # the first is the default (marker_only)
        variant = ctx.program.variant if ctx.program.variant in variants else variants[0]
        return runner_argv(ctx.program, variant, Path(ctx.outdir)), runner_env()
    raise ValueError("no program to run: program.launch has no 'argv', no input named 'executable', "
                     f"and kind {getattr(ctx.program, 'kind', None)!r} has no built-in runner (valid: "
                     f"{', '.join(k.name for k in kinds() if k.run_once)})")


register_backend(NcuAdapter())
