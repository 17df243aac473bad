#!/usr/bin/env bash
# Issue 14 on one H200: what a new user runs, on the GPU machine's torch 2.11 / triton 3.6.
#   bash scripts/gpu_first_use.sh        (device machine, repo root, carry .whl; $OUT set by the tool)
# 1. the CPU TTGIR/Triton tests under triton 3.6 (CI runs them under 3.7.1);
# 2. argus demo from a scratch directory (its last step runs the region query on the GPU);
# 3. the README's example queries, JSON reports and a Chrome trace kept under $OUT;
# 4. (run third) the GPU test suite. One line per step in $OUT/summary.txt, printed last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # before anything runs
OUT_DEFAULT=/tmp/argus-first-use
source "$(dirname "$0")/gpu_env.sh"
step ttgir_tests_triton36 120 python3 -m pytest -q -p no:cacheprovider tests/test_discovery_triton.py \
  tests/test_discovery_cli.py tests/test_triton_region_trace.py tests/test_triton_regions.py \
  tests/test_probe_transform.py tests/test_triton_async_e2e.py tests/test_ttgir_mlir.py tests/test_triton_corpus.py
mkdir -p /tmp/demo && step demo 150 bash -c "cd /tmp/demo && python3 -m argus_rt.cli demo"
step gpu_suite 300 python3 -m pytest -q -p no:cacheprovider -m "gpu or gpu2" -rs
for ex in cuda ground_truth; do
  region=$([ $ex = cuda ] && echo example/stage_b || echo ground_truth/stage_b)
  step "query_$ex" 90 python3 -m argus_rt.cli query "examples/$ex" --region "$region" \
    --signals latency,instruction_mix,barrier_count --workspace /tmp/ws --json "$OUT/report_$ex.json" \
    --chrome "$OUT/chrome_$ex.json" --no-progress
done
step query_triton 60 python3 -m argus_rt.cli query examples/triton --region tma_matmul/kloop \
  --signals latency --workspace /tmp/ws --json "$OUT/report_triton.json" --no-progress
cat "$OUT/summary.txt"
