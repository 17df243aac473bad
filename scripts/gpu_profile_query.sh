#!/usr/bin/env bash
# Profile one CLI query (cProfile, top cumulative) on the device: where the time outside the runtime goes.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
P=${1:-examples/triton_corpus/softmax/argus_program.json}; S=${2:-instruction_mix,barrier_count}
export ARGUS_CACHE_DIR=$(mktemp -d)
timeout 120 python3 -m cProfile -o "$OUT/query.prof" -m argus_rt.cli query "$P" --signals "$S" --workspace "$(mktemp -d)/ws" --no-progress > "$OUT/profiled_query.log" 2>&1
python3 -c "import pstats,sys; p=pstats.Stats('$OUT/query.prof', stream=sys.stdout); p.sort_stats('cumulative').print_stats(45)" | cut -c1-200 > "$OUT/profile_top.txt"
