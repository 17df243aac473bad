// Persistent TinyLlama decode megakernel: one scheduler CTA (block 0) + N worker CTAs.
//
// Workers run instruction tickets in stream order (ticket t = step t / n_instr, instruction t % n_instr;
// worker r runs first + r, + W, ..., r its SM-spread rank: MK_STATIC_TICKETS and MK_SM_SPREAD below; with
// MK_STATIC_TICKETS=0 each takes them from a global counter), optionally prefetch weights into L2 or shared memory
// (the host's prefetch plan, stage_bytes: all off by default, measured slower on H200 on
// 2026-12-01, megakernel/NOTES.md rows 10-12), wait on the instruction's dependency counter, run
// it, and signal its counter. The
// stream is topologically ordered, so the lowest unfinished ticket can always run: no deadlock,
// and no grid-wide barrier anywhere. The scheduler CTA timestamps step boundaries (device-side
// ms/token) and watches for steps that never finish.
//
// Sampling is fused into the Logits tiles by default (MK_FUSED_SAMPLE=1, megakernel/NOTES.md row 14):
// each tile writes its best (value, index) and Sample reduces those; MK_FUSED_SAMPLE=0 (the runtime
// sets it from TileShape(fused_sample=False)) is the earlier Sample over all vocab logits.
//
// Opt-in build flags of the rows prepared next (config.cuh; megakernel/NOTES.md "Ready for the next device
// run"): MK_BATCH_QKV / MK_BATCH_O (the batched GEMV loop only in the QKV / O-proj tiles), MK_BATCH_PLAIN
// (their control) and MK_POLL2 (two pollers per dependency wait). Unset, the cubin is the default's, whose
// static tickets go by an SM-spread worker rank (MK_SM_SPREAD, row 23; =0 is the block-index order).
// MK_LAST_COMBINE (row 26, opt-in: TileShape(last_combine=True)): each KV-head group's attention combine runs once,
// in its last-arriving AttnPartial tile (attn_arrive), and O-proj loads the combined vector. MK_LAST_COMBINE=2 (row 27:
// TileShape(last_combine="auto")) compiles both combines and each instruction says which its launch runs: an
// AttnPartial arrives iff its A3 names a counter, an O-proj tile loads the combined vector iff its A2 is set (the
// host swaps two instruction lists per launch by the KV length: megakernel/runtime.py form_words).
// MK_ONE_SPLIT (row 40, opt-in: TileShape(single_split=N)): in the launches whose largest KV length is <= N (one
// non-empty split per head) each AttnPartial tile (A3 = ATTN_DIRECT) writes its heads' normalised output to attn_out and
// the O-proj tiles (A2 set) load it: no combine. Longer launches run the default's words (A3, A2 as without the flag).
//
// Build (megakernel/build.py does this, with generated headers in the build directory):
//   nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -O3 -Icsrc -I<build> -DARGUS_MODE=0 megakernel.cu
#include "argus/argus.cuh"
#include "megakernel_regions.h"
#include "megakernel_params.h"
#include "opcodes.cuh"
#include "config.cuh"
#include "common.cuh"
#include "sync.cuh"
#include "regions.cuh"
#include "gemv.cuh"
#include "attention.cuh"
#include "stage.cuh"
#include "ring.cuh"

