// GEMV tiles: out[r] = W[row0 + r, :] . xs for r < rows, bf16 weights, fp32 accumulation.
//
// Each warp streams GEMV_ROWS rows at a time; each lane loads 16-byte chunks (8 bf16) strided by
// the warp, so one warp-wide load covers 512 contiguous bytes (fully coalesced), and the
// unrolled loop keeps GEMV_ROWS * GEMV_UNROLL loads in flight per lane. The activation vector xs
// is fp32 in shared memory. Napkin math (H200): 2.07 GB of weights per token at ~4.2 TB/s is
// 0.49 ms; each SM must keep ~30 KB in flight to cover ~1 us of DRAM latency, which 256 threads x
// 8 x 16 B = 32 KB does, helped by the L2 prefetch issued before the dependency wait.
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
#pragma unroll GEMV_UNROLL
    for (int c = lane; c < chunks; c += 32) {
      uint4 w[GEMV_ROWS];
#pragma unroll
      for (int i = 0; i < GEMV_ROWS; ++i) w[i] = ld_weights(row_ptr[i] + (size_t)c * 16);
      const float4 a = x4[2 * c], b = x4[2 * c + 1];
#pragma unroll
      for (int i = 0; i < GEMV_ROWS; ++i) acc[i] += dot8(w[i], a, b);
    }
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) {
      const float s = warp_sum(acc[i]);
      if (lane == 0) out[r + i] = s;
    }
  }
}

// xs[i] = x[i] * rsqrt(mean(x^2) + eps) * g[i]  (RMSNorm of a global fp32 vector into smem).
__device__ __noinline__ void load_rmsnorm(const float* x, const __nv_bfloat16* __restrict__ g, int n, float eps,
                                          float* xs, float* scratch) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += THREADS) {
    const float v = __ldcg(x + i);  // written by other CTAs this step: read through L2
    xs[i] = v;
    ss += v * v;
  }
  const float total = block_sum(ss, scratch);
  const float rstd = rsqrtf(total / (float)n + eps);
  for (int i = threadIdx.x; i < n; i += THREADS) xs[i] = xs[i] * rstd * __bfloat162float(g[i]);
  __syncthreads();
}

__device__ __noinline__ void load_vector(const float* x, int n, float* xs) {
  for (int i = threadIdx.x; i < n; i += THREADS) xs[i] = __ldcg(x + i);
  __syncthreads();
}

}  // namespace mk
