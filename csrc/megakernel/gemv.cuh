// GEMV tiles: out[r] = W[row0 + r, :] . xs for r < rows, bf16 weights, fp32 accumulation.
//
// Each warp streams GEMV_ROWS rows at a time; each lane loads 16-byte chunks (8 bf16) strided by
// the warp, so one warp-wide load covers 512 contiguous bytes (fully coalesced). The activation
// vector xs is fp32 in shared memory. Napkin math (H200): 2.07 GB of weights per token at ~4.2 TB/s
// is 0.49 ms. Loads in flight: the plain loop (every op by default) keeps 2 per warp (8 KB per CTA);
// the batched loop (gemv_rows<true>) issues a whole GEMV_ROWS x GEMV_UNROLL block (16 per lane,
// 64 KB per CTA) before using any. Which op uses which: MK_GEMV_BATCH (all ops), MK_BATCH_QKV and
// MK_BATCH_O (only the QKV / O-proj tiles), config.cuh; megakernel/NOTES.md rows 12 and "Ready".
#pragma once
#include "common.cuh"

namespace mk {

// The GEMV loop of one tile. kBatch = false: the plain unrolled loop (the default since 12:54), which
// compiles to 2 loads in flight per warp (SASS of 2026-12-01 12:47: an exit test between unrolled
// trips). kBatch = true: all GEMV_ROWS x GEMV_UNROLL loads of a block are issued before any is used
// (chunk indices past the row are clamped: a repeated load of the last chunk, not used), so no branch
// separates the loads; as every op's GEMV (MK_GEMV_BATCH=1) it measured 11% slower per token on H200
// (12:54, NOTES.md row 12): more bytes in flight per SM is not what limits the whole step. Both sum
// each lane's chunks in the same order, so their outputs are bit-identical.
template <bool kBatch>
__device__ __forceinline__ void gemv_rows(const __nv_bfloat16* __restrict__ W, int K, int rows,
                                          const float* __restrict__ xs, float* __restrict__ out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = K >> 3;  // 16-byte chunks per row
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  for (int r = warp * GEMV_ROWS; r < rows; r += NWARPS * GEMV_ROWS) {
    float acc[GEMV_ROWS];
    const char* row_ptr[GEMV_ROWS];
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) {
      acc[i] = 0.f;
      row_ptr[i] = reinterpret_cast<const char*>(W + (size_t)(r + i) * K);
    }
    if constexpr (kBatch) {
      for (int c0 = lane; c0 < chunks; c0 += 32 * GEMV_UNROLL) {
        uint4 w[GEMV_UNROLL][GEMV_ROWS];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; ++u) {
          const int c = min(c0 + 32 * u, chunks - 1);
#pragma unroll
          for (int i = 0; i < GEMV_ROWS; ++i) w[u][i] = ld_weights(row_ptr[i] + (size_t)c * 16);
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; ++u) {
          const int c = c0 + 32 * u;
          if (c < chunks) {
            const float4 a = x4[2 * c], b = x4[2 * c + 1];
#pragma unroll
            for (int i = 0; i < GEMV_ROWS; ++i) acc[i] += dot8(w[u][i], a, b);
          }
        }
      }
    } else {
#pragma unroll GEMV_UNROLL
      for (int c = lane; c < chunks; c += 32) {
        uint4 w[GEMV_ROWS];
#pragma unroll
        for (int i = 0; i < GEMV_ROWS; ++i) w[i] = ld_weights(row_ptr[i] + (size_t)c * 16);
        const float4 a = x4[2 * c], b = x4[2 * c + 1];
#pragma unroll
        for (int i = 0; i < GEMV_ROWS; ++i) acc[i] += dot8(w[i], a, b);
      }
    }
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) {
      const float s = warp_sum(acc[i]);
      if (lane == 0) out[r + i] = s;
    }
  }
}

// Every op's GEMV: the plain loop unless the build sets MK_GEMV_BATCH=1 (config.cuh).
__device__ __noinline__ void gemv_tile(const __nv_bfloat16* __restrict__ W, int K, int rows,
                                       const float* __restrict__ xs, float* __restrict__ out) {
  gemv_rows<MK_GEMV_BATCH != 0>(W, K, rows, xs, out);
}

