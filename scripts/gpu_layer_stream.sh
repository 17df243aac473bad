#!/usr/bin/env bash
# One device call for layer_stream (csrc/megakernel/bench/layer_stream.cu): its GPU tests, the benchmark, and with
# NCU=1 Nsight Compute on one launch of the ring and the regs kernel (stream modes: where the ring's consumer
# warps stall, per SASS line, and the kernels' memory / scheduler summaries). Logs under $OUT.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-$PWD/gpu_out}"; mkdir -p "$OUT"
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
if [ "${TESTS:-1}" = 1 ]; then
  timeout ${TESTS_S:-200} python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/test_layer_stream.py ${TEST_EXTRA:-} > $OUT/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)" $OUT/gpu_tests.log; tail -3 $OUT/gpu_tests.log
fi
if [ -n "${SANITIZE_K:-}" ]; then  # compute-sanitizer memcheck on the GPU tests matching SANITIZE_K
  timeout 200 compute-sanitizer --tool memcheck --show-backtrace device python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/test_layer_stream.py -k "$SANITIZE_K" > $OUT/sanitize.log 2>&1
  echo "sanitize rc $?"; grep -m 12 -E "=========|passed|failed" $OUT/sanitize.log
fi
timeout ${BENCH_S:-300} python3 benchmarks/layer_stream.py --reps ${REPS:-5} ${BENCH_ARGS:-} 2>&1 | tee $OUT/bench.log
cp benchmarks/results/layer_stream.json $OUT/ 2>/dev/null
if [ "${NCU:-0}" = 1 ]; then
  S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats"
  for m in ${NCU_MODES:-ring-stream regs-stream}; do
    k=$(python3 -c "import sys; from benchmarks.layer_stream import KERNELS; print(KERNELS[sys.argv[1].removesuffix('-stream')][0])" $m)
    t0=$(date +%s)
    timeout 150 ncu --clock-control none --kernel-name $k --launch-count 1 $S --csv \
      python3 benchmarks/layer_stream.py --modes $m --reps 1 --layers ${NCU_LAYERS:-22} --no-record > $OUT/ncu_$m.csv 2>> $OUT/ncu.err
    echo "ncu $m: rc $? wall $(( $(date +%s) - t0 )) s" | tee -a $OUT/bench.log
    timeout 150 ncu --clock-control none --kernel-name $k --launch-count 1 --section SourceCounters --page source \
      --print-source sass --csv python3 benchmarks/layer_stream.py --modes $m --reps 1 --layers ${NCU_LAYERS:-22} --no-record \
      > $OUT/ncu_src_$m.csv 2>> $OUT/ncu.err
    echo "ncu source $m: rc $? $(wc -l < $OUT/ncu_src_$m.csv) lines" | tee -a $OUT/bench.log
  done
  (cd $OUT && tar czf ncu.tgz --remove-files ncu_*.csv)
fi
