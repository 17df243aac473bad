#!/usr/bin/env bash
# Device run for the overlap runtime (2x H200): GPU tests, then the benchmark; logs under $OUT.
#   bash scripts/gpu_overlap.sh [benchmark args...]
# Multicast stays off whatever the caller's environment says.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/overlap_out}"
mkdir -p "$OUT"
{
  date -u
  nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  nvidia-smi topo -m
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())"
} > "$OUT/gpu_info.txt" 2>&1
cat "$OUT/gpu_info.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -s -p no:cacheprovider tests/test_overlap_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log"
fi
timeout "${BENCH_TIMEOUT:-330}" torchrun --nproc_per_node="${NPROC:-2}" benchmarks/overlap.py "$@" 2>&1 | tee "$OUT/bench.log"
echo "bench exit: ${PIPESTATUS[0]}"
if [ -n "${TUNE_SHAPE:-}" ]; then
  # the tuner entry point on its own: profile, model, top-5 validation for one global shape M,K,N
  timeout "${TUNE_TIMEOUT:-90}" torchrun --nproc_per_node="${NPROC:-2}" -m overlap.tune --shape "$TUNE_SHAPE" 2>&1 | tee "$OUT/tune.log"
  echo "tune exit: ${PIPESTATUS[0]}"
fi