#if MK_BATCH_QKV || MK_BATCH_O
// The batched loop for the ops alone on the latency chain (QKV with MK_BATCH_QKV=1, O-proj with
// MK_BATCH_O=1; config.cuh), the other ops keep gemv_tile. Not compiled into the default build, whose
// SASS is unchanged by its existence (NOTES.md, "Ready for the next device run"). MK_BATCH_PLAIN=1 is a
// control: the same second function and call sites, with the plain loop in it (ptxas allocates
// registers across calls, so adding a callee changes code everywhere: mk_chain_ctl measures that alone).
__device__ __noinline__ void gemv_tile_batch(const __nv_bfloat16* __restrict__ W, int K, int rows,
                                             const float* __restrict__ xs, float* __restrict__ out) {
  gemv_rows<MK_BATCH_PLAIN == 0>(W, K, rows, xs, out);
}
#endif

// gemv_tile (kBatch = false) or gemv_tile_batch (kBatch = true): the per-op choice of the call sites.
template <bool kBatch>
__device__ __forceinline__ void gemv_tile_as(const __nv_bfloat16* __restrict__ W, int K, int rows,
                                             const float* __restrict__ xs, float* __restrict__ out) {
#if MK_BATCH_QKV || MK_BATCH_O
  if constexpr (kBatch) {
    gemv_tile_batch(W, K, rows, xs, out);
    return;
  }
#else
  static_assert(!kBatch, "gemv_tile_batch is compiled only with MK_BATCH_QKV or MK_BATCH_O");
#endif
  gemv_tile(W, K, rows, xs, out);
}

#if MK_O_PIECES
// One weight load with its own predicate (row 38): 16 bytes at p when on, the zeros it starts from when off. The
// predicate is in the load instruction (@P LDG), so a batch of them has no branch between its loads and an off one
// (past its piece) reads no memory; the address of an off load is never dereferenced.
__device__ __forceinline__ uint4 ld_weights_if(const void* p, bool on) {
#if MK_L2_HINTS > 0
  return on ? ld_weights(p) : make_uint4(0u, 0u, 0u, 0u);
#else
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %4, 0;\n\t@p ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%5];\n\t}"
               : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w) : "r"((unsigned)on), "l"(p));
  return v;
#endif
}

// GEMV rows as (row, chunk-range) pieces streamed in whole batches (row 38, opt-in: MK_O_PIECES;
// megakernel/NOTES.md "Ready: rows 38-39"). Warp w (< kWarps) takes rows w, w + kWarps, ...; a row is kPieces
// chunk ranges of span = chunks / kPieces chunks (the last piece also takes the remainder), each with its own fp32
// accumulator. Per lane, trip t of piece q reads chunk q * span + lane + 32 t. A batch is kTrips trips of every
// piece: kTrips x kPieces loads, all issued before the batch's first FFMA (each predicated on its chunk being in the
// piece: no branch, no exit test between them), then their FFMAs. The plain loop (`#pragma unroll 8` over a runtime
// trip count) runs (trips & 7) dependent 2-load remainder trips before its 16-load bodies (NOTES.md "Ready: row 36");
// here a row of T trips per piece costs ceil(T / kTrips) batches: O-proj (K 2048, one piece, kTrips 8) 1 batch of 8
// loads per row (row 39 ran Down's two K-halves through it, a closed miss, removed in session 15). Sums: each
// accumulator adds its chunks in increasing order, as gemv_rows (one piece) and gemv_halves (two) do, so the outputs
// are theirs bit for bit for every chunk count with one piece and for even ones with two (an odd count's last chunk is
// lane (span % 32)'s here, lane 0's in gemv_halves).
template <int kWarps, int kPieces, int kTrips>
__device__ __forceinline__ void gemv_batches(const __nv_bfloat16* __restrict__ W, int K, int rows,
                                             const float* __restrict__ xs, float* __restrict__ out) {
  static_assert(kWarps >= 1 && kWarps <= NWARPS && kPieces >= 1 && kTrips >= 1, "gemv_batches shape");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp >= kWarps) return;
  const int chunks = K >> 3, span = chunks / kPieces, last = chunks - (kPieces - 1) * span;  // last >= span
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  for (int r = warp; r < rows; r += kWarps) {
    const char* row = reinterpret_cast<const char*>(W + (size_t)r * K);
    float acc[kPieces];
#pragma unroll
    for (int q = 0; q < kPieces; ++q) acc[q] = 0.f;
#pragma unroll 1
    for (int t0 = lane; t0 < last; t0 += 32 * kTrips) {  // one batch per pass
      uint4 w[kTrips][kPieces];
#pragma unroll
      for (int u = 0; u < kTrips; ++u) {
        const int t = t0 + 32 * u;
#pragma unroll
        for (int q = 0; q < kPieces; ++q)
          w[u][q] = ld_weights_if(row + (size_t)(q * span + t) * 16, t < (q == kPieces - 1 ? last : span));
      }
#pragma unroll
      for (int u = 0; u < kTrips; ++u) {
        const int t = t0 + 32 * u;
#pragma unroll
        for (int q = 0; q < kPieces; ++q) {
          if (t < (q == kPieces - 1 ? last : span)) {
            const int c = q * span + t;
            acc[q] += dot8(w[u][q], x4[2 * c], x4[2 * c + 1]);
          }
        }
      }
    }
    float s = acc[0];
#pragma unroll
    for (int q = 1; q < kPieces; ++q) s += acc[q];
    s = warp_sum(s);
    if (lane == 0) out[r] = s;
  }
}
#endif