namespace mk {


// Fused sampling: the default since 2026-12-01 (H200 at 15:08: 1.4% / 1.9% faster at kv 128 / 1024 than
// the Sample over all logits, NOTES.md row 14). The runtime sets MK_FUSED_SAMPLE=0 only for
// TileShape(fused_sample=False).
#ifndef MK_FUSED_SAMPLE
#define MK_FUSED_SAMPLE 1  // Logits tiles write per-tile (value, index) argmax partials; Sample reduces them
#endif
#if MK_LAST_COMBINE || MK_ONE_SPLIT
// MK_LAST_COMBINE, MK_ONE_SPLIT (row 40): the combined attention outputs [n_layers][hidden] lie between the partials
// and the sample pairs (with or without fused sampling: megakernel/state.py fusion_layout).
__device__ __forceinline__ float* attn_out_of(const Params& p) {
  return p.attn_part + (size_t)p.n_layers * p.n_heads * p.n_splits * (p.head_dim + 2);
}
#endif
#if MK_FUSED_SAMPLE
// The Logits tiles' best values, then their indices ([parts] each, parts = vocab / logits rows), after
// the attention partials in the same allocation (megakernel/state.py: fusion_layout): no parameter
// field and no build flag, the part count comes from the instructions.
#if MK_LAST_COMBINE || MK_ONE_SPLIT
__device__ __forceinline__ float* sample_val_of(const Params& p) { return attn_out_of(p) + (size_t)p.n_layers * p.hidden; }
#else
__device__ __forceinline__ float* sample_val_of(const Params& p) {
  return p.attn_part + (size_t)p.n_layers * p.n_heads * p.n_splits * (p.head_dim + 2);
}
#endif
__device__ __forceinline__ int* sample_idx_of(const Params& p, int parts) {
  return reinterpret_cast<int*>(sample_val_of(p) + parts);
}
#endif

#if MK_ONE_SPLIT
// row 40: a one-split launch's tile (A3 = ATTN_DIRECT) comes as split -1 and writes its heads' normalised output to
// attn_out[layer] (attention.cuh: attn_direct_out)
#define MK_ATTN_SPLIT(ins) ((ins)[W_A3] == ATTN_DIRECT ? -1 : (ins)[W_A1])
#else
#define MK_ATTN_SPLIT(ins) ((ins)[W_A1])
#endif

struct __align__(16) Smem {  // 16-byte aligned: xs and out are read as float4
  float xs[SMEM_FLOATS];
  float out[MAX_TILE_ROWS];
  float scratch[2 * NWARPS];
  int ins[INSTR_WORDS];
  int argmax_idx[NWARPS];
  unsigned long long stage_bar;  // mbarrier of the weight-staging copies
  unsigned stage_phase;          // parity of the next staged tile
  int staged;                    // bytes of this tile's leading weight rows in stage_buffer (0: none)
  unsigned ticket;
  unsigned next_ticket;
  int ok;
#if MK_RING
  Ring ring;  // the weight page ring (ring.cuh; opt-in)
#endif
#if MK_LAST_COMBINE
  int last_arrival;  // this AttnPartial tile was its group's last arrival: it combines the group
#endif
#if MK_POLL2
  int poll_seen;  // the two pollers' flag (sync.cuh: wait_counter_pair, poll_helper): 0 polling, 1 helper saw it, 2 done
#endif
#if MK_TMA_INPUT  // row 60 (tma_input.cuh)
  unsigned long long input_bar;  // the mbarrier of a tile's input copies (tma_input_issue)
  unsigned input_uses;           // thread 0's count of those copies: the next one's parity is its low bit
  unsigned input_parity;         // this tile's copy's parity, written by thread 0 before the wait's barrier
#endif
};

#include "tma_input.cuh"  // row 60 (MK_TMA_INPUT): empty without the flag


// Weight bytes a GEMV instruction streams (0 for other ops): what the L2 prefetch covers.
// *row_bytes: bytes of one weight row (a staged prefix is whole rows).
__device__ void tile_weights(const Params& p, const int* ins, const char** ptr, unsigned* bytes, unsigned* row_bytes) {
  const int layer = ins[W_LAYER];
  const size_t D = p.hidden, F = p.ffn, Dh = p.head_dim, KV = p.n_kv_heads * p.head_dim;
  const __nv_bfloat16* w = nullptr;
  size_t n = 0, k = D;
  switch (ins[W_OPCODE]) {
    case OP_QKV_HEAD: {
      const size_t rows = Dh / p.qkv_parts;
      const size_t base = (ins[W_A0] == HEAD_Q ? 0 : ins[W_A0] == HEAD_K ? D : D + KV) + ins[W_A1] * Dh + ins[W_A2] * rows;
      w = p.wqkv + ((size_t)layer * (D + 2 * KV) + base) * D;
      n = rows * D;
      break;
    }
    case OP_O_PROJ: w = p.wo + ((size_t)layer * D + ins[W_A0]) * D; n = (size_t)ins[W_A1] * D; break;
    case OP_GATE_UP: w = p.wgu + ((size_t)layer * 2 * F + 2 * (size_t)ins[W_A0]) * D; n = 2 * (size_t)ins[W_A1] * D; break;
    case OP_DOWN: w = p.wd + ((size_t)layer * D + ins[W_A0]) * F; n = (size_t)ins[W_A1] * F; k = F; break;
    case OP_LOGITS: w = p.lm_head + (size_t)ins[W_A0] * D; n = (size_t)ins[W_A1] * D; break;
    default: break;
  }
  *ptr = reinterpret_cast<const char*>(w);
  *bytes = (unsigned)(n * sizeof(__nv_bfloat16));
  *row_bytes = (unsigned)(k * sizeof(__nv_bfloat16));
}

#if MK_PF_GATE
// Row 45 (config.cuh: MK_PF_GATE): thread 0 waits for the tile's gate counter (an earlier phase of its layer, so the
// tile's own dependency implies it: no new deadlock), then bulk-prefetches into L2 the gated part of the tile's
// weights, the bytes after the head that the ticket-time prefetch covered; MK_PF_GATE=2 (row 46) bulk-copies the
// gated bytes' whole row pairs that fit the stage buffer into shared memory instead (*staged: their count, which
// tile_gemv reads, as a ticket-time stage's). Out of line: one copy of the wait loop.
__device__ __noinline__ bool gate_then_prefetch(const Params& p, const int* ins, WaitSite site, int step,
                                                unsigned long long* stage_bar, int* staged) {
  const unsigned gate = (unsigned)ins[W_PF_GATE];
  site.counter = (int)(gate >> PF_GATE_COUNT_BITS);
  const unsigned need = (unsigned)(step + 1) * (gate & ((1u << PF_GATE_COUNT_BITS) - 1u));
  if (!wait_counter(p, p.counters + site.counter, need, site, (unsigned long long)p.timeout_ns)) return false;
  const char* w;
  unsigned bytes, row_bytes;
  tile_weights(p, ins, &w, &bytes, &row_bytes);
  const unsigned flags = (unsigned)ins[W_PF_FLAGS];
#if MK_PF_GATE == 2
  const unsigned fit = ((unsigned)p.stage_bytes / row_bytes) & ~1u;
  const unsigned stage = min(min(bytes, (flags >> PF_GATE_LEN_SHIFT) * 16u) / (2u * row_bytes) * 2u, fit) * row_bytes;
  if (stage) stage_issue(stage_bar, w, stage);
  *staged = (int)stage;
#else
  const unsigned head = (flags & 1u) ? 0u : (MK_PF_OWN_CAP ? min(bytes, (unsigned)MK_PF_OWN_CAP) : bytes);
  const unsigned end = min(bytes, head + (flags >> PF_GATE_LEN_SHIFT) * 16u);
  for (unsigned off = head; off < end; off += 32768u) prefetch_l2(w + off, min(32768u, end - off));
#endif
  return true;
}
#endif

// Start of weight segment `seg` (kind * 256 + layer) of the host's prefetch plan (opcodes.cuh: PfSegment).
__device__ __forceinline__ const char* segment_base(const Params& p, int seg) {
  const size_t D = p.hidden, F = p.ffn, KV = p.n_kv_heads * p.head_dim, layer = (size_t)(seg & 0xff);
  const __nv_bfloat16* w;
  switch (seg >> 8) {
    case SEG_WQKV: w = p.wqkv + layer * (D + 2 * KV) * D; break;
    case SEG_WO: w = p.wo + layer * D * D; break;
    case SEG_WGU: w = p.wgu + layer * 2 * F * D; break;
    case SEG_WD: w = p.wd + layer * D * F; break;
    default: w = p.lm_head; break;
  }
  return reinterpret_cast<const char*>(w);
}

// GEMV of the current tile. s.staged = bytes of its leading rows bulk-copied into the stage buffer
// (0: none): the rows past them stream from global first (their loads go out while the copy lands),
// then the staged rows are read from shared memory.
// kBatch: the global rows use the batched GEMV loop (gemv.cuh: gemv_tile_as; the QKV / O-proj call sites
// with MK_BATCH_QKV / MK_BATCH_O), otherwise gemv_tile.
template <bool kBatch = false>
__device__ __forceinline__ void tile_gemv(const Params& p, Smem& s, const __nv_bfloat16* W, int K, int rows) {
#if MK_RING
  if (s.ring.bytes) {  // the tile's pages were started at ticket time (ring.cuh)
    if (!ring_gemv(s.ring, K, rows, s.xs, s.out, (unsigned long long)p.timeout_ns) && threadIdx.x == 0)
      raise_error(p, ERROR_STAGE_TIMEOUT, -1, -1, -1, -1);
    return;
  }
#endif
  if (s.staged) {
    const int srows = (int)(s.staged / (2u * (unsigned)K));
    if (srows < rows) gemv_tile_as<kBatch>(W + (size_t)srows * K, K, rows - srows, s.xs, s.out + srows);
    const bool landed = stage_wait(&s.stage_bar, s.stage_phase, (unsigned long long)p.timeout_ns);
    if (__syncthreads_or(!landed)) {  // every thread takes the same branch, even at the deadline's edge
      if (threadIdx.x == 0) raise_error(p, ERROR_STAGE_TIMEOUT, -1, -1, -1, -1);
      return;  // outputs are garbage, but the launch stops and the host raises
    }
    gemv_tile_staged(reinterpret_cast<const __nv_bfloat16*>(stage_buffer), K, srows, s.xs, s.out);
  } else {
    gemv_tile_as<kBatch>(W, K, rows, s.xs, s.out);
  }
}

// Uniform (0, 1) noise for Gumbel-max sampling; megakernel/interpreter.py: gumbel_uniform.
__device__ __forceinline__ float uniform_noise(unsigned seed, unsigned step, unsigned i) {
  unsigned x = i * 0x9E3779B1u + step * 0x85EBCA77u + seed;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return ((float)(x >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

// (best, best_i) over the CTA, the highest value and the lowest index on ties (NaNs never win); thread 0
// gets the result. Uses s.scratch and s.argmax_idx (the caller's earlier readers are behind a barrier).
__device__ __forceinline__ void block_argmax(Smem& s, float* best, int* best_i) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float b = *best;
  int bi = *best_i;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, b, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ob > b || (ob == b && oi < bi)) {
      b = ob;
      bi = oi;
    }
  }
  if (lane == 0) {
    s.scratch[warp] = b;
    s.argmax_idx[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < NWARPS; ++w)
      if (s.scratch[w] > b || (s.scratch[w] == b && s.argmax_idx[w] < bi)) {
        b = s.scratch[w];
        bi = s.argmax_idx[w];
      }
  }
  *best = b;
  *best_i = bi;
}

__device__ void op_embed(const Params& p, Smem& s, int step, bool* bad) {
  (void)s;
  const int tok = __ldcg(p.tokens + step);  // written by the previous step's Sample on another CTA
  if (tok < 0 || tok >= p.vocab) {
    *bad = true;
    return;
  }
  const uint4* row = reinterpret_cast<const uint4*>(p.embed + (size_t)tok * p.hidden);
  float4* x4 = reinterpret_cast<float4*>(p.x);
#pragma unroll 4
  for (int c = threadIdx.x; c < (int)(p.hidden >> 3); c += THREADS) {
    const uint4 w = __ldg(row + c);
    x4[2 * c] = make_float4(bf_lo(w.x), bf_hi(w.x), bf_lo(w.y), bf_hi(w.y));
    x4[2 * c + 1] = make_float4(bf_lo(w.z), bf_hi(w.z), bf_lo(w.w), bf_hi(w.w));
  }
}

// Part `part` of a q/k/v head (TileShape.qkv_parts parts per head). A q/k part's packed weight rows
// are its RoPE pairs: outputs [0, h) are dims part*h + j, outputs [h, 2h) dims Dh/2 + part*h + j.
__device__ void op_qkv(const Params& p, Smem& s, int layer, int kind, int head, int part, int step) {
  const int D = (int)p.hidden, Dh = (int)p.head_dim, KV = (int)(p.n_kv_heads * p.head_dim), half = Dh / 2;
  const int rows = Dh / (int)p.qkv_parts, h = rows / 2;
  float rstd;
  {
    MK_REGION(ARGUS_REGION_DECODE_NORM, coord(step, layer));
    rstd = load_rmsnorm(p.x + (size_t)layer * D, p.attn_norm + (size_t)layer * D, D, (float)p.eps, s.xs, s.scratch);
  }
  {
    MK_REGION(ARGUS_REGION_DECODE_GEMM, coord(step, layer));
    const size_t base = (kind == HEAD_Q ? 0 : kind == HEAD_K ? D : D + KV) + (size_t)head * Dh + (size_t)part * rows;
    tile_gemv<MK_BATCH_QKV != 0>(p, s, p.wqkv + ((size_t)layer * (D + 2 * KV) + base) * D, D, rows);
    __syncthreads();
  }
  MK_REGION(ARGUS_REGION_DECODE_KV_UPDATE, coord(step, layer));
  const int t = threadIdx.x;
  if (kind == HEAD_V) {
    if (t < rows)
      p.v_cache[(((size_t)layer * p.n_kv_heads + head) * p.max_seq + step) * Dh + part * rows + t] =
          __float2bfloat16(s.out[t] * rstd);
    return;
  }
  if (t < h) {  // RoPE, "rotate half" pairs (d, d + Dh/2) share the angle of position `step`
    const int d = part * h + t;
    const float c = p.rope_cos[(size_t)step * half + d], sn = p.rope_sin[(size_t)step * half + d];
    const float a = s.out[t] * rstd, b = s.out[h + t] * rstd;
    const float y0 = a * c - b * sn, y1 = b * c + a * sn;
    if (kind == HEAD_Q) {
      float* q = p.q + (size_t)layer * D + (size_t)head * Dh;
      q[d] = y0;
      q[d + half] = y1;
    } else {
      __nv_bfloat16* k = p.k_cache + (((size_t)layer * p.n_kv_heads + head) * p.max_seq + step) * Dh;
      k[d] = __float2bfloat16(y0);
      k[d + half] = __float2bfloat16(y1);
    }
  }
}

#if MK_LAST_COMBINE
// After the partial (written by the whole CTA): one arrival on the group's counter (A3), empty splits included;
// the tile that brings it to (step + 1) * tiles per group combines the group's splits for O-proj. Every tile of
// step s arrives before any of step s + 1 (s + 1's attention waits, through the layers, on s's Sample).
// MK_LAST_COMBINE=2: a tile whose A3 names no counter (a launch of the O-proj form) returns at once; those launches
// add no arrivals, so the last arrival is the one that brings the counter to a whole multiple of the tiles per group
// (by the same ordering, this step's multiple).
__device__ __noinline__ void attn_arrive(const Params& p, Smem& s, int layer, int kv_head, int step) {
#if MK_LAST_COMBINE == 2
  // the same for every thread (s.ins was written before a barrier); MK_ONE_SPLIT's ATTN_DIRECT tiles arrive nowhere
  if (s.ins[W_A3] < 0) return;
#endif
  __syncthreads();  // the partial's writes are done before thread 0's release
  if (threadIdx.x == 0) {
    // the launch's tiles per group: its split length's cover of the capacity (row 57: a long-split launch's, not the
    // state's n_splits slots of the short split)
    const unsigned per_step = (unsigned)(((p.max_seq + p.attn_split - 1) / p.attn_split) * p.attn_head_parts);
    const unsigned before = atom_acq_rel_add(p.counters + s.ins[W_A3], 1u);
#if MK_LAST_COMBINE == 2
    (void)step;
    s.last_arrival = (before + 1u) % per_step == 0u;
#else
    s.last_arrival = before + 1u == (unsigned)(step + 1) * per_step;
#endif
  }
  __syncthreads();  // thread 0's acquire saw every arrival: the group's partials are visible after this
  if (s.last_arrival) combine_group(p, layer, kv_head, step, s.xs, attn_out_of(p) + (size_t)layer * p.hidden);
}
#endif

#if MK_LAST_COMBINE == 2 || MK_ONE_SPLIT
// O-proj's input in the form of this tile's launch (OProj.combined, A2): the groups' combined vector, or the combine
// of every head's splits. ptxas (nvcc 13.0, 2026-12-02): with both combines in the binary the worker spills 20 B more
// (stores; 168 B more loads: threadIdx.x, reloaded after each GEMV call) in every arrangement tried (megakernel/NOTES.md
// "Ready: row 27"); with either combine alone, the default's spills. MK_ONE_SPLIT (row 40): A2 is set in the launches
// of the one-split form, whose AttnPartial tiles wrote attn_out themselves.
__device__ __forceinline__ void oproj_input(const Params& p, Smem& s, int layer, int step) {
  if (s.ins[W_A2])
    load_vector(attn_out_of(p) + (size_t)layer * p.hidden, (int)p.hidden, s.xs);
  else
    load_attention_combined(p, layer, step, s.xs);
}
#endif

__device__ void op_oproj(const Params& p, Smem& s, int layer, int row0, int rows, int step) {
  const int D = (int)p.hidden;
  {
    MK_REGION(ARGUS_REGION_DECODE_ATTENTION, coord(step, layer));
#if MK_LAST_COMBINE == 1
    load_vector(attn_out_of(p) + (size_t)layer * D, D, s.xs);  // every group's combine signalled attn[layer]
#elif MK_LAST_COMBINE == 2 || MK_ONE_SPLIT
    oproj_input(p, s, layer, step);
#else
    load_attention_combined(p, layer, step, s.xs);
#endif
  }
  MK_REGION(ARGUS_REGION_DECODE_GEMM, coord(step, layer));
#if MK_O_PIECES
  // Row 38: every warp one row, its loads in whole batches (gemv.cuh: gemv_batches); a staged prefix (stage_bytes,
  // never with the rows of decode.py) keeps tile_gemv, which reads it.
  if (s.staged)
    tile_gemv(p, s, p.wo + ((size_t)layer * D + row0) * D, D, rows);
  else
    gemv_batches<NWARPS, 1, MK_O_TRIPS>(p.wo + ((size_t)layer * D + row0) * D, D, rows, s.xs, s.out);
#else
  tile_gemv<MK_BATCH_O != 0>(p, s, p.wo + ((size_t)layer * D + row0) * D, D, rows);
#endif
  __syncthreads();
  for (int r = threadIdx.x; r < rows; r += THREADS)
    p.x_mid[(size_t)layer * D + row0 + r] = __ldcg(p.x + (size_t)layer * D + row0 + r) + s.out[r];
}

__device__ void op_gate_up(const Params& p, Smem& s, int layer, int f0, int nf, int step) {
  const int D = (int)p.hidden;
  float rstd;
  {
    MK_REGION(ARGUS_REGION_DECODE_NORM, coord(step, layer));
    rstd = load_rmsnorm(p.x_mid + (size_t)layer * D, p.ffn_norm + (size_t)layer * D, D, (float)p.eps, s.xs, s.scratch);
  }
  MK_REGION(ARGUS_REGION_DECODE_GEMM, coord(step, layer));
  tile_gemv(p, s, p.wgu + ((size_t)layer * 2 * p.ffn + 2 * (size_t)f0) * D, D, 2 * nf);
  __syncthreads();
  for (int f = threadIdx.x; f < nf; f += THREADS) {  // SiLU(gate) * up, fused into the GEMV tile
    const float g = s.out[f] * rstd, u = s.out[nf + f] * rstd;
    p.h[(size_t)layer * p.ffn + f0 + f] = g / (1.f + expf(-g)) * u;
  }
}

__device__ void op_down(const Params& p, Smem& s, int layer, int row0, int rows, int step) {
  const int D = (int)p.hidden, F = (int)p.ffn;
  MK_REGION(ARGUS_REGION_DECODE_GEMM, coord(step, layer));
  // Detail builds split the gemm region: the activation load (h, written by gate/up this step) and the
  // weight loop, each ending at a CTA barrier (NOTES.md "Ready: row 25").
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_GEMM_DOWN_VECTOR, coord(step, layer));
#if MK_TMA_INPUT & 4
  // row 60: h by one bulk copy (a branch here to load_vector made ptxas spill attention_partial_v2: the choice is
  // inside the helper)
  if (!tma_down_vector(p, s, layer)) return;  // the error is raised; the launch stops
#else
  load_vector(p.h + (size_t)layer * F, F, s.xs);
#endif
  MK_DETAIL_END(ARGUS_REGION_DECODE_GEMM_DOWN_VECTOR, coord(step, layer));
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_GEMM_DOWN_WEIGHTS, coord(step, layer));
#if MK_DOWN_PIECES && MK_TAIL_LOADS
  // Row 55: the residual's input (x_mid, final since this tile's wait) loads beside the weight stream; loaded after
  // it, its L2 round trip was the tile's last step, on the phase's critical path. rows <= THREADS (MAX_TILE_ROWS).
  const float x_mid_r = threadIdx.x < rows ? __ldcg(p.x_mid + (size_t)layer * D + row0 + threadIdx.x) : 0.f;
