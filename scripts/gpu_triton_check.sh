#!/usr/bin/env bash
# One device call for issue 15: the GPU test suite, then query wall times (benchmarks/query_wall.py).
#   ARGUS_COMMIT=<sha> QUERY_ONLY=cuda,softmax bash scripts/gpu_triton_check.sh   (device machine, repo root)
# Logs and the benchmark record under $OUT; one line per step in $OUT/summary.txt, printed last. The suite
# runs -v: a step killed at its limit still shows which tests passed.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # before anything runs
OUT_DEFAULT=/tmp/argus-triton-check
source "$(dirname "$0")/gpu_env.sh"
step gpu_suite "${SUITE_S:-320}" python3 -m pytest -v -p no:cacheprovider -m "gpu or gpu2" -rs ${SUITE_ARGS:-}
grep -E "^(FAILED|ERROR) " "$OUT/gpu_suite.log" | cut -c1-300 | tee -a "$OUT/summary.txt"
step query_wall "${WALL_S:-240}" python3 benchmarks/query_wall.py --repeats "${REPEATS:-2}" --only "${QUERY_ONLY:-}"
tail -4 "$OUT/query_wall.log" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
