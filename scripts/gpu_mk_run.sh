#!/usr/bin/env bash
# One device call for megakernel tuning: build, GPU tests of the default path, decode benchmark
# with the tuning variants given in $VARIANTS, phase timeline of the fastest. Logs under $OUT.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/gpu_out}"; mkdir -p "$OUT"
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
timeout 60 python3 -m megakernel.build 2>&1 | grep -E "registers|error" | tee $OUT/build.log
if [ "${TESTS:-1}" = 1 ]; then
  timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_megakernel_gpu.py -k "${TEST_K:-not staged}" 2>&1 | tail -15 | tee $OUT/gpu_tests.log
fi
timeout ${BENCH_S:-240} python3 benchmarks/decode.py ${BENCH_ARGS:---no-compile} --variants "${VARIANTS:-}" 2>&1 | tee $OUT/bench.log