#endif
#if MK_DOWN_PIECES
  // Row 36 (the default): every warp streams (row, K-half) pieces (gemv.cuh: gemv_tile_pieces). No staged or ring
  // path: the host refuses stage_bytes and ring_pages unless -DMK_DOWN_PIECES=0 (runtime.py), MK_RING refuses the
  // pieces at compile time (config.cuh).
  gemv_tile_pieces(p.wd + ((size_t)layer * D + row0) * F, F, rows, s.xs, s.out);
#else
  tile_gemv(p, s, p.wd + ((size_t)layer * D + row0) * F, F, rows);
#endif
  __syncthreads();
  MK_DETAIL_END(ARGUS_REGION_DECODE_GEMM_DOWN_WEIGHTS, coord(step, layer));
#if MK_DOWN_PIECES && MK_TAIL_LOADS
  if (threadIdx.x < rows) p.x[(size_t)(layer + 1) * D + row0 + threadIdx.x] = x_mid_r + s.out[threadIdx.x];
#else
  for (int r = threadIdx.x; r < rows; r += THREADS)
    p.x[(size_t)(layer + 1) * D + row0 + r] = __ldcg(p.x_mid + (size_t)layer * D + row0 + r) + s.out[r];
#endif
}

__device__ void op_logits(const Params& p, Smem& s, int row0, int rows, int step) {
  const int D = (int)p.hidden, L = (int)p.n_layers;
  float rstd;
  {
    MK_REGION(ARGUS_REGION_DECODE_NORM, coord(step, L));
    rstd = load_rmsnorm(p.x + (size_t)L * D, p.final_norm, D, (float)p.eps, s.xs, s.scratch);
  }
  MK_REGION(ARGUS_REGION_DECODE_LOGITS, coord(step, L));
  tile_gemv(p, s, p.lm_head + (size_t)row0 * D, D, rows);
  __syncthreads();
  for (int r = threadIdx.x; r < rows; r += THREADS) p.logits[row0 + r] = s.out[r] * rstd;
#if MK_FUSED_SAMPLE
  {  // this tile's argmax partial, exactly the values op_sample would compare
    const float temp = (float)p.temperature;
    float best = -INFINITY;
    int best_i = 0x7fffffff;
    for (int r = threadIdx.x; r < rows; r += THREADS) {
      const int i = row0 + r;
      float v = s.out[r] * rstd;
      if (temp > 0.f) v = v / temp - logf(-logf(uniform_noise((unsigned)p.seed, (unsigned)step, (unsigned)i)));
      if (v > best || (v == best && i < best_i)) {
        best = v;
        best_i = i;
      }
    }
    block_argmax(s, &best, &best_i);
    if (threadIdx.x == 0) {
      sample_val_of(p)[row0 / rows] = best;
      sample_idx_of(p, (int)p.vocab / rows)[row0 / rows] = best_i;
    }
  }
#endif
}

