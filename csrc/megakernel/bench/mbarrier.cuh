// The mbarrier operations the benchmarks' page rings use (weight_stream.cu, layer_stream.cu): one copy of the PTX.
#pragma once
#include "stage.cuh"  // mk::smem_addr

namespace bench {

__device__ __forceinline__ void bar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(mk::smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(mk::smem_addr(bar)) : "memory");
}

// One test of phase `parity`: true once it completed.
__device__ __forceinline__ bool bar_try(unsigned long long* bar, unsigned parity) {
  unsigned done;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done) : "r"(mk::smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

}  // namespace bench
