#!/usr/bin/env bash
# Megakernel on the GPU machine, in one call: build, correctness tests, decode benchmark.
#   scripts/gpu_megakernel.sh [all|tests|bench] [extra args for benchmarks/decode.py]
#   CLI_BACKENDS="megakernel" (default "megakernel cudagraph") picks the generate-CLI runs.
# Logs go to $OUT (or ./gpu_out): env.txt, build.log, gpu_tests.log, bench.log, decode.json/.md.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
what="${1:-all}"
shift || true
case "$what" in all|tests|bench) ;; *) echo "usage: $0 [all|tests|bench] [bench args]" >&2; exit 2 ;; esac

{ date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  python3 -c 'import cuda.bindings; print("cuda-bindings", cuda.bindings.__version__)'; nvcc --version | tail -1; } \
  2>&1 | tee "$OUT/env.txt"
timeout 60 python3 -m megakernel.build 2>&1 | grep -E "registers|spill|error|cubin" | tee "$OUT/build.log"
status=0
if [ "$what" != bench ]; then
  # Default path first; the optional staged path in its own process (a fault there cannot hide the rest).
  timeout 100 python3 -m pytest -q -rA -s -p no:cacheprovider tests/test_megakernel_gpu.py -k "not staged" 2>&1 \
    | tee "$OUT/gpu_tests.log"
  status=${PIPESTATUS[0]}
  timeout 100 python3 -m pytest -q -rA -s -p no:cacheprovider tests/test_megakernel_gpu.py -k staged 2>&1 \
    | tee -a "$OUT/gpu_tests.log"
  [ "${PIPESTATUS[0]}" -ne 0 ] && status=1
fi
if [ "$what" != tests ]; then
  timeout 290 python3 benchmarks/decode.py "$@" 2>&1 | tee "$OUT/bench.log"
  [ "${PIPESTATUS[0]}" -ne 0 ] && status=1
  for backend in ${CLI_BACKENDS-megakernel cudagraph}; do  # the user-facing CLI, end to end
    timeout 60 python3 -m tinyllama.generate --backend $backend --tokens 64 2>&1 | tail -3 | tee -a "$OUT/bench.log"
  done
fi
echo "== summary =="
grep -E "passed|failed|error" "$OUT/gpu_tests.log" 2>/dev/null | tail -3
grep -E "^\|" "$OUT/bench.log" 2>/dev/null
exit $status
