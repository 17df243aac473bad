#!/usr/bin/env bash
# GPU runs for the backend adapters (issue 4). Usage on the device machine, repo root:
#   NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 bash scripts/gpu_backends.sh capture
#   NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 bash scripts/gpu_backends.sh test
# capture: builds the ground-truth kernel, checks it against its host reference, and saves real
#          ncu / cuobjdump / torch.profiler / nsys outputs under $OUT (fixtures for CPU tests).
# test:    runs the GPU tests of the backends, the ground truth and the end-to-end query.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/argus_out}"
mkdir -p "$OUT"
mode="${1:-capture}"
NVCC_ARCH="-gencode=arch=compute_90a,code=sm_90a"

capture() {
    local work; work="$(mktemp -d)"
    local cap="$work/capture"; mkdir -p "$cap"
    nvidia-smi -L; nvcc --version | tail -1; ncu --version | tail -1; cuobjdump --version | tail -1
    nvcc -O3 -lineinfo -DARGUS_MODE=1 $NVCC_ARCH -o "$work/gt" examples/ground_truth/ground_truth.cu || return 1
    cuobjdump -sass "$work/gt" > "$cap/gt_cuobjdump_sass.txt"
    "$work/gt" || return 1
    # The per-PC source page with the SourceCounters section only (the adapter's default) ...
    ncu --section SourceCounters --page source --print-source sass --csv --clock-control none \
        -k regex:ground_truth "$work/gt" > "$cap/ncu_gt_source_sass.csv" 2> "$cap/ncu_gt_source.err"
    echo "ncu source rc=$?"
    # ... kernel totals of the same section, to check that per-PC sums match the kernel's ...
    ncu --section SourceCounters --csv --clock-control none -k regex:ground_truth "$work/gt" \
        > "$cap/ncu_gt_details.csv" 2>&1
    echo "ncu details rc=$?"
    # ... and the full set on the source page, to learn which per-PC columns exist.
    ncu --set full --page source --print-source sass --csv --clock-control none \
        -k regex:ground_truth "$work/gt" > "$cap/ncu_gt_full_source_sass.csv" 2> "$cap/ncu_gt_full.err"
    echo "ncu full rc=$?"
    # A wrong-kernel filter: what ncu prints when nothing matched.
    ncu --section SourceCounters --page source --print-source sass --csv --clock-control none \
        -k regex:no_such_kernel "$work/gt" > "$cap/ncu_nomatch.csv" 2>&1
    echo "ncu nomatch rc=$?"
    python3 tests/fixtures/capture_kineto.py "$cap" 2>&1 | tail -5
    # nsys: not on PATH here; the copy inside Nsight Compute writes .qdstrm but (seen before) no report.
    { command -v nsys || echo "nsys not on PATH"; ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>&1;
      NSYS=$(ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)
      if [ -n "$NSYS" ]; then
          (cd "$work" && timeout 90 "$NSYS" profile -o "$work/nsys_gt" --force-overwrite true ./gt; echo "nsys rc=$?")
          ls -la "$work"/nsys_gt* 2>&1
      fi; } > "$cap/nsys_probe.txt" 2>&1
    tail -20 "$cap/nsys_probe.txt"
    ls -la "$cap"
    tar -C "$work" -czf "$OUT/capture.tar.gz" capture
    head -c 3000 "$cap/ncu_gt_source_sass.csv"; echo; head -c 1500 "$cap/ncu_gt_details.csv"
}

run_tests() {
    # Most important first; no -x: every test reports. Reports of the end-to-end queries land in $OUT.
    export ARGUS_TEST_ARTIFACTS="$OUT" ARGUS_CACHE_DIR="${ARGUS_CACHE_DIR:-/tmp/argus_cache}"
    timeout 240 python3 -m pytest -q -p no:cacheprovider -rA --durations=10 \
        tests/test_ground_truth_gpu.py tests/test_backend_trace_gpu.py tests/test_e2e_query_gpu.py \
        tests/test_systrace_gpu.py 2>&1 | tee "$OUT/pytest_gpu.txt"
    # Fresh fixtures of the current ground-truth source (ncu page + SASS of one build), if time is left.
    local work; work="$(mktemp -d)"
    nvcc -O3 -lineinfo -DARGUS_MODE=1 -gencode=arch=compute_90,code=sm_90 -Icsrc \
        -o "$work/gt" examples/ground_truth/ground_truth.cu && cuobjdump -sass "$work/gt" > "$OUT/gt2_cuobjdump_sass.txt" &&
    timeout 40 ncu --section SourceCounters --page source --print-source sass --csv --clock-control none \
        -k regex:ground_truth "$work/gt" > "$OUT/ncu_gt2_source_sass.csv" 2>&1
    echo "fixture capture rc=$?"
    # Short table last: per query, each region's mean latency (observed) and FFMA / BAR (attributed).
    python3 - "$OUT" <<'PY'
import glob, json, sys
for path in sorted(glob.glob(sys.argv[1] + "/report_*.json")):
    rep = json.load(open(path))
    vals = {(v["signal"], v["region"], v["metric"]): v for v in rep["values"]}
    regions = sorted({v["region"] for v in rep["values"] if v["region"] and not v["region"].startswith("<")})
    print(f"\n{path.rsplit('/', 1)[-1]}  unanswered: {[u['signal'] for u in rep['unanswered']] or 'none'}")
    print(f"{'region':34} {'mean latency':>14} {'FFMA':>12} {'BAR':>10} {'H(nats)':>8}")
    for r in regions:
        lat = vals.get(("latency", r, "mean"), {}).get("value")
        ffma = vals.get(("instruction_mix", r, "FFMA"), {})
        bar = vals.get(("barrier_count", r, "BAR"), {}).get("value")
        h = (ffma.get("ambiguity") or {}).get("entropy_nats")
        fmt = lambda x, f: "-" if x is None else format(x, f)
        print(f"{r:34} {fmt(lat, '>12.0f') + ' ns' if lat is not None else '-':>14} {fmt(ffma.get('value'), '>12.0f'):>12} "
              f"{fmt(bar, '>10.0f'):>10} {fmt(h, '>8.3f'):>8}")
PY
    tail -3 "$OUT/pytest_gpu.txt"
}

case "$mode" in
    capture) capture 2>&1 | tee "$OUT/capture_log.txt" ;;
    test) run_tests ;;
    *) echo "unknown mode '$mode'; valid: capture, test" >&2; exit 2 ;;
esac
