// GEMV tiles: out[r] = W[row0 + r, :] . xs for r < rows, bf16 weights, fp32 accumulation.
//
// Each warp streams GEMV_ROWS rows at a time; each lane loads 16-byte chunks (8 bf16) strided by
// the warp, so one warp-wide load covers 512 contiguous bytes (fully coalesced), and the
// unrolled loop keeps GEMV_ROWS * GEMV_UNROLL loads in flight per lane. The activation vector xs
// is fp32 in shared memory. Napkin math (H200): 2.07 GB of weights per token at ~4.2 TB/s is
// 0.49 ms; each SM must keep ~30 KB in flight to cover ~1 us of DRAM latency: 256 threads x
// 2 rows x 8 chunks x 16 B = 64 KB (the first H200 run with 32 KB pulled ~31 GB/s per SM), helped
// by the L2 bulk prefetch issued before the dependency wait.
#pragma once
#include "common.cuh"

namespace mk {

__device__ __noinline__ void gemv_tile(const __nv_bfloat16* __restrict__ W, int K, int rows,
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
#if MK_GEMV_BATCH
    // All GEMV_ROWS x GEMV_UNROLL loads of a block are issued before any is used: chunk indices past
    // the row are clamped (a repeated load of the last chunk, not used), so no branch separates the
    // loads. The plain unrolled loop below compiles to 2 loads in flight per warp (SASS of
    // 2026-12-01 12:47: an exit test between unrolled trips), yet measured 11% faster per token
    // than this batch on H200 (12:54): more bytes in flight per SM is not what limits the step.
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
#else
#pragma unroll GEMV_UNROLL
    for (int c = lane; c < chunks; c += 32) {
      uint4 w[GEMV_ROWS];
#pragma unroll
      for (int i = 0; i < GEMV_ROWS; ++i) w[i] = ld_weights(row_ptr[i] + (size_t)c * 16);
      const float4 a = x4[2 * c], b = x4[2 * c + 1];
#pragma unroll
      for (int i = 0; i < GEMV_ROWS; ++i) acc[i] += dot8(w[i], a, b);
    }
#endif
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) {
      const float s = warp_sum(acc[i]);
      if (lane == 0) out[r + i] = s;
    }
  }
}

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

// xs = x (n fp32 values, n a multiple of 4), 16-byte loads through L2, unrolled so many are in flight.
__device__ __noinline__ void load_vector(const float* x, int n, float* xs) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* xs4 = reinterpret_cast<float4*>(xs);
#pragma unroll 8
  for (int c = threadIdx.x; c < (n >> 2); c += THREADS) xs4[c] = __ldcg(x4 + c);
  __syncthreads();
}


// ---- Opt-in (MK_EARLY_WEIGHTS=1, megakernel/NOTES.md "Ready for the next device run"): a GEMV tile
// issues its first block of weight loads (GEMV_ROWS rows x MK_EARLY_CHUNKS 16-byte chunks per lane,
// GEMV_ROWS * MK_EARLY_CHUNKS * 4 registers) right after its dependency is met and *before* its
// activation work (RMSNorm, O-proj combine, the down tile's vector load), so those loads are in
// flight while the activation loads are; no weight byte moves before the dependency is satisfied.
// The dot products then run in the same order as gemv_tile. The activation
// helpers below are inlined (and less unrolled) so the held weights do not spill at 128 registers.
#ifndef MK_EARLY_WEIGHTS
#define MK_EARLY_WEIGHTS 0
#endif
#ifndef MK_EARLY_CHUNKS
#define MK_EARLY_CHUNKS 8  // chunks per row held across the activation work (8: a 2048-wide row per warp)
#endif
#ifndef MK_EARLY_CHUNKS_O
#define MK_EARLY_CHUNKS_O 4  // the O-proj tile's (its one-trip combine needs registers too)
#endif

template <int U>  // chunks per row held
struct EarlyBlock {
  uint4 w[U][GEMV_ROWS];
};

// Warp w's first row block (rows w * GEMV_ROWS ..): its first MK_EARLY_CHUNKS chunks per lane, clamped
// to the row (a repeated load of the last chunk is issued but never used), no branch between loads.
template <int U>
__device__ __forceinline__ void early_issue(const __nv_bfloat16* __restrict__ W, int K, int rows, EarlyBlock<U>& b) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, chunks = K >> 3;
  // Unconditional (a warp without a block, rows < NWARPS * GEMV_ROWS, reloads the last row): values
  // defined under a branch and used after the CTA barriers of the activation work were spilled.
  const int r0 = max(0, min(warp * GEMV_ROWS, rows - GEMV_ROWS));
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = min(lane + 32 * u, chunks - 1);
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i)
      b.w[u][i] = ld_weights(reinterpret_cast<const char*>(W + (size_t)(r0 + i) * K) + (size_t)c * 16);
  }
}

struct GemvAcc {  // a row block's partial dot products (by value: no stack copy)
  float v[GEMV_ROWS];
};

// One row block of gemv_tile from chunk c_first on, starting from the partial sums `acc`: the same
// loop as gemv_tile's (a function of its own, so ptxas compiles it like gemv_tile), then the warp sums.
__device__ __noinline__ void gemv_rows_tail(const __nv_bfloat16* __restrict__ W, int K, int r, int c_first,
                                            const float* __restrict__ xs, float* __restrict__ out, GemvAcc acc) {
  const int lane = threadIdx.x & 31, chunks = K >> 3;
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  const char* row_ptr[GEMV_ROWS];
#pragma unroll
  for (int i = 0; i < GEMV_ROWS; ++i) row_ptr[i] = reinterpret_cast<const char*>(W + (size_t)(r + i) * K);
#pragma unroll GEMV_UNROLL
  for (int c = c_first; c < chunks; c += 32) {
    uint4 w[GEMV_ROWS];
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) w[i] = ld_weights(row_ptr[i] + (size_t)c * 16);
    const float4 a = x4[2 * c], b = x4[2 * c + 1];
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) acc.v[i] += dot8(w[i], a, b);
  }
