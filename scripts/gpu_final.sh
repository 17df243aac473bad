#!/usr/bin/env bash
# One device call that verifies the whole project on 2x H200: each part's own script, in priority
# order, under one overall deadline, each with its own time limit and output folder.
#   bash scripts/gpu_final.sh            (device machine, repo root; $OUT set by the device tool)
# Everything each part wrote is packed into $OUT/final.tar.gz; $OUT/summary.txt has one line a part.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export ARGUS_CACHE_DIR="${ARGUS_CACHE_DIR:-/tmp/argus-cache}"
FINAL_OUT="${OUT:-/tmp/argus-final}"
WORK=/tmp/argus-final-parts
BUDGET_S="${BUDGET_S:-560}"
mkdir -p "$FINAL_OUT" "$WORK"
start_all=$(date +%s)

part() {  # part NAME LIMIT_S COMMAND...: run with its own $OUT, cut at min(LIMIT, time left)
  local name=$1 limit=$2
  shift 2
  local left=$(( BUDGET_S - ($(date +%s) - start_all) ))
  if [ "$left" -lt 20 ]; then
    echo "$name: not run (overall budget spent)" | tee -a "$WORK/summary.txt"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  mkdir -p "$WORK/$name"
  local t0=$(date +%s)
  OUT="$WORK/$name" timeout --kill-after=10 "$limit" "$@" > "$WORK/$name/console.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $(( $(date +%s) - t0 )) s (limit $limit s)" | tee -a "$WORK/summary.txt"
  grep -hE "[0-9]+ (passed|failed|errors?)( |,|$)|^FAILED|^ERROR" "$WORK/$name/console.log" | tail -6 \
    | sed "s/^/  $name| /" | tee -a "$WORK/summary.txt"
}

{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv; git log -1 --oneline 2>/dev/null; } \
  > "$WORK/env.txt" 2>&1
part core 150 bash scripts/gpu_verify_core.sh
part megakernel 130 bash scripts/gpu_megakernel.sh tests
part trace 150 bash scripts/gpu_trace.sh
part demo 60 python3 -m argus_rt.cli demo --workspace /tmp/argus-demo-ws
part overlap 200 env TEST_TIMEOUT=60 BENCH_TIMEOUT=170 bash scripts/gpu_overlap.sh

cp "$WORK/summary.txt" "$FINAL_OUT/summary.txt"
tar czf "$FINAL_OUT/final.tar.gz" -C "$WORK" .
for name in core megakernel trace demo overlap; do
  [ -f "$WORK/$name/console.log" ] && { echo "== $name (last lines) =="; tail -n 25 "$WORK/$name/console.log"; }
done
echo "== final summary ($(( $(date +%s) - start_all )) s) =="
cat "$WORK/summary.txt"
