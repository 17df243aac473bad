"""The numba kind's entry in the kind registry (:mod:`argus_rt.kinds.registry`)."""
from ..registry import Kind

KIND = Kind(
    "numba", traced=True, runner_variants=("marker_only", "base", "trace_free", "traced"),
    runner_says="build (unless cached), CUDA context, launch, reference check",
    variant_cubin="argus_rt.kinds.numba.build:variant_cubin", kernel="argus_rt.kinds.numba.launch:kernel_name",
    run_once="argus_rt.kinds.numba.run:run_once", trace="argus_rt.kinds.numba.run:collect_region_trace",
    check_compiles="argus_rt.kinds.numba.build:check_program", compiler="argus_rt.kinds.numba.versions:compiler_version",
    mapping_provenance="argus_rt.kinds.numba.build:mapping_provenance",
    environment_problem="argus_rt.kinds.numba.versions:incompatibility",
    # not builds_alongside_ncu: numba's link step writes a fixed temporary name, so two builds at once collide
)
