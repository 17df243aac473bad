// Weight staging: the whole weight tile of the instruction a worker just took is copied into
// shared memory by bulk copies (cp.async.bulk, completing on an mbarrier) *before* the worker waits
// on the instruction's dependency, so the bytes stream while the dependency resolves; the GEMV then
// reads shared memory. One buffer per CTA (p.stage_bytes of dynamic shared memory; 0 = off); of a tile
// larger than the buffer only the leading whole rows that fit are staged (an even number), the rest
// take the register-load path (gemv_tile).
#pragma once
#include <cuda_bf16.h>
#include "config.cuh"
#include "common.cuh"

namespace mk {

extern __shared__ __align__(128) unsigned char stage_buffer[];

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void stage_init(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the copy engine sees the initialised barrier
}

// Thread 0: the barrier's next phase completes when `bytes` more bytes landed (issue the copies after this).
__device__ __forceinline__ void stage_expect(unsigned long long* bar, unsigned bytes) {
  // Earlier generic-proxy reads of the buffer (the previous tile's GEMV or attention) come before these writes.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// Thread 0: bulk-copy `bytes` (a multiple of 16) from global `src` to shared `dst`, completing on `bar`.
__device__ __forceinline__ void stage_copy(unsigned long long* bar, unsigned char* dst, const char* src, unsigned bytes) {
  const unsigned piece = 32u * 1024u;
  for (unsigned off = 0; off < bytes; off += piece) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(dst + off)), "l"(src + off), "r"(min(piece, bytes - off)), "r"(smem_addr(bar))
                 : "memory");
  }
}

// Thread 0: copy `bytes` (a multiple of 16) from global `src` into the stage buffer.
__device__ __forceinline__ void stage_issue(unsigned long long* bar, const char* src, unsigned bytes) {
  stage_expect(bar, bytes);
  stage_copy(bar, stage_buffer, src, bytes);
}

// Every thread: wait until the copy of phase `phase` (0/1, alternating per staged tile) landed.
// Bounded like every other wait: past `timeout_ns` it returns false (the caller reports an error).
__device__ __forceinline__ bool stage_wait(unsigned long long* bar, unsigned phase, unsigned long long timeout_ns) {
  unsigned done = 0;
  unsigned long long start = 0;
  for (unsigned spins = 0;; ++spins) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(phase) : "memory");
    if (done) return true;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (spins == 0) start = now;
    else if (now - start > timeout_ns) return false;
  }
}

// gemv_tile with the weights already in shared memory (row r at W + r * K); 16-byte shared loads.
__device__ __noinline__ void gemv_tile_staged(const __nv_bfloat16* W, int K, int rows, const float* __restrict__ xs,
                                              float* __restrict__ out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = K >> 3;
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  const uint4* w4 = reinterpret_cast<const uint4*>(W);
  for (int r = warp * GEMV_ROWS; r < rows; r += NWARPS * GEMV_ROWS) {
    float acc[GEMV_ROWS];
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) acc[i] = 0.f;
#pragma unroll 4
    for (int c = lane; c < chunks; c += 32) {
      const float4 a = x4[2 * c], b = x4[2 * c + 1];
#pragma unroll
      for (int i = 0; i < GEMV_ROWS; ++i) acc[i] += dot8(w4[(size_t)(r + i) * chunks + c], a, b);
    }
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) {
      const float s = warp_sum(acc[i]);
      if (lane == 0) out[r + i] = s;
    }
  }
}

}  // namespace mk
