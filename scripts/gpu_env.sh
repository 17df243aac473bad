# Sourced by the device scripts (bash scripts/gpu_*.sh, repo root on the device machine):
# multicast off, the jsonschema wheels of .whl/ importable, this tree on PYTHONPATH, $OUT made,
# the versions and GPU as the first line of $OUT/summary.txt, and step().
# Set OUT_DEFAULT before sourcing for where logs go when the device tool sets no $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT="${OUT:-${OUT_DEFAULT:-/tmp/argus-device}}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then  # jsonschema and its needs: not in the GPU image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" ARGUS_CACHE_DIR=/tmp/argus-cache ARGUS_COMMIT="${ARGUS_COMMIT:-}"
# The image ships torch without bytecode and its site-packages cannot hold any: every new process
# recompiled ~1,100 torch modules (3.1 s of a profiled query, 15:33). A normal install has .pyc files;
# one writable prefix gives every process after the first the same.
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-/tmp/argus-pycache}"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))" | tee "$OUT/summary.txt"
step() {  # step NAME LIMIT_S COMMAND...: log to $OUT/NAME.log, one summary line in $OUT/summary.txt
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local tail_line
  tail_line=$(grep -hE "[0-9]+ (passed|failed)|rc=|unanswered|Argus demo summary|within target" "$OUT/$name.log" | tail -1)
  echo "$name: rc=$rc in $(( $(date +%s) - t0 )) s  $tail_line" | tee -a "$OUT/summary.txt"
}
