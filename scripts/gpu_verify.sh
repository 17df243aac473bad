#!/usr/bin/env bash
# One device call that re-checks the CPU-only work of a stop on the GPU: each named step runs its GPU tests
# or benchmark with a time limit and leaves one line in $OUT/summary.txt (printed last).
#   STEPS="kinds markers perfetto" ARGUS_COMMIT=<sha> bash scripts/gpu_verify.sh   (device machine, repo root)
# kinds: the program-kind re-cut (typed evidence, one trace adapter, kind hooks, build cache);
# markers: the marker paths' GPU tests and benchmarks/marker_cost.py; perfetto: the warp-role timeline of
# tests/fixtures/ws_pipeline, kept as docs/perfetto/ws_pipeline_warp_roles.json under $OUT; numba24: the numba
# kind's GPU tests under numpy 2.4.6 from .whl/numpy24; rest: every other GPU test but the megakernel's;
# mkquery: argus query of the real megakernel with every PC-attributed signal (report under $OUT/mk_query).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # before anything runs
OUT_DEFAULT=/tmp/argus-verify
source "$(dirname "$0")/gpu_env.sh"
if ls .whl/mcp/*.whl >/dev/null 2>&1; then  # the MCP SDK for tests/test_mcp_gpu.py (not in the GPU image)
  python3 -m pip install -q --no-index --find-links .whl/mcp --target /tmp/site-mcp mcp==2.3.0 && export PYTHONPATH=/tmp/site-mcp:$PYTHONPATH
fi
PYTEST=(python3 -m pytest -q -p no:cacheprovider -rs --durations=12 -m "gpu or gpu2")  # durations: to plan device calls
for s in ${STEPS:-kinds markers perfetto}; do
  case $s in
    kinds) step kinds "${KINDS_S:-450}" "${PYTEST[@]}" tests/test_proton_backend_gpu.py tests/test_e2e_query_gpu.py \
             tests/test_kind_cupy_gpu.py tests/test_kind_numba_gpu.py tests/test_backend_trace_gpu.py tests/test_probe_gpu.py \
             tests/test_probe_async_families_gpu.py tests/test_ground_truth_gpu.py tests/test_megakernel_argus_gpu.py \
             tests/test_mcp_gpu.py tests/test_worker_warm.py tests/test_typed_evidence_gpu.py tests/test_triton_corpus_gpu.py ;;
    markers) step marker_tests "${MARKERS_S:-150}" "${PYTEST[@]}" tests/test_marker_paths_gpu.py tests/test_trace_gpu.py tests/test_regcursor_v2_gpu.py tests/test_regcursor_lanes_gpu.py \
               tests/test_trace_regcursor_gpu.py
             step marker_cost "${COST_S:-200}" python3 benchmarks/marker_cost.py --reps "${REPS:-100}"
             tail -12 "$OUT/marker_cost.log" >> "$OUT/summary.txt"
             cp benchmarks/results/marker_cost.json "$OUT/" 2>/dev/null ;;
    perfetto) mkdir -p "$OUT/perfetto"
              ARGUS_PERFETTO_EXAMPLE="$OUT/perfetto/ws_pipeline_warp_roles.json" \
                step perfetto "${PERFETTO_S:-120}" python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/test_warp_roles_gpu.py ;;
    numba24) # the numba kind under numpy 2.4 (numba-cuda 0.30.4 does not run under the image's numpy 2.5):
             # carry .whl/numpy24 (pip download numpy==2.4.6 for cp312), installed beside, not over, the image's
             python3 -m pip install -q --no-index --no-deps --target /tmp/site-np24 .whl/numpy24/*.whl >/dev/null &&
               PYTHONPATH=/tmp/site-np24:$PYTHONPATH step numba_np24 "${NUMBA_S:-150}" "${PYTEST[@]}" -k numba tests/test_kind_numba_gpu.py \
                 tests/test_examples.py ;;
    rest) # the GPU tests no other step runs (the megakernel's own: scripts/gpu_mk_run.sh)
          step rest "${REST_S:-300}" "${PYTEST[@]}" tests/test_agent_client_gpu.py tests/test_overlap_gpu.py \
            tests/test_perfetto_align_gpu.py tests/test_systrace_gpu.py tests/test_triton_jit_gpu.py \
            tests/test_overlap_gemm_regions.py tests/test_tinyllama_generate.py tests/test_examples.py -k "not numba" ;;
    mkquery) # issue 16 item 1: the whole real megakernel through argus query, every PC-attributed signal, timed
             mkdir -p "$OUT/mk_query"
             step mk_query "${MKQUERY_S:-240}" python3 -m argus_rt.cli query examples/megakernel --region decode \
               --signals latency,instruction_mix,barrier_count,stall_reasons,branch_profile --no-progress \
               --json "$OUT/mk_query/report.json" --markdown "$OUT/mk_query/report.md" ;;
    *) echo "unknown step '$s'; valid: kinds markers perfetto numba24 rest mkquery" | tee -a "$OUT/summary.txt" ;;
  esac
done
grep -hE "^(FAILED|ERROR) " "$OUT"/*.log 2>/dev/null | sort -u | cut -c1-300 >> "$OUT/summary.txt"  # once, every step's
cat "$OUT/summary.txt"
# The device returns about 8 files per call (2026-12-02: the Perfetto example was left out behind 8 logs): the
# summary, marker_cost.json and the Perfetto example stay files, every log goes into one archive.
(cd "$OUT" && logs=$(ls | grep -v -E '^(summary\.txt|marker_cost\.json|perfetto|mk_query)$') &&
  [ -n "$logs" ] && tar czf logs.tgz --remove-files $logs)
