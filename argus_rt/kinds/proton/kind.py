"""The Proton kind's entry in the kind registry (:mod:`argus_rt.kinds.registry`).

A ``kind="proton"`` program is a Triton kernel annotated with ``triton.profiler.language`` scopes
(``pl.enter_scope`` / ``pl.exit_scope`` / ``pl.scope``) and no Argus markers; its launch is a Triton
launch (:mod:`argus_rt.kinds.triton.program`). Region tracing (``latency``) runs it under Proton's
instrumentation mode (:class:`argus_rt.backends.proton.ProtonScopeTrace`). It has no marker-only
build (no ``variant_cubin``, no ``run_once``), so the planner refuses the PC-keyed signals
(instruction_mix, barrier_count, stall_reasons: their recipes need both) for it at plan time.
"""
from ..registry import Kind

KIND = Kind(
    "proton", traced=True,
    check_compiles="argus_rt.kinds.proton.scopes:check_program",
    compiler="argus_rt.kinds.triton.program:compiler_version",  # Proton ships inside Triton
    adapters={"trace": "argus_rt.backends.proton:ProtonScopeTrace"},
    launch_schema="program#/$defs/tritonLaunch",  # a Triton launch: read by argus_rt.kinds.triton.program
)
