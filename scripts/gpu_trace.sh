#!/usr/bin/env bash
# Device run for issue 2: GPU trace tests, then the tracing-overhead and marker-cost benchmarks.
# Usage (device machine, repo root): bash scripts/gpu_trace.sh   (writes logs under $OUT)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export ARGUS_CACHE_DIR="${ARGUS_CACHE_DIR:-/tmp/argus-cache}"
OUT="${OUT:-/tmp/argus-out}"
mkdir -p "$OUT"
{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  python3 -c 'import cuda.bindings; print("cuda-bindings", cuda.bindings.__version__)' || echo "no cuda-bindings"
  nvcc --version | tail -1
} 2>&1 | tee "$OUT/env.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_trace_gpu.py tests/test_trace_regcursor_gpu.py tests/test_cuda_build.py -rs 2>&1 | tee "$OUT/pytest_gpu.log"
tests_rc=${PIPESTATUS[0]}
python3 benchmarks/trace_overhead.py "$@" 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
python3 benchmarks/marker_cost.py --reps 100 2>&1 | tee "$OUT/marker_cost.log"
bench_rc=$(( bench_rc != 0 || PIPESTATUS[0] != 0 ))
echo "gpu tests rc=$tests_rc benchmark rc=$bench_rc"
exit $(( tests_rc != 0 || bench_rc != 0 ))