#if MK_DOWN_PIECES
// Down's GEMV in (row, K-half) pieces (row 36, the default since its H200 run: MK_DOWN_PIECES=1, config.cuh, with
// DEFAULT_TILES' 8-row Down tiles; benchmarks/decode.py mk_down16 is the plain Down before it). gemv_rows hands a warp GEMV_ROWS = 2 whole rows, so an 8-row Down tile (TileShape(down_rows=8))
// keeps only warps 0-3 busy and two such CTAs per SM stream with 8 warps, as one 16-row tile does (mk_down8 measured
// the same as the default, NOTES.md row 34). Here warp w takes row w's two K-halves as its pair of pieces: per trip
// each lane loads chunk c of both halves, the same 2 loads per trip as gemv_rows' plain loop (SASS: the same
// unrolled shape, (trips & 7) remainder trips of 2 loads each, then bodies of 16), so all 8 warps of both CTAs
// stream (16 per SM) and each warp's trips per row halve (Down: 11 instead of 22 per row pair). The halves are added
// in the lane before the warp's shuffle sum: the row's fp32 sum in another order than gemv_rows, nothing else
// changes. kWarps < NWARPS (MK_DOWN_PIECES=2, the control mk_down8_ctl): only warps 0..kWarps-1 take rows, so 8-row
// tiles stream with 4 warps per CTA, as mk_down8's do, through this same code.
template <int kWarps>
__device__ __forceinline__ void gemv_halves(const __nv_bfloat16* __restrict__ W, int K, int rows,
                                            const float* __restrict__ xs, float* __restrict__ out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp >= kWarps) return;
  const int chunks = K >> 3, half = chunks >> 1;  // the second half also has chunk 2 * half when chunks is odd
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  for (int r = warp; r < rows; r += kWarps) {
    const char* lo = reinterpret_cast<const char*>(W + (size_t)r * K);
    const char* hi = lo + (size_t)half * 16;
    float acc0 = 0.f, acc1 = 0.f;
#pragma unroll GEMV_UNROLL
    for (int c = lane; c < half; c += 32) {
      const uint4 w0 = ld_weights(lo + (size_t)c * 16), w1 = ld_weights(hi + (size_t)c * 16);
      acc0 += dot8(w0, x4[2 * c], x4[2 * c + 1]);
      acc1 += dot8(w1, x4[2 * (half + c)], x4[2 * (half + c) + 1]);
    }
    if ((chunks & 1) && lane == 0) {  // an odd chunk count's last chunk (not Down's: 5632 / 8 = 704)
      const int c = chunks - 1;
      acc1 += dot8(ld_weights(lo + (size_t)c * 16), x4[2 * c], x4[2 * c + 1]);
    }
    const float s = warp_sum(acc0 + acc1);
    if (lane == 0) out[r] = s;
  }
}

