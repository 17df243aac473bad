#!/usr/bin/env bash
# Issue 4 on a GPU in one device call, repo root:
#   bash scripts/gpu_collectors.sh [all|tests|bench|demo]
# tests: the GPU tests of the end-to-end queries (Triton region latency included), forced-wait probes
#        and the trace backend; bench: benchmarks/collector_overhead.py; demo: the README main command.
# Logs land in $OUT (at most 8 files come back from the device: keep it that way).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export ARGUS_CACHE_DIR="${ARGUS_CACHE_DIR:-/tmp/argus_cache}"
OUT="${OUT:-/tmp/argus_out}"
mkdir -p "$OUT"
what="${1:-all}"
ART=/tmp/argus_artifacts   # query reports of the e2e tests; tarred into one file for $OUT
TESTS="${ARGUS_GPU_TESTS:-tests/test_e2e_query_gpu.py tests/test_probe_gpu.py tests/test_backend_trace_gpu.py}"

rc=0
tests() {
    mkdir -p "$ART"
    ARGUS_TEST_ARTIFACTS="$ART" timeout "${TESTS_LIMIT:-200}" python3 -m pytest -q -p no:cacheprovider -rfE \
        --durations=8 $TESTS 2>&1 | tee "$OUT/pytest_gpu.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    tar -C "$ART" -czf "$OUT/reports.tar.gz" . 2>/dev/null
}

bench() {
    timeout "${BENCH_LIMIT:-200}" python3 benchmarks/collector_overhead.py 2>&1 | tee "$OUT/bench_log.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
}

demo() {
    local ws; ws="$(mktemp -d)"
    timeout "${DEMO_LIMIT:-100}" python3 -m argus_rt.cli demo --workspace "$ws/ws" 2>&1 | tee "$OUT/demo_log.txt"
    local d="${PIPESTATUS[0]}"
    echo "demo rc=$d" | tee -a "$OUT/demo_log.txt"
    [ "$d" = 0 ] || rc=1
}

{ date -u; nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)";
  sha256sum benchmarks/collector_overhead.py examples/cuda/collector_study.cu; } 2>&1 | tee "$OUT/env.txt"
case "$what" in
    all) tests; bench; demo ;;
    tests) tests ;;
    bench) bench ;;
    demo) demo ;;
    *) echo "unknown part '$what'; valid: all, tests, bench, demo" >&2; exit 2 ;;
esac
# Short summary last.
echo "== summary =="
grep -E "passed|failed|error" "$OUT/pytest_gpu.txt" 2>/dev/null | tail -1
grep -E "^\| (trace_free|marker_only|pc_map|ncu|systrace) " "$OUT/bench_log.txt" 2>/dev/null
grep -E "demo rc=" "$OUT/demo_log.txt" 2>/dev/null
exit "$rc"
