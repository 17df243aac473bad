#!/usr/bin/env bash
# One device call for issue 15: the GPU test suite, then query wall times (benchmarks/query_wall.py).
#   ARGUS_COMMIT=<sha> QUERY_ONLY=cuda,softmax bash scripts/gpu_triton_check.sh   (device machine, repo root)
# Logs and the benchmark record under $OUT; one line per step in $OUT/summary.txt, printed last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/argus-triton-check}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then  # jsonschema and its needs: not in the GPU image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" ARGUS_CACHE_DIR=/tmp/argus-cache ARGUS_COMMIT="${ARGUS_COMMIT:-}"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))" | tee "$OUT/summary.txt"
step() {  # step NAME LIMIT_S COMMAND...: log to $OUT/NAME.log, one summary line
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $(( $(date +%s) - t0 )) s  $(grep -hE '[0-9]+ (passed|failed)|within target' "$OUT/$name.log" | tail -1)" | tee -a "$OUT/summary.txt"
}
step gpu_suite "${SUITE_S:-320}" python3 -m pytest -q -p no:cacheprovider -m "gpu or gpu2" -rs ${SUITE_ARGS:-}
grep -E "^(FAILED|ERROR) " "$OUT/gpu_suite.log" | cut -c1-300 | tee -a "$OUT/summary.txt"
step query_wall "${WALL_S:-240}" python3 benchmarks/query_wall.py --repeats "${REPEATS:-2}" --only "${QUERY_ONLY:-}"
tail -4 "$OUT/query_wall.log" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
