"""The ``forced_wait_probes`` expander: after Triton discovery, one probe branch per (async site,
iteration) in the scope's window (a probe transform, then its own isolated trace run).

A runtime handler, so it sits above :mod:`argus_rt.runtime` and apart from the planner, which only plans
the Control task that names it.
"""
from __future__ import annotations

from .branches import BranchBuilder
from .runtime.handlers import register_expander
from .tasks import DEFAULT_TIMEOUTS_S, Task

# a probe run forces one completion (changing overlap) and is traced (the trace perturbs timing)
PROBE_EFFECTS = ("changes_overlap", "forces_completion", "perturbs_timing")


def probe_outputs(kind: str) -> tuple[str, ...]:
    """What a probe run of a ``kind`` program publishes: ``op_events`` (required), plus region
    intervals when that kind's ``trace`` adapter records them too (the Triton one does not)."""
    from .backends.base import get_backend

    adapter = get_backend("trace", kind)
    if "op_events" not in adapter.outputs:
        raise ValueError(f"the 'trace' backend for {kind!r} programs publishes {list(adapter.outputs)}, not "
                         "'op_events': it cannot run forced-wait probes")
    return tuple(o for o in ("op_events", "region_intervals") if o in adapter.outputs)


@register_expander("forced_wait_probes")
def expand_forced_wait_probes(ctx, builder: BranchBuilder) -> None:
    """One branch per (async site, iteration) in the scope's window: probe transform -> isolated trace."""
    from .evidence import AsyncSites

    sites = AsyncSites.from_outputs(ctx.inputs.get).sites  # checked: a bad discovery output is one line
    base = builder.program(builder.control.program)
    outputs = probe_outputs(base.kind)
    window = builder.control.scope.get("iterations")
    sampling = builder.control.sampling
    for site in sorted(sites, key=lambda s: s["op_id"]):
        for it in sorted(site.get("iterations", [])):
            if window and not window[0] <= it < window[1]:
                continue
            probe = base.variant_of("probe", op_id=site["op_id"], iteration=it)
            builder.add_program(probe)
            transform = builder.add(Task(
                kind="transform", op="forced_wait_probe", program=base.id,
                config={"op_id": site["op_id"], "iteration": it, "expect_program": probe.id},
                outputs=("program",), timeout_s=DEFAULT_TIMEOUTS_S["transform"],
                label=f"probe {site['op_id']}@{it}"))
            collect = builder.add(Task(
                kind="collect", op="trace", program=probe.id, region=None, scope={},
                config={"probe": {"op_id": site["op_id"], "iteration": it}}, deps=(transform.id,),
                sampling=sampling, outputs=outputs, effects=PROBE_EFFECTS,
                device="gpu", timeout_s=DEFAULT_TIMEOUTS_S["collect"],
                requests=(f"async_completion_latency:probe {site['op_id']}@{it}",),
                label=f"trace on {probe.label()} (own run: forces completion)"))
            builder.feed(collect)
