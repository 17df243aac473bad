#!/usr/bin/env bash
# Issue 7 on a Hopper GPU: GPU tests for Triton probes, then the probe-batching benchmark.
# Usage (device machine, repo root): bash scripts/gpu_probes.sh   -- logs and results go to $OUT
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/argus_out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_probe_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log"
rc_tests=$?
python3 benchmarks/probe_batching.py --all16 --json-out "$OUT/probe_join16.json" 2>&1 | tee "$OUT/bench.log"
rc_bench=$?
echo "tests rc=$rc_tests bench rc=$rc_bench"
exit $(( rc_tests != 0 || rc_bench != 0 ))
