"""The CUDA kind's entry in the kind registry (:mod:`argus_rt.kinds.registry`)."""
from ..registry import Kind

KIND = Kind(
    "cuda", traced=True, runner_variants=("marker_only", "base", "trace_free", "traced"), hands_over=True,
    runner_says="CUDA context, launch",
    variant_cubin="argus_rt.kinds.cuda.run:build_variant", kernel="argus_rt.kinds.cuda.run:kernel_name",
    run_once="argus_rt.kinds.cuda.run:run_once", saves_outputs="argus_rt.kinds.cuda.run:saves_outputs",
    check_saved_run="argus_rt.kinds.cuda.run:check_saved_run", trace="argus_rt.kinds.cuda.run:collect_region_trace",
    runner_facts="argus_rt.kinds.cuda.run:runner_facts", compiler="argus_rt.kinds.cuda.build:compiler_version",
    prebuild="argus_rt.kinds.cuda.run:prebuild",  # nvcc on the CPU pool while the device worker warms up
    launch_schema="program#/$defs/cudaLaunch",
)