__device__ void op_sample(const Params& p, Smem& s, int step) {
  if (step + 1 < p.n_forced || step + 1 > p.max_seq) return;  // the next token is given (prompt)
  MK_REGION(ARGUS_REGION_DECODE_SAMPLING, coord(step, (int)p.n_layers));
#if MK_FUSED_SAMPLE
  {  // reduce the Logits tiles' (value, index) partials, one per Logits tile Sample waited for: 2 loads per
     // thread in flight
    float best = -INFINITY;
    int best_i = 0x7fffffff;
    const int parts = s.ins[W_WAIT_COUNT];
    const float* vals = sample_val_of(p);
    const int* idx = sample_idx_of(p, parts);
#pragma unroll 2
    for (int j = threadIdx.x; j < parts; j += THREADS) {
      const float v = __ldcg(vals + j);
      const int i = __ldcg(idx + j);
      if (v > best || (v == best && i < best_i)) {
        best = v;
        best_i = i;
      }
    }
    block_argmax(s, &best, &best_i);
    if (threadIdx.x == 0) p.tokens[step + 1] = best_i == 0x7fffffff ? -1 : best_i;
  }
#else
  // The Sample over all vocab logits (TileShape(fused_sample=False)): kept token for token as the default
  // build measured up to 2026-12-01 15:08 (same SASS), so benchmarks/decode.py mk_nofsample re-measures it.
  const float temp = (float)p.temperature;
  float best = -INFINITY;
  int best_i = 0x7fffffff;
  const float4* l4 = reinterpret_cast<const float4*>(p.logits);
  const int n4 = (int)(p.vocab >> 2);
  // MK_SAMPLE_BATCH 16-byte loads per thread issued before any is used (clamped indices, branch-free),
  // so the 128 KB of logits take a couple of L2 round trips instead of one per 4 loads.
  for (int c0 = threadIdx.x; c0 < n4; c0 += MK_SAMPLE_BATCH * THREADS) {
    float4 q[MK_SAMPLE_BATCH];
#pragma unroll
    for (int u = 0; u < MK_SAMPLE_BATCH; ++u) q[u] = __ldcg(l4 + min(c0 + u * THREADS, n4 - 1));
#pragma unroll
    for (int u = 0; u < MK_SAMPLE_BATCH; ++u) {
      const int c = c0 + u * THREADS;
      const float vals[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = 4 * c + k;
        float v = vals[k];
        if (temp > 0.f) v = v / temp - logf(-logf(uniform_noise((unsigned)p.seed, (unsigned)step, (unsigned)i)));
        if (c < n4 && (v > best || (v == best && i < best_i))) {
          best = v;
          best_i = i;
        }
      }
    }
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int o = 16; o > 0; o >>= 1) {  // argmax, lowest index on ties
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (ob > best || (ob == best && oi < best_i)) {
      best = ob;
      best_i = oi;
    }
  }
  if (lane == 0) {
    s.scratch[warp] = best;
    s.argmax_idx[warp] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < NWARPS; ++w)
      if (s.scratch[w] > best || (s.scratch[w] == best && s.argmax_idx[w] < best_i)) {
        best = s.scratch[w];
        best_i = s.argmax_idx[w];
      }
    // All-NaN logits leave best_i out of range: the next Embed reports ERROR_BAD_TOKEN.
    p.tokens[step + 1] = best_i == 0x7fffffff ? -1 : best_i;
  }
