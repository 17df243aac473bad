// row_softmax.cu: the CuPy example program (docs/programs.md, "A CuPy program"): y = softmax(x) per row,
// one CTA per row, as cupy.RawModule(code=<this file>, options=("-lineinfo", "-I<csrc>", "-I<this dir>"))
// compiles it and get_function("row_softmax") launches it.
//
// Region tree (IDs in regions.h, manifest regions.json); every warp of a CTA runs each region once:
//   softmax                  the whole kernel body
//   softmax/max              the row maximum: a strided loop over the row, then
//   softmax/max/reduce         a block reduction (warp shuffles, shared memory, two __syncthreads)
//   softmax/sum              sum of exp(x - max): a strided loop, then
//   softmax/sum/reduce         the same block reduction
//   softmax/normalize        y = exp(x - max) / sum
// Per warp the trace build records 12 records (6 begins, 6 ends); the barriers (BAR) are in the two
// reduce regions only: 2 per warp in each.
#include "argus/argus.cuh"
#include "regions.h"

template <bool kMax>
__device__ __forceinline__ float combine(float a, float b) {
  return kMax ? fmaxf(a, b) : a + b;
}

// Every warp returns the reduction over the whole CTA (blockDim.x a multiple of 32, at most 1024).
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = combine<kMax>(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : (kMax ? -__int_as_float(0x7f800000) : 0.0f);
  for (int o = 16; o > 0; o >>= 1) v = combine<kMax>(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // smem is reused by the next reduction
  return v;
}

extern "C" __global__ void row_softmax(const float* __restrict__ x, float* __restrict__ y, int n_cols) {
  __shared__ float smem[32];
  ARGUS_BEGIN(ARGUS_REGION_SOFTMAX);
  const float* row = x + (size_t)blockIdx.x * n_cols;
  float* out = y + (size_t)blockIdx.x * n_cols;

  ARGUS_BEGIN(ARGUS_REGION_SOFTMAX_MAX);
  float m = -__int_as_float(0x7f800000);
  for (int c = threadIdx.x; c < n_cols; c += blockDim.x) m = fmaxf(m, row[c]);
  ARGUS_BEGIN(ARGUS_REGION_SOFTMAX_MAX_REDUCE);
  m = block_reduce<true>(m, smem);
  ARGUS_END(ARGUS_REGION_SOFTMAX_MAX_REDUCE);
  ARGUS_END(ARGUS_REGION_SOFTMAX_MAX);

  ARGUS_BEGIN(ARGUS_REGION_SOFTMAX_SUM);
  float s = 0.0f;
  for (int c = threadIdx.x; c < n_cols; c += blockDim.x) s += expf(row[c] - m);
  ARGUS_BEGIN(ARGUS_REGION_SOFTMAX_SUM_REDUCE);
  s = block_reduce<false>(s, smem);
  ARGUS_END(ARGUS_REGION_SOFTMAX_SUM_REDUCE);
  ARGUS_END(ARGUS_REGION_SOFTMAX_SUM);

  ARGUS_BEGIN(ARGUS_REGION_SOFTMAX_NORMALIZE);
  const float inv = 1.0f / s;
  for (int c = threadIdx.x; c < n_cols; c += blockDim.x) out[c] = expf(row[c] - m) * inv;
  ARGUS_END(ARGUS_REGION_SOFTMAX_NORMALIZE);
  ARGUS_END(ARGUS_REGION_SOFTMAX);
}
