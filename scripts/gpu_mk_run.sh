#!/usr/bin/env bash
# One device call for megakernel tuning: build, GPU tests of the default path, decode benchmark
# (extra rows from $VARIANTS, args from $BENCH_ARGS), phase timeline of the fastest row, with
# FUSION_TESTS=1 the opt-in fusion variants' GPU tests (tests/test_megakernel_fusions_gpu.py), and with
# NCU=1 Nsight Compute per-PC source counters of one generation launch, and with WS=1 first
# benchmarks/weight_stream.py (its probe paths' GPU tests, then its rows: ws.log, weight_stream.json). Logs under $OUT.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-$PWD/gpu_out}"; mkdir -p "$OUT"
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
timeout 60 python3 -m megakernel.build 2>&1 | grep -E "registers|error" | tee $OUT/build.log  # the plain build (the default decoder adds -DMK_ONE_SPLIT=1)
if [ "${WS:-0}" = 1 ]; then  # the weight-stream rates and the probe paths' round trips under load
  timeout ${WS_TEST_S:-120} python3 -m pytest -q -p no:cacheprovider tests/test_weight_stream.py 2>&1 | tail -5 | tee $OUT/ws.log
  timeout ${WS_S:-180} python3 benchmarks/weight_stream.py --reps ${WS_REPS:-5} 2>&1 | tee -a $OUT/ws.log
  cp benchmarks/results/weight_stream.json $OUT/ 2>/dev/null
fi
if [ "${TESTS:-1}" = 1 ]; then
  timeout ${TESTS_S:-200} python3 -m pytest -q -x -p no:cacheprovider tests/test_megakernel_gpu.py ${TEST_EXTRA:-} -k "${TEST_K:-not staged}" 2>&1 | tail -15 | tee $OUT/gpu_tests.log
fi
timeout ${BENCH_S:-300} python3 benchmarks/decode.py ${BENCH_ARGS:---no-compile} --variants "${VARIANTS:-}" 2>&1 | tee $OUT/bench.log
if [ "${FUSION_TESTS:-0}" = 1 ]; then  # opt-in fusion variants vs the interpreter (after the bench: cubins cached)
  timeout ${FUSION_S:-240} python3 -m pytest -q -p no:cacheprovider tests/test_megakernel_fusions_gpu.py ${FUSION_K:+-k "$FUSION_K"} 2>&1 | tail -20 | tee -a $OUT/gpu_tests.log
fi
if [ "${NCU:-0}" = 1 ]; then
  t0=$(date +%s)
  timeout 240 ncu --clock-control none --replay-mode kernel --kernel-name regex:megakernel --launch-skip 1 --launch-count 1 \
    --section SourceCounters --page source --print-source sass --csv \
    python3 -m tinyllama.generate --backend megakernel --prompt-len 130 --tokens 8 > $OUT/ncu_source.csv 2> $OUT/ncu.err
  echo "ncu rc $? wall $(( $(date +%s) - t0 )) s, $(wc -l < $OUT/ncu_source.csv) lines" | tee -a $OUT/bench.log
  tail -3 $OUT/ncu.err
fi
if [ -n "${NCU_PROBES:-}" ]; then  # ';'-separated JSON decoder keywords: DRAM/L2 counters of one launch each
  M=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,gpu__time_duration.sum
  IFS=';' read -ra probes <<< "$NCU_PROBES"
  for kw in "${probes[@]}"; do
    t0=$(date +%s)
    timeout 150 ncu --clock-control none --replay-mode kernel --kernel-name regex:megakernel --launch-skip 1 --launch-count 1 \
      --metrics $M --csv python3 -m megakernel.probe "$kw" --steps ${NCU_STEPS:-8} > $OUT/ncu_probe.csv 2>> $OUT/ncu.err
    echo "ncu probe $kw: rc $? wall $(( $(date +%s) - t0 )) s" | tee -a $OUT/bench.log
    grep -E '^probe|dram__|lts__|gpu__time' $OUT/ncu_probe.csv | awk -F'","' '{print ($0 ~ /^probe/) ? $0 : $(NF-2) " " $(NF-1) " " $NF}' | tee -a $OUT/bench.log
  done
fi
if [ "${SASS:-0}" = 1 ]; then  # SASS of the default build (cuobjdump on the device)
  cubin=$(python3 -m megakernel.build | sed -n 's/^cubin: \([^ ]*\) .*/\1/p')
  cuobjdump -sass "$cubin" > $OUT/megakernel.sass 2>&1; echo "sass: $(wc -l < $OUT/megakernel.sass) lines" | tee -a $OUT/bench.log
fi
# at most 8 files come back: everything but the logs in one archive
(cd $OUT && tar czf extras.tgz --remove-files $(ls | grep -v -E '^(bench.log|gpu_tests.log|build.log|ws.log)$'))
