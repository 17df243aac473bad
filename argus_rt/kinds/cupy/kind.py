"""The CuPy kind's entry in the kind registry (:mod:`argus_rt.kinds.registry`)."""
from ..registry import Kind

KIND = Kind(
    "cupy", traced=True, runner_variants=("marker_only", "base", "trace_free", "traced"),
    runner_says="build (unless cached), CuPy launch, reference check",
    variant_cubin="argus_rt.kinds.cupy.build:build_variant", kernel="argus_rt.kinds.cupy.launch:kernel_name",
    run_once="argus_rt.kinds.cupy.run:run_once", trace="argus_rt.kinds.cupy.run:collect_region_trace",
    check_compiles="argus_rt.kinds.cupy.build:check_program", compiler="argus_rt.kinds.cupy.build:compiler_version",
)