#pragma unroll
  for (int i = 0; i < GEMV_ROWS; ++i) {
    const float s = warp_sum(acc.v[i]);
    if (lane == 0) out[r + i] = s;
  }
}

// out[r] = W[r, :] . xs for r < rows, using the registers early_issue filled (xs must be published):
// the first row block's held chunks, its remaining chunks (gemv_rows_tail), then the other row blocks
// with gemv_tile itself (the same rows per warp as one gemv_tile call over the whole tile).
template <int U>
__device__ __forceinline__ void early_finish(const __nv_bfloat16* __restrict__ W, int K, int rows,
                                             const float* __restrict__ xs, float* __restrict__ out, const EarlyBlock<U>& b) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, chunks = K >> 3, r0 = warp * GEMV_ROWS;
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  if (r0 < rows) {
    GemvAcc acc;
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) acc.v[i] = 0.f;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = lane + 32 * u;
      if (c < chunks) {
        const float4 a = x4[2 * c], bb = x4[2 * c + 1];
#pragma unroll
        for (int i = 0; i < GEMV_ROWS; ++i) acc.v[i] += dot8(b.w[u][i], a, bb);
      }
    }
    gemv_rows_tail(W, K, r0, lane + 32 * U, xs, out, acc);
  }
  constexpr int BLOCK = NWARPS * GEMV_ROWS;
  if (rows > BLOCK) gemv_tile(W + (size_t)BLOCK * K, K, rows - BLOCK, xs, out + BLOCK);
}

// load_rmsnorm, inlined and not unrolled (TinyLlama: one trip per thread), for the early-weights tiles.
__device__ __forceinline__ float load_rmsnorm_inl(const float* x, const __nv_bfloat16* __restrict__ g, int n, float eps,
                                                  float* xs, float* scratch) {
  float ss = 0.f;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const uint4* g8 = reinterpret_cast<const uint4*>(g);
  float4* xs4 = reinterpret_cast<float4*>(xs);
#pragma unroll 1
  for (int c = threadIdx.x; c < (n >> 3); c += THREADS) {
    const float4 a = __ldcg(x4 + 2 * c), b = __ldcg(x4 + 2 * c + 1);
    const uint4 w = __ldg(g8 + c);
    ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
    xs4[2 * c] = make_float4(a.x * bf_lo(w.x), a.y * bf_hi(w.x), a.z * bf_lo(w.y), a.w * bf_hi(w.y));
    xs4[2 * c + 1] = make_float4(b.x * bf_lo(w.z), b.y * bf_hi(w.z), b.z * bf_lo(w.w), b.w * bf_hi(w.w));
  }
  const float total = block_sum(ss, scratch);
  // __fdividef, not '/': an IEEE division has a slow-path subroutine call, around which ptxas spilled
  // every held weight register right after its load (SASS, 2026-12-01), which waits for the load.
  return rsqrtf(__fdividef(total, (float)n) + eps);
}

// Opt-in (TileShape.publish_ssq, build flag MK_PUBLISH_SSQ): the producers of x / x_mid (Embed, Down,
// O-proj tiles) publish the sum of squares of the rows they wrote, one float per tile in `ssq`
// (`parts` of them); the norm reads those in the same L2 trip as x and g, and each warp sums them
// itself: no CTA-wide reduction, one barrier (which publishes xs) instead of block_sum's two.
__device__ __forceinline__ float load_norm_published(const float* x, const __nv_bfloat16* __restrict__ g, int n, float eps,
                                                     float* xs, const float* ssq, int parts) {
  const int lane = threadIdx.x & 31;
  float ss = 0.f;
#pragma unroll 4
  for (int i = lane; i < parts; i += 32) ss += __ldcg(ssq + i);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const uint4* g8 = reinterpret_cast<const uint4*>(g);
  float4* xs4 = reinterpret_cast<float4*>(xs);
#pragma unroll 1
  for (int c = threadIdx.x; c < (n >> 3); c += THREADS) {
    const float4 a = __ldcg(x4 + 2 * c), b = __ldcg(x4 + 2 * c + 1);
    const uint4 w = __ldg(g8 + c);
    xs4[2 * c] = make_float4(a.x * bf_lo(w.x), a.y * bf_hi(w.x), a.z * bf_lo(w.y), a.w * bf_hi(w.y));
    xs4[2 * c + 1] = make_float4(b.x * bf_lo(w.z), b.y * bf_hi(w.z), b.z * bf_lo(w.w), b.w * bf_hi(w.w));
  }
  ss = warp_sum(ss);
  __syncthreads();  // publishes xs
  return rsqrtf(__fdividef(ss, (float)n) + eps);  // no division slow-path call (see load_rmsnorm_inl)
}

// load_vector, inlined with 4 loads per thread in flight (the early-weights down tile holds its weights).
__device__ __forceinline__ void load_vector_inl(const float* x, int n, float* xs) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* xs4 = reinterpret_cast<float4*>(xs);
#pragma unroll 4
  for (int c = threadIdx.x; c < (n >> 2); c += THREADS) xs4[c] = __ldcg(x4 + c);
  __syncthreads();
}

}  // namespace mk