// Inlined into op_down: as a __noinline__ callee the timed build spilled 68 B (the default 64); inlined, ptxas
// allocates the kernel anew and spills 44 B (trace build 52 B vs 40; NOTES.md "Ready: row 36").
__device__ __forceinline__ void gemv_tile_pieces(const __nv_bfloat16* __restrict__ W, int K, int rows,
                                                 const float* __restrict__ xs, float* __restrict__ out) {
  gemv_halves<MK_DOWN_PIECES == 2 ? NWARPS / 2 : NWARPS>(W, K, rows, xs, out);
}
#endif

// RMSNorm input of a GEMV tile: xs[i] = x[i] * g[i] (fp32, shared memory); returns
// rstd = rsqrt(mean(x^2) + eps), which the caller applies to the GEMV outputs (a scalar factor
// commutes with the dot product), so x and g are read in one pass with all loads in flight.
// n must be a multiple of 8 (host-checked); x is written by other CTAs this step: read via L2.
__device__ __noinline__ float load_rmsnorm(const float* x, const __nv_bfloat16* __restrict__ g, int n, float eps,
                                           float* xs, float* scratch) {
  float ss = 0.f;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const uint4* g8 = reinterpret_cast<const uint4*>(g);
  float4* xs4 = reinterpret_cast<float4*>(xs);
#pragma unroll 4
  for (int c = threadIdx.x; c < (n >> 3); c += THREADS) {
    const float4 a = __ldcg(x4 + 2 * c), b = __ldcg(x4 + 2 * c + 1);
    const uint4 w = __ldg(g8 + c);
    ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
    xs4[2 * c] = make_float4(a.x * bf_lo(w.x), a.y * bf_hi(w.x), a.z * bf_lo(w.y), a.w * bf_hi(w.y));
    xs4[2 * c + 1] = make_float4(b.x * bf_lo(w.z), b.y * bf_hi(w.z), b.z * bf_lo(w.w), b.w * bf_hi(w.w));
  }
  const float total = block_sum(ss, scratch);  // its barriers also publish xs
  return rsqrtf(total / (float)n + eps);
}

// xs = x (n fp32 values, n a multiple of 4, n <= SMEM_FLOATS), 16-byte loads through L2.
#if MK_VEC_BATCH
// All of a thread's first VEC_SLOTS loads before any store: each predicated on its chunk existing (no branch
// between them; a slot that is off holds zeros, as an undefined one made ptxas spill), then the stores; the
// rest (n > VEC_SLOTS * 4 * THREADS = 6144) one at a time. The serial loop below (MK_VEC_BATCH=0,
// mk_vecserial) runs fewer than 8 trips (Down's 5632 values: 5-6 per thread) in its remainder loop, one load
// per trip: 5-6 dependent L2 round trips before the first weight load (SASS 2026-12-02, NOTES.md row 25).
// Same copy, same xs; 2.3% / 1.9% faster per token at kv 128 / 1024 (H200, 2026-12-02, NOTES.md row 25).
__device__ __noinline__ void load_vector(const float* x, int n, float* xs) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* xs4 = reinterpret_cast<float4*>(xs);
  const int n4 = n >> 2;
  float4 v[VEC_SLOTS];
#pragma unroll
  for (int i = 0; i < VEC_SLOTS; ++i) {
    const int c = threadIdx.x + i * THREADS;
    v[i] = c < n4 ? __ldcg(x4 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int i = 0; i < VEC_SLOTS; ++i) {
    const int c = threadIdx.x + i * THREADS;
    if (c < n4) xs4[c] = v[i];
  }
#pragma unroll 1
  for (int c = threadIdx.x + VEC_SLOTS * THREADS; c < n4; c += THREADS) xs4[c] = __ldcg(x4 + c);
  __syncthreads();
}
#else
__device__ __noinline__ void load_vector(const float* x, int n, float* xs) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* xs4 = reinterpret_cast<float4*>(xs);
#pragma unroll 8
  for (int c = threadIdx.x; c < (n >> 2); c += THREADS) xs4[c] = __ldcg(x4 + c);
  __syncthreads();
}
#endif

}  // namespace mk
