#!/usr/bin/env bash
# One device call = one kernel's full agent-client run (issue 19): both policies, 25 trials each, its
# tuning and held-out shapes, stopping cleanly before the call's time is up (--deadline-s).
#   KERNEL=tma_matmul ARGUS_COMMIT=<sha> bash scripts/gpu_agent_client.sh   (device machine, repo root)
#   KERNEL=layernorm  ARGUS_COMMIT=<sha> bash scripts/gpu_agent_client.sh
# Leaves under $OUT (the device tool returns only a few files): trials.json, table.md, progress.jsonl,
# best_so_far.png (if matplotlib is there), client.log, summary.txt (printed last). No --record here:
# merge the calls' trials.json on any machine, which also records:
#   python -m examples.agent_client --merge <tma>/trials.json <ln>/trials.json --out agent_client_out --record
# CALL_S: the seconds this call may take in all (default 540 of the tool's 600); BUDGET, SHAPES: the run's;
# EXTRA_ARGS: more client flags (a CPU check of this script: EXTRA_ARGS="--standin test_agent_client_standins").
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # before anything runs
OUT_DEFAULT=/tmp/argus-agent-client
source "$(dirname "$0")/gpu_env.sh"
KERNEL="${KERNEL:?set KERNEL=tma_matmul or KERNEL=layernorm}"
if ls .whl/mcp/*.whl >/dev/null 2>&1; then  # the MCP SDK (not in the GPU image), as gpu_verify.sh installs it
  python3 -m pip install -q --no-index --find-links .whl/mcp --target /tmp/site-mcp mcp==2.3.0 && export PYTHONPATH=/tmp/site-mcp:$PYTHONPATH
fi
CALL_S="${CALL_S:-540}"
DEADLINE_S=$(( CALL_S - SECONDS - 10 ))  # what set-up took is gone; 10 s for the summary and the return
echo "agent_client $KERNEL: budget ${BUDGET:-25}, shapes ${SHAPES:-4}, deadline ${DEADLINE_S} s after set-up (${SECONDS} s)" \
  >> "$OUT/summary.txt"
# timeout is the backstop only: the client stops itself at the deadline and writes whole files
step client $(( DEADLINE_S + 15 )) python3 -m examples.agent_client --kernels "$KERNEL" --budget "${BUDGET:-25}" \
  --shapes "${SHAPES:-4}" --deadline-s "$DEADLINE_S" --out "$OUT" ${EXTRA_ARGS:-}
grep -hE "^- |^not run:|^total wall time|^agent_client:" "$OUT/client.log" | cut -c1-400 >> "$OUT/summary.txt"
python3 - "$OUT/trials.json" >> "$OUT/summary.txt" <<'EOF' || echo "trials.json: missing or not whole" >> "$OUT/summary.txt"
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc["results"]:
    print(f"{r['kernel']} {r['policy']}: {len(r['trials'])} trials, best {r['trials'][r['best_trial'] - 1]['score']:.3f} "
          f"at trial {r['best_trial']}, {len(r['diagnoses'])} diagnoses ({r['diagnosis_seconds']:.0f} s), {r['stopped']}")
EOF
cat "$OUT/summary.txt"