#endif
}

__device__ __forceinline__ unsigned take_ticket(const Params& p, unsigned end) {
  return error_code(p.error) == ERROR_NONE ? atomicAdd(p.ticket, 1u) : end;
}

// MK_STATIC_TICKETS (the default since 2026-12-01 21:12, NOTES.md row 20: 1.021 vs 1.079 ms/token at kv 128,
// 1.177 vs 1.237 at kv 1024): worker w (block w + 1) runs tickets first + w, first + w + W, ... (W workers)
// instead of taking each from the global counter, so no atomic or error-slot load sits between a
// dependency being seen and the body starting (hand-offs 1.2 -> 0.9 us), and one CTA never holds two
// tiles of a phase. Still deadlock-free: each worker runs its tickets in increasing order, so the lowest
// unfinished ticket's worker is at it, and everything it waits for is lower. MK_STATIC_TICKETS=0
// (benchmarks/decode.py mk_dynamic) is the global counter, as measured up to then.
#ifndef MK_STATIC_TICKETS
#define MK_STATIC_TICKETS 1
#endif
// MK_SM_SPREAD (the default with the static tickets since row 23, NOTES.md: 1.001 vs 1.022 ms/token at kv 128,
// 1.125 vs 1.177 at kv 1024, with 22-feature gate/up tiles; benchmarks/decode.py mk_nospread is the block-index
// order with 32-feature tiles as measured before): the static tickets go by an SM-spread rank, not blockIdx.x - 1. Workers ordered by (slot on their SM, smid) put each SM's first
// worker at ranks 0..S-1 and its second after, so a run of up to ~S consecutive tickets (a 128-tile phase) lands
// on distinct SMs; by block index, two consecutive workers can share an SM (the trace's 2 tiles per SM in every
// phase). Same per-tile arithmetic, same deadlock-freedom: the rank is a permutation of the workers. Cost: one
// registration round per launch (an atomic, a release add, a wait for all workers, W/256 loads per thread),
// spread over the launch's steps: 64 in benchmarks/decode.py (--steps) and tinyllama.generate (chunk=64).
#ifndef MK_SM_SPREAD
#define MK_SM_SPREAD MK_STATIC_TICKETS  // the counter (mk_dynamic) has no ticket order to spread
#endif
#if MK_SM_SPREAD && !MK_STATIC_TICKETS
#error "MK_SM_SPREAD orders the static tickets: it needs MK_STATIC_TICKETS=1"
#endif
#if MK_SM_SPREAD
__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// This worker's rank among the W workers by (slot on its SM, smid), returned to every thread (W: the wait for
// the others failed, the error slot says why, and the worker takes no ticket). The area after the dispatch
// cursor, zeroed by the host before each launch (megakernel/runtime.py: spread_words): p.ticket[1] arrivals,
// then SPREAD_SMS per-SM slot counters, then one key per worker. SMs whose ids alias modulo SPREAD_SMS share a
// slot counter: keys stay unique (the smid is in the key), only the spread suffers.
__device__ unsigned spread_rank(const Params& p) {
  const unsigned W = gridDim.x - 1;
  unsigned* arrived = p.ticket + 1;
  unsigned* slots = arrived + 1;
  unsigned* keys = slots + SPREAD_SMS;
  bool failed = false;
  if (threadIdx.x == 0) {
    const unsigned sm = sm_id();
    const unsigned slot = atomicAdd(slots + sm % SPREAD_SMS, 1u);
    keys[blockIdx.x - 1] = slot << 16 | (sm & 0xffffu);
    red_release_add(arrived, 1u);  // orders the key before the arrival
    const WaitSite site{-1, (int)p.step_begin, -1, -1, -1, -1};  // no instruction: the registration round
    failed = !wait_counter(p, arrived, W, site, (unsigned long long)p.timeout_ns);
  }
  if (__syncthreads_or(failed)) return W;  // thread 0's acquire saw every arrival: the keys are visible after this
  const unsigned mine = __ldcg(keys + blockIdx.x - 1);
  unsigned rank = 0;
  for (unsigned j0 = 0; j0 < W; j0 += THREADS) {
    const unsigned j = j0 + threadIdx.x;
    rank += (unsigned)__syncthreads_count(j < W && __ldcg(keys + j) < mine);
  }
  return rank;
}
#endif

