"""Run one Transform / Synthesize / Control handler from a JSON-able job (in a pool process).

Used when the runtime's CPU pool is a process pool (``Runtime(cpu_pool="process")``): Python-heavy
handlers (trace parsing, synthesis) then run on several cores instead of sharing one GIL. The job
names the modules to import so that handlers registered outside the built-ins exist in the fresh
(spawned) process too.
"""
from __future__ import annotations

import importlib
import traceback
from pathlib import Path


def run_cpu_job(job: dict) -> dict:
    """``job``: task, programs (id -> ProgramVersion dict), inputs, outdir, deps (id -> task dict),
    modules. Returns ``{"status": "ok", "files": {...}}`` or ``{"status": "error", ...}``."""
    try:
        from ..program import ProgramVersion
        from ..tasks import Task
        from .handlers import TaskContext, get_handler

        for module in job.get("modules", []):
            importlib.import_module(module)
        task = Task.from_dict(job["task"])
        cache: dict = {}

        def program(pid: str):
            if pid not in cache:
                cache[pid] = ProgramVersion.from_dict(job["programs"][pid])
            return cache[pid]

        outdir = Path(job["outdir"])
        outdir.mkdir()
        ctx = TaskContext(task=task, program=program(task.program), programs=program,
                          inputs={k: Path(v) for k, v in job["inputs"].items()}, outdir=outdir,
                          deps={d: Task.from_dict(t) for d, t in job["deps"].items()})
        files = get_handler(task.kind, task.op, ctx.program.kind)(ctx) or {}
        return {"status": "ok", "files": {k: str(v) for k, v in files.items()}}
    except BaseException as exc:  # everything goes back to the scheduler as this task's failure
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
