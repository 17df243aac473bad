"""The Triton kind's entry in the kind registry (:mod:`argus_rt.kinds.registry`)."""
from ..registry import Kind

KIND = Kind(
    "triton", traced=True, runner_variants=("marker_only",),  # Triton markers are always the PMTRIG words
    runner_says="compile (cached), torch, CUDA context, launch, reference check, JIT check",
    variant_cubin="argus_rt.kinds.triton.run:triton_cubin", run_once="argus_rt.kinds.triton.run:run_triton_once",
    check_compiles="argus_rt.kinds.triton.program:check_program", compiler="argus_rt.kinds.triton.program:compiler_version",
    adapters={"trace": "argus_rt.backends.trace:TritonProbeTrace"},  # probes, traced reference, region trace
)