__device__ __forceinline__ unsigned first_ticket(const Params& p, unsigned end) {
#if MK_SM_SPREAD
  const unsigned rank = spread_rank(p);  // every thread calls it (barriers inside)
  return rank == gridDim.x - 1 ? end : (unsigned)(p.step_begin * p.n_instr) + rank;
#elif MK_STATIC_TICKETS
  (void)end;
  return (unsigned)(p.step_begin * p.n_instr) + (blockIdx.x - 1);
#else
  return take_ticket(p, end);
#endif
}

#include "early.cuh"  // row 48 (MK_EARLY_REGS): empty without the flag

__device__ void worker(const Params& p, Smem& s) {
  const unsigned n_instr = (unsigned)p.n_instr, end = (unsigned)p.ticket_end;
#if MK_SM_SPREAD
  const unsigned first = first_ticket(p, end);  // collective: before the thread-0 block
#endif
  if (threadIdx.x == 0) {
#if MK_SM_SPREAD
    s.ticket = first;
#else
    s.ticket = first_ticket(p, end);
#endif
    s.stage_phase = 0;
    s.staged = 0;
#if MK_POLL2
    s.poll_seen = 0;
#endif
    if (p.stage_bytes > 0) stage_init(&s.stage_bar);
#if MK_RING
    ring_init(s.ring);
#endif
#if MK_TMA_INPUT
    stage_init(&s.input_bar);
    s.input_uses = 0;
#endif
  }
  __syncthreads();
  for (;;) {
    const unsigned t = s.ticket;
    if (t >= end) break;
    const int step = (int)(t / n_instr), index = (int)(t % n_instr);
    if (threadIdx.x < INSTR_WORDS) s.ins[threadIdx.x] = __ldg(p.instructions + (size_t)index * INSTR_WORDS + threadIdx.x);
    __syncthreads();
    const int op = s.ins[W_OPCODE], layer = s.ins[W_LAYER];
#if MK_EARLY_REGS
    if (early_eligible(p, s.ins, op)) {  // the same for every thread: s.ins was written before a barrier
      if (!early_tile(p, s, t, step, index, op, layer)) break;
    } else {
#endif
    ARGUS_BEGIN_AT(ARGUS_REGION_DECODE_CORE_LOOP, coord(step, layer));
    if (threadIdx.x < 32) {  // stream weights while the dependency resolves
      const char* w;
      unsigned bytes, row_bytes;
      tile_weights(p, s.ins, &w, &bytes, &row_bytes);
      // Leading whole rows (an even count: GEMV_ROWS pairs) that fit the stage buffer go to shared memory.
      unsigned stage = 0;
      if (MK_PF_GATE != 2 && bytes > 0 && p.stage_bytes > 0) {  // row 46's buffer is the gated tiles' alone
        const unsigned fit = ((unsigned)p.stage_bytes / row_bytes) & ~1u;
        stage = min(bytes, fit * row_bytes);
      }
      if (stage && threadIdx.x == 0) stage_issue(&s.stage_bar, w, stage);  // into shared memory
#if MK_RING
      // Whole rows of 256 bf16 multiples (ring_gemv's warp-per-row-piece reads); other tiles take gemv_tile.
      if (threadIdx.x == 0 && bytes > 0 && !stage && (row_bytes & 511u) == 0) ring_start_tile(s.ring, w, bytes);
#else
      if (bytes > stage && !(s.ins[W_PF_FLAGS] & 1))  // the rest into L2 (MK_PF_OWN_CAP: only its head)
        prefetch_tile(w + stage, MK_PF_OWN_CAP ? min(bytes - stage, (unsigned)MK_PF_OWN_CAP) : bytes - stage);
#endif
      if (threadIdx.x == 0) s.staged = (int)stage;
#if MK_KV_PREFETCH
      // row 44: an attention tile's K/V rows into L2 while it waits for q
      if (op == OP_ATTN_PARTIAL) kv_prefetch_l2(p, layer, s.ins[W_A0], MK_ATTN_SPLIT(s.ins), step);
#endif
      // The host's prefetch plan: up to two weight ranges further down the stream (a byte window ahead).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const unsigned word = (unsigned)s.ins[W_PF_A + 2 * r], len = (word & 0xfffffu) * 16u;
        if (len) prefetch_tile(segment_base(p, (int)(word >> 20)) + (size_t)(unsigned)s.ins[W_PF_A_OFF + 2 * r] * 16u, len);
      }
      const unsigned ahead = t + (unsigned)p.prefetch_ahead;
      if (p.prefetch_ahead > 0 && ahead < end) {
        tile_weights(p, p.instructions + (size_t)(ahead % n_instr) * INSTR_WORDS, &w, &bytes, &row_bytes);  // read from global
        if (bytes) prefetch_tile(w, bytes);
      }
    }
    if (threadIdx.x == 0) {
      bool ok = true;
#if MK_STATIC_TICKETS
      s.next_ticket = t + (gridDim.x - 1);
#endif
      const int wait = s.ins[W_WAIT];
      if (wait != NO_COUNTER) {
        const int need = (step + 1 + s.ins[W_WAIT_DELTA]) * s.ins[W_WAIT_COUNT];
        if (need > 0) {
          const WaitSite site{(int)t, step, index, op, layer, wait};
#if MK_POLL2
          ok = wait_counter_pair(p, p.counters + wait, (unsigned)need, site, (unsigned long long)p.timeout_ns, &s.poll_seen);
#else
          MK_DETAIL_LANE(ARGUS_REGION_DECODE_CORE_LOOP_WAIT, coord(step, layer));
#if MK_PF_GATE
          if (s.ins[W_PF_GATE]) ok = gate_then_prefetch(p, s.ins, site, step, &s.stage_bar, &s.staged);  // rows 45-46
#endif
          if (ok) ok = wait_counter(p, p.counters + wait, (unsigned)need, site, (unsigned long long)p.timeout_ns);
#endif
        }
      }
      s.ok = ok;
      // Take the next ticket now: the atomic's latency hides behind this tile's work. Holding it
      // is deadlock-free: it is higher than the one we run, which needs only lower tickets.
#if !MK_STATIC_TICKETS
      if (ok) s.next_ticket = take_ticket(p, end);
#endif
    }
#if MK_POLL2
    if (threadIdx.x == 32) {  // the second poller of the same counter (warp 1), half a poll period behind
      const int wait = s.ins[W_WAIT];
      const int need = (step + 1 + s.ins[W_WAIT_DELTA]) * s.ins[W_WAIT_COUNT];
      if (wait != NO_COUNTER && need > 0) poll_helper(p.counters + wait, (unsigned)need, &s.poll_seen);
    }
#endif
    __syncthreads();
    ARGUS_END_AT(ARGUS_REGION_DECODE_CORE_LOOP, coord(step, layer));
    if (!s.ok) {
      if (s.staged) stage_wait(&s.stage_bar, s.stage_phase, (unsigned long long)p.timeout_ns);  // no copy outlives the CTA
#if MK_RING
      if (s.ring.bytes) ring_drain(s.ring, (unsigned long long)p.timeout_ns);
#endif
      break;
    }
    bool bad = false;
    switch (op) {
      case OP_EMBED: op_embed(p, s, step, &bad); break;
      case OP_QKV_HEAD: op_qkv(p, s, layer, s.ins[W_A0], s.ins[W_A1], s.ins[W_A2], step); break;
      case OP_ATTN_PARTIAL: {
        MK_REGION(ARGUS_REGION_DECODE_ATTENTION, coord(step, layer));
        attention_partial(p, layer, s.ins[W_A0], MK_ATTN_SPLIT(s.ins), s.ins[W_A2], step, s.xs);
#if MK_LAST_COMBINE
        attn_arrive(p, s, layer, s.ins[W_A0], step);  // MK_LAST_COMBINE=2: returns at once in an O-proj-form launch
#endif
        break;
      }
      case OP_O_PROJ: op_oproj(p, s, layer, s.ins[W_A0], s.ins[W_A1], step); break;
      case OP_GATE_UP: op_gate_up(p, s, layer, s.ins[W_A0], s.ins[W_A1], step); break;
      case OP_DOWN: op_down(p, s, layer, s.ins[W_A0], s.ins[W_A1], step); break;
      case OP_LOGITS: op_logits(p, s, s.ins[W_A0], s.ins[W_A1], step); break;
      case OP_SAMPLE: op_sample(p, s, step); break;
      default: bad = true; break;
    }
    if (bad && threadIdx.x == 0)
      raise_error(p, op == OP_EMBED ? ERROR_BAD_TOKEN : ERROR_BAD_OPCODE, (int)t, step, index, op);
#if MK_EARLY_REGS
    }
#endif
    __syncthreads();  // every thread's writes of this tile are done ...
    if (threadIdx.x == 0) {
#if MK_THREADFENCE
      __threadfence();  // before 2026-12-01 12:50; measured 1.3% slower (megakernel/NOTES.md)
#endif
      // The release add alone orders the CTA's writes (ordered before it by the barrier above;
      // release is cumulative) before the counter update: no full fence needed.
      red_release_add(p.counters + s.ins[W_SIGNAL], 1u);  // ... before the counter says so
      s.ticket = s.next_ticket;
      if (s.staged) s.stage_phase ^= 1u;
#if MK_RING
      ring_end_tile(s.ring);
#endif
#if MK_POLL2
      s.poll_seen = 0;  // both pollers left their loops before the barrier after the wait
#endif
    }
    __syncthreads();
  }
}

