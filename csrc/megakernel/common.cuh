// Loads, reductions and small math shared by the ops.
#pragma once
#include <cuda_bf16.h>
#include "config.cuh"

namespace mk {

// Weights are read once per step: non-coherent path, no L1 allocation (they are in L2 after the
// look-ahead prefetch, if any).
// MK_L2_HINTS (build flag): 1 = weight loads evict_first in L2 (a streamed weight is dead once read,
// so it should leave before prefetched tiles, KV rows and activations do); 2 = also prefetches evict_last.
#ifndef MK_L2_HINTS
#define MK_L2_HINTS 0
#endif
#if MK_L2_HINTS > 0
__device__ __forceinline__ unsigned long long l2_policy_evict_first() {
  unsigned long long pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
#endif
#if MK_L2_HINTS > 1
__device__ __forceinline__ unsigned long long l2_policy_evict_last() {
  unsigned long long pol;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
#endif

// The counters' memory-order primitives and the clock (sync.cuh's waits; the benchmarks in bench/ use them too).
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint4 ld_weights(const void* p) {
  uint4 v;
#if MK_L2_HINTS > 0
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(l2_policy_evict_first()));
#else
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#endif
  return v;
}

// 16 bytes written this step by another CTA: through L2 (no L1 line that could be stale). An asm
// volatile load keeps its place among the others, so a batch written load-load-...-use stays a
// batch in SASS (ptxas otherwise interleaved the K-row loads with the dot products).
__device__ __forceinline__ uint4 ld_cg_u4(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Bulk prefetch of a contiguous weight range into L2 (sm_90); bytes must be a multiple of 16.
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
#if MK_L2_HINTS > 1
  asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p), "r"(bytes),
               "l"(l2_policy_evict_last()) : "memory");
#else
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Warp 0 prefetches [ptr, ptr + bytes) into L2 in 32 KiB pieces, one piece per lane.
__device__ __forceinline__ void prefetch_tile(const char* ptr, unsigned bytes) {
  const unsigned piece = 32u * 1024u;
  for (unsigned off = (threadIdx.x & 31) * piece; off < bytes; off += 32 * piece)
    prefetch_l2(ptr + off, min(piece, bytes - off));
}

__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// 8 bf16 weights (one 16-byte chunk) dotted with 8 fp32 activations.
__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b) {
  float s = bf_lo(w.x) * a.x;
  s = fmaf(bf_hi(w.x), a.y, s);
  s = fmaf(bf_lo(w.y), a.z, s);
  s = fmaf(bf_hi(w.y), a.w, s);
  s = fmaf(bf_lo(w.z), b.x, s);
  s = fmaf(bf_hi(w.z), b.y, s);
  s = fmaf(bf_lo(w.w), b.z, s);
  s = fmaf(bf_hi(w.w), b.w, s);
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the CTA; every thread gets the result. `scratch` holds NWARPS floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < NWARPS; ++w) total += scratch[w];
  return total;
}

__device__ __forceinline__ float bf16_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

}  // namespace mk
