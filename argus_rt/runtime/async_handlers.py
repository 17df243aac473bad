"""The async-operation runtime handlers: the ``async_discovery`` Control and the ``forced_wait_probe``
Transform, for every program kind with the matching hook (``discover_async_sites``,
``forced_wait_probe`` in :mod:`argus_rt.kinds.registry`; today the Triton kind's).

Built-in handlers of the runtime, as :mod:`.builtin`'s ``variant`` is (:mod:`argus_rt.builtin_handlers`
lists this module; the runtime imports it on its first lookup that misses); the work is the kind's, reached through the
registry, and the kinds import no runtime. A kind without the hook gets the registry's one-line error
naming the kinds that have it; the planner refuses ``async_completion_latency`` for such a kind before
any task runs.
"""
from __future__ import annotations

from pathlib import Path

from ..evidence import AsyncSites
from ..kinds.registry import get_kind
from .handlers import HandlerError, register_control, register_transform


@register_control("async_discovery")
def async_discovery_task(ctx) -> dict:
    """Control handler ``async_discovery``: the kind's ``argus.async_sites/1`` document, checked as
    :class:`~argus_rt.evidence.AsyncSites` and saved as its store (output ``async_sites``), and whatever
    else its hook wrote (Triton: the ``ttgir`` it read)."""
    doc, files = get_kind(ctx.program.kind).call("discover_async_sites", ctx.program, ctx.region, ctx.outdir)
    sites = AsyncSites.from_document(doc, f"the {ctx.program.kind} kind's discover_async_sites")
    return {**sites.save(Path(ctx.outdir) / AsyncSites.OUTPUT), **files}


@register_transform("forced_wait_probe")
def forced_wait_probe_task(ctx) -> dict:
    """Transform handler ``forced_wait_probe``: the probe variant of one (op, iteration), checked to be the
    version the plan expects before the kind builds it (Triton: probe TTGIR, cubin, descriptor)."""
    probe = ctx.program.variant_of("probe", op_id=ctx.config["op_id"], iteration=ctx.config["iteration"])
    expected = ctx.config.get("expect_program")
    if expected and probe.id != expected:
        raise HandlerError(f"probe variant of {ctx.program.id} hashes to {probe.id}, the plan expected {expected}")
    files = get_kind(ctx.program.kind).call("forced_wait_probe", ctx.program, probe, ctx.outdir)
    return {"program": ctx.write_program(probe), **files}
