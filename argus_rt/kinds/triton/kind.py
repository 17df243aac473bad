"""The Triton kind's entry in the kind registry (:mod:`argus_rt.kinds.registry`)."""
from ..registry import Kind

KIND = Kind(
    "triton", traced=True, runner_variants=("marker_only",),  # Triton markers are always the PMTRIG words
    # its runner compiles the kernel itself; Triton's cache writes each file through a temporary directory
    # of its own (pid and uuid) and os.replace, so two compiles of one kernel never see a partial file
    builds_alongside_ncu=True,
    traces_iteration_waits=True,  # trace_run's mode "reference" (config {"reference": "iteration_waits"})
    runner_says="compile (cached), torch, CUDA context, launch, reference check, JIT check",
    variant_cubin="argus_rt.kinds.triton.run:triton_cubin", run_once="argus_rt.kinds.triton.run:run_triton_once",
    check_compiles="argus_rt.kinds.triton.program:check_program", compiler="argus_rt.kinds.triton.program:compiler_version",
    discover_async_sites="argus_rt.kinds.triton.discovery:discover_async_sites",
    forced_wait_probe="argus_rt.kinds.triton.probe_variant:build_forced_wait_probe",
    warm_up="argus_rt.kinds.triton.program:warm_up",  # importing Triton takes seconds
    trace_run="argus_rt.kinds.triton.trace_run:trace_run",  # region trace, traced reference, probes
    launch_schema="program#/$defs/tritonLaunch",
    input_errors=("argus_rt.kinds.triton.kernel_check:ProbeError",),  # a probe of an op or iteration it cannot take
)