// Block 0: device-side timestamps of step boundaries (step_ns[0] = start, step_ns[i + 1] = end of
// step step_begin + i), and a watchdog on whole steps.
__device__ void scheduler(const Params& p, Smem& s) {
  if (threadIdx.x != 0) return;
  p.step_ns[0] = globaltimer_ns();
  for (int step = (int)p.step_begin; step < p.step_end; ++step) {
    ARGUS_SCOPE_AT(ARGUS_REGION_DECODE_CORE_LOOP, coord(step, 0xff));
    const WaitSite site{-1, step, -1, OP_SAMPLE, (int)p.n_layers, (int)p.sample_counter};
    // A whole step may take longer than one dependency wait: the scheduler's deadline is 4x
    // longer, so a stuck instruction is reported by the worker that waits on it, not here.
    if (!wait_counter(p, p.counters + p.sample_counter, (unsigned)(step + 1), site, 4ull * p.timeout_ns)) return;
    p.step_ns[step - p.step_begin + 1] = globaltimer_ns();
  }
}

}  // namespace mk

extern "C" __global__ void __launch_bounds__(mk::THREADS, MK_BLOCKS_PER_SM) argus_megakernel(const Params* __restrict__ params) {
  __shared__ mk::Smem smem;
  __shared__ Params p;
  // The parameter block is 8-byte words: copy it once into shared memory.
  const unsigned long long* src = reinterpret_cast<const unsigned long long*>(params);
  unsigned long long* dst = reinterpret_cast<unsigned long long*>(&p);
  for (int i = threadIdx.x; i < (int)(sizeof(Params) / 8); i += mk::THREADS) dst[i] = src[i];
  __syncthreads();
  if (blockIdx.x == 0)
    mk::scheduler(p, smem);
  else
    mk::worker(p, smem);
}
