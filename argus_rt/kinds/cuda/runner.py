"""CUDA programs that launch themselves: ``launch.runner`` = ``"<file in the program directory>:<function>"``.

Some kernels take arguments a JSON launch cannot describe: the megakernel takes one pointer to a
parameter block of device pointers built in Python, on a cooperative grid sized by the occupancy
calculator. Such a program names a runner. Argus still builds every variant (off, marker-only,
trace) from the program's sources and flags, so cubins stay content-hashed and PC-mapped; the runner
only launches the cubin it is handed::

    def run(ctx):                                   # ctx: RunnerContext
        module = CubinModule.load(ctx.cubin)
        session = ctx.trace_session(module, ctas=grid, threads_per_cta=256)   # None unless traced
        if session is not None:
            session.arm()
        module.launch(ctx.symbol, grid, 256, args, cooperative=True)     # the launch ncu -c 1 records
        return {"max_rel_err": err}                 # after checking its outputs against its reference

Long runners say what they do: ``ctx.phase("weights", then="decoder setup")`` stamps the end of a
phase, prints one progress line on stderr (which a device worker and ``ncu`` relay to the query's
stderr) and records its wall seconds (the run's ``phase_seconds`` fact; the mapping run's
``provenance.seconds`` splits the profiled run by them).

Rules: launch the program's kernel first (a profiler records the first matching launch); compare the
outputs with the program's own plain reference and return the relative error as ``max_rel_err``
(Argus refuses the run with :class:`ReferenceMismatchError` past ``launch.rtol``, or when it is not
finite); other keys of the returned dict are kept as the run's facts. When traced, create exactly
one session through ``ctx`` and arm it; Argus decodes it after the runner returns.
"""
from __future__ import annotations

import importlib.util
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ProgramRunError, ReferenceMismatchError


@dataclass
class RunnerContext:
    """What a runner gets: the variant's cubin and how to trace it."""

    program: object  # the ProgramVersion being run
    variant: str  # "trace_free", "marker_only", "traced" or "base"
    cubin: Path  # built by Argus from the program's sources and flags
    symbol: str  # the kernel's (mangled) symbol in ``cubin``
    rtol: float | None  # launch.rtol: the runner's reference check must hold within it
    check: bool = True  # False: the caller does not need the reference check (the runner may still do it)
    trace_config: dict | None = None  # TraceConfig fields the adapter asks for (capacity, clock); None: untraced
    sessions: list = field(default_factory=list)
    phase_stamps: dict = field(default_factory=dict)  # phase name -> time.time() at its end (ctx.phase)
    started: float = field(default_factory=time.time)

    @property
    def traced(self) -> bool:
        return self.trace_config is not None

    def phase(self, name: str, then: str | None = None) -> None:
        """Stamp the end of phase ``name`` and print one progress line on stderr (``then``: what starts
        now, so that a run that stalls there is seen to)."""
        now = time.time()
        last = max(self.phase_stamps.values(), default=self.started)
        self.phase_stamps[name] = now
        print(f"argus-run {self.program.name}:{self.variant}: {name} {now - last:.1f} s"
              + (f"; next: {then}" if then else ""), file=sys.stderr, flush=True)

    def phase_seconds(self) -> dict[str, float]:
        """Wall seconds of each stamped phase, in order."""
        out, last = {}, self.started
        for name, stamp in sorted(self.phase_stamps.items(), key=lambda kv: kv[1]):
            out[name] = round(stamp - last, 3)
            last = stamp
        return out

    def trace_session(self, module, *, ctas: int, threads_per_cta: int, capacity: int | None = None,
                      device="cuda"):
        """A :class:`argus_rt.trace.TraceSession` on ``module`` (None when this run is not traced).

        ``capacity`` (records per warp ring) overrides the adapter's when the runner knows its launch
        needs more; arm it yourself (e.g. with a ``coord_window``)."""
        if not self.traced:
            return None
        if self.sessions:
            raise ProgramRunError(f"runner of {self.program.name!r} asked for a second trace session; Argus decodes one")
        from ...trace import TraceConfig, TraceSession

        cfg = dict(self.trace_config)
        if capacity is not None:
            cfg["capacity"] = int(capacity)
        session = TraceSession(module, TraceConfig(ctas=int(ctas), threads_per_cta=int(threads_per_cta), **cfg),
                               device=device)
        self.sessions.append(session)
        return session


def load_runner(program, spec: str):
    """The function ``spec`` (``"<file>:<function>"``) names, imported from the program directory."""
    from ...program import program_file

    file, _, func = spec.partition(":")
    root, path = program_file(program.root, file)
    if not path.is_relative_to(root) or not path.is_file() or not func:
        raise ProgramRunError(f"launch.runner {spec!r} must be '<file inside {root}>:<function>'")
    module_spec = importlib.util.spec_from_file_location(f"argus_runner_{program.name.replace('.', '_')}", path)
    mod = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(mod)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise ProgramRunError(f"launch.runner {spec!r}: {path.name} has no function {func!r}")
    return fn


def run_with_runner(program, variant: str, launch, cubin: Path, symbol: str, *, trace_config: dict | None,
                    check: bool) -> tuple[dict, object]:
    """Call the program's runner on ``cubin``; return ({"max_rel_err", ...runner's extras}, armed session|None)."""
    rtol = float(program.launch["rtol"]) if "rtol" in program.launch else None
    ctx = RunnerContext(program, variant, Path(cubin), symbol, rtol, check, trace_config)
    out = load_runner(program, launch.runner)(ctx)
    if not isinstance(out, dict) or "max_rel_err" not in out:
        raise ProgramRunError(f"runner {launch.runner!r} returned {type(out).__name__}, not a dict with 'max_rel_err'")
    if ctx.phase_stamps:
        out = {**out, "phase_seconds": ctx.phase_seconds(), "phase_stamps": dict(ctx.phase_stamps)}
    err = out["max_rel_err"]
    if check and err is None:
        raise ProgramRunError(f"runner {launch.runner!r} did not check its outputs (max_rel_err None)")
    if err is not None and rtol is not None and not float(err) <= rtol:  # NaN fails too
        raise ReferenceMismatchError(f"runner {launch.runner!r}: relative error {err} > rtol {rtol}")
    if err is not None and not math.isfinite(float(err)):
        raise ReferenceMismatchError(f"runner {launch.runner!r}: relative error {err} is not finite")
    session = ctx.sessions[0] if ctx.sessions else None
    if ctx.traced and (session is None or session.armed is None):
        raise ProgramRunError(f"runner {launch.runner!r} ran a traced variant without creating and arming a trace "
                              "session (ctx.trace_session(...).arm())")
    return out, session
