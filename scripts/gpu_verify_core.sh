#!/usr/bin/env bash
# One GPU verification of the measurement core (issues 3, 4, 7), for 2x H200, in under 150 s.
# Usage on the device machine, repo root (the package is not installed there):
#   NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 bash scripts/gpu_verify_core.sh
# Steps, each under its own `timeout` (the whole script never hangs):
#   1. argus query examples/ground_truth --region ground_truth --signals latency,instruction_mix,barrier_count
#   2. argus query examples/triton --region tma_matmul/kloop --signals async_completion_latency
#   3. checks of both reports (the assertions of their e2e GPU tests, which are deselected in step 4)
#   4. the other GPU tests (gpu marker) of the ground truth, region tracing, probes and end-to-end
#      queries, in the time that is left
# Writes exactly three files under $OUT: verify_core.log (all output), reports.json (both query
# reports, keyed by query) and reports.md (both markdown reports). A short table comes last.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/argus_verify_out}"
BUDGET_S="${BUDGET_S:-145}"  # whole script, seconds
mkdir -p "$OUT"
LOG="$OUT/verify_core.log"
: > "$LOG"
WORK="$(mktemp -d)"
export ARGUS_CACHE_DIR="${ARGUS_CACHE_DIR:-$WORK/cache}"  # builds shared by the queries and the tests
export ARGUS_TEST_ARTIFACTS="$WORK/test_reports"          # the tests' own reports stay out of $OUT
mkdir -p "$ARGUS_TEST_ARTIFACTS"
START=$(date +%s)
SUMMARY=()

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

step() {  # step NAME LIMIT_S CMD...: run with a hard limit, log everything, remember rc and seconds
    local name="$1" limit="$2"; shift 2
    local remaining; remaining=$(left)
    if [ "$remaining" -lt 10 ]; then
        echo "== $name: skipped, ${remaining}s of the budget left" | tee -a "$LOG"
        SUMMARY+=("$name|skipped (budget)|0"); return
    fi
    [ "$limit" -gt $((remaining - 3)) ] && limit=$((remaining - 3))
    echo "== $name (limit ${limit}s): $*" | tee -a "$LOG"
    local t0; t0=$(date +%s)
    timeout -k 5 "$limit" "$@" >> "$LOG" 2>&1
    local rc=$?
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== $name: TIMED OUT after ${limit}s" | tee -a "$LOG"
    SUMMARY+=("$name|rc=$rc|$(( $(date +%s) - t0 ))")
}

{ date -u; nvidia-smi -L 2>&1 | head -4; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available())"; command -v ncu || echo "ncu not on PATH"; git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1

step query_ground_truth 50 python3 -m argus_rt.cli query examples/ground_truth --region ground_truth \
    --signals latency,instruction_mix,barrier_count --workspace "$WORK/ws" --no-progress \
    --json "$WORK/gt.json" --markdown "$WORK/gt.md"
step query_triton_async 50 python3 -m argus_rt.cli query examples/triton --region tma_matmul/kloop \
    --signals async_completion_latency --workspace "$WORK/ws" --no-progress \
    --json "$WORK/tri.json" --markdown "$WORK/tri.md"

# The reports (or why there are none) go out before the tests, so a timeout below loses nothing.
python3 - "$WORK" "$OUT" >> "$LOG" 2>&1 <<'PY'
import json, sys
from pathlib import Path
work, out = Path(sys.argv[1]), Path(sys.argv[2])
queries = {"ground_truth latency,instruction_mix,barrier_count": "gt", "triton tma_matmul/kloop async_completion_latency": "tri"}
docs, md = {}, []
for key, stem in queries.items():
    j, m = work / f"{stem}.json", work / f"{stem}.md"
    docs[key] = json.loads(j.read_text()) if j.is_file() else {"missing": "the query wrote no report (see verify_core.log)"}
    md.append(m.read_text() if m.is_file() else f"# {key}\n\nno report: the query failed (see verify_core.log)\n")
    if j.is_file():
        d = docs[key]
        print(f"{key}: {len(d['values'])} values, unanswered {[u['signal'] for u in d['unanswered']]}")
# The same checks as the e2e GPU tests of these two queries (deselected below: not run twice).
def check(name, cond):
    print(f"CHECK {'ok  ' if cond else 'FAIL'} {name}")
gt, tri = docs["ground_truth latency,instruction_mix,barrier_count"], docs["triton tma_matmul/kloop async_completion_latency"]
if "values" in gt:
    v = {(x["signal"], x["region"], x["metric"]): x for x in gt["values"]}
    files = {(x["signal"], x["join"]["source_file"]): x["value"] for x in gt["values"] if "source_file" in (x.get("join") or {})}
    warps = 128 * 256 // 32
    check("ground truth: every signal answered", gt["unanswered"] == [])
    lat = [x for x in gt["values"] if x["signal"] == "latency" and x["metric"] == "mean"]
    check("ground truth: latency observed > 0", bool(lat) and all((x["value"] or 0) > 0 for x in lat))
    check("ground truth: FFMA stage_a = warps*(2000+3*500)", v.get(("instruction_mix", "ground_truth/stage_a", "FFMA"), {}).get("value") == warps * 3500)
    check("ground truth: BAR inner = warps*1500", v.get(("barrier_count", "ground_truth/stage_b/inner", "BAR"), {}).get("value") == warps * 1500)
    check("ground truth: -lineinfo view BAR all in ground_truth.cu", files.get(("barrier_count", "ground_truth.cu")) == warps * 1500)
    check("ground truth: -lineinfo view helper file > 0", (files.get(("instruction_mix", "gt_helper.cuh")) or 0) > 0)
else:
    check("ground truth: report written", False)
if "values" in tri:
    vals = [x for x in tri["values"] if x["signal"] == "async_completion_latency"]
    keys = {(x["join"]["op_id"], x["join"]["iteration"]) for x in vals}
    check("triton async: answered", tri["unanswered"] == [])
    check("triton async: 16 (op, iteration) values", len(vals) == 16 and len(keys) == 16)
    check("triton async: derived, > 0", bool(vals) and all(x["qualification"] == "derived" and (x["value"] or 0) > 0 for x in vals))
    check("triton async: joined to a reference wait", bool(vals) and all(x["join"].get("reference_wait_ns") is not None for x in vals))
else:
    check("triton async: report written", False)
(out / "reports.json").write_text(json.dumps(docs, indent=1, sort_keys=True) + "\n")
(out / "reports.md").write_text("\n\n".join(md))
PY

tests=()
for f in tests/test_ground_truth_gpu.py tests/test_backend_trace_gpu.py tests/test_probe_gpu.py tests/test_e2e_query_gpu.py; do
    [ -f "$f" ] && tests+=("$f")
done
step pytest_gpu 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rA --durations=8 "${tests[@]}" \
    -k "not test_query_ground_truth and not test_query_triton_async_completion_latency"

{
    echo; echo "== checks and pytest summary"
    grep -E "^CHECK |^(PASSED|FAILED|ERROR|SKIPPED) |^[0-9]+ (passed|failed|skipped|deselected|error)" "$LOG" | tail -40
    echo; echo "| step | result | seconds |"; echo "| --- | --- | --- |"
    for row in "${SUMMARY[@]}"; do echo "| ${row//|/ | } |"; done
    echo "total $(( $(date +%s) - START )) s of ${BUDGET_S} s"
} | tee -a "$LOG"
rm -rf "$WORK"
