// timer_after_barrier.cu: is a %globaltimer read that follows a named barrier taken after the barrier released?
//
// Why: the opt-in lean markers read the timer first thing in a marker (until 2026-12-02). On H200 (2026-12-02,
// docs/marker_cost_anatomy.md "Stamps after a barrier") their compute slices in tests/fixtures/ws_pipeline began ~0.8 us before the producer's
// load that the barrier waits for: ptxas emits BAR.SYNC.DEFER_BLOCKING and the warp issues the CS2R that follows
// before the barrier resolves. The register cursor read the timer the same way. (Both fixed after this measurement:
// the lean markers read it after the cursor load, the register cursor after a __syncwarp.) This kernel measures, per
// way of reading the timer after bar.sync, whether the stamp can precede the release, and what each way costs.
//
// One CTA of 64 threads per launch, `trials` rounds. Warp 0 waits `delay_ns` (a timer spin), stamps t_rel, then
// arrives on barrier 1; warp 1 syncs on barrier 1 and stamps by method METHOD. out[2 * i] = t_rel, out[2 * i + 1] = t.
// A second kernel, cost_kernel, times 1024 back-to-back reads of each method on one warp (clock64 cycles).
#include <cstdint>

__device__ __forceinline__ uint64_t timer_plain() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t timer_lo32() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
  return t;
}

// The read waits for a shared-memory load (a branch on its value), which waits for the barrier.
__device__ __forceinline__ uint64_t timer_after_lds(const volatile uint32_t* flag) {
  uint32_t v;
  asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(v) : "r"((uint32_t)__cvta_generic_to_shared((const void*)flag)));
  uint64_t t = 0;
  if (v != 0xFFFFFFFFu) t = timer_plain();
  return t;
}

__device__ __forceinline__ uint64_t timer_after_syncwarp() {
  __syncwarp();
  return timer_plain();
}

__device__ __forceinline__ uint64_t timer_after_membar() {
  asm volatile("membar.cta;" ::: "memory");
  return timer_plain();
}

// The lanes marker's first instruction is a VOTE.ANY (__activemask). If that vote holds the warp until the barrier
// releases it, a timer read after it is late enough without the marker's __syncwarp, whose convergence check is most
// of the divergent path's extra cost (docs/marker_cost_anatomy.md "The divergent path"). The vote's result feeds
// the stamp so it is not dead; a running warp's mask is never 0.
__device__ __forceinline__ uint64_t timer_after_activemask() {
  const unsigned m = __activemask();
  return timer_plain() + (m == 0u ? 1u : 0u);
}

template <int M>
__device__ __forceinline__ uint64_t stamp(const volatile uint32_t* flag) {
  if constexpr (M == 0) return timer_plain();
  else if constexpr (M == 1) return timer_lo32();
  else if constexpr (M == 2) return timer_after_lds(flag);
  else if constexpr (M == 3) return timer_after_syncwarp();
  else if constexpr (M == 4) return timer_after_membar();
  else return timer_after_activemask();
}

template <int M>
__device__ void after_barrier(uint64_t* out, int trials, unsigned delay_ns) {
  __shared__ uint32_t flag;
  if (threadIdx.x == 0) flag = 0;
  __syncthreads();
  const int warp = threadIdx.x >> 5;
  for (int i = 0; i < trials; ++i) {
    if (warp == 0) {
      const uint64_t t0 = timer_plain();
      while (timer_plain() - t0 < delay_ns) {
      }
      const uint64_t t_rel = timer_plain();
      if (threadIdx.x == 0) out[2 * i] = t_rel;
      asm volatile("bar.arrive 1, 64;" ::: "memory");
    } else {
      asm volatile("bar.sync 1, 64;" ::: "memory");
      uint64_t t = stamp<M>(&flag);
      if constexpr (M == 1) t = (out[2 * i] & 0xFFFFFFFF00000000ull) | (uint32_t)t;  // lo32 only: widen by t_rel's high word
      if (threadIdx.x == 32) out[2 * i + 1] = t;
    }
    __syncthreads();
  }
}

extern "C" __global__ void after_barrier_plain(uint64_t* o, int n, unsigned d) { after_barrier<0>(o, n, d); }
extern "C" __global__ void after_barrier_lo32(uint64_t* o, int n, unsigned d) { after_barrier<1>(o, n, d); }
extern "C" __global__ void after_barrier_lds(uint64_t* o, int n, unsigned d) { after_barrier<2>(o, n, d); }
extern "C" __global__ void after_barrier_syncwarp(uint64_t* o, int n, unsigned d) { after_barrier<3>(o, n, d); }
extern "C" __global__ void after_barrier_membar(uint64_t* o, int n, unsigned d) { after_barrier<4>(o, n, d); }
extern "C" __global__ void after_barrier_activemask(uint64_t* o, int n, unsigned d) { after_barrier<5>(o, n, d); }

// Cost: 1024 dependent-free stamps summed (so none is dead), clock64 cycles for the whole loop.
template <int M>
__device__ void cost(uint64_t* out) {
  __shared__ uint32_t flag;
  if (threadIdx.x == 0) flag = 0;
  __syncwarp();
  uint64_t acc = 0;
  const long long c0 = clock64();
#pragma unroll 16
  for (int i = 0; i < 1024; ++i) acc += stamp<M>(&flag);
  const long long c1 = clock64();
  if (threadIdx.x == 0) {
    out[0] = (uint64_t)(c1 - c0);
    out[1] = acc;
  }
}

extern "C" __global__ void cost_plain(uint64_t* o) { cost<0>(o); }
extern "C" __global__ void cost_lo32(uint64_t* o) { cost<1>(o); }
extern "C" __global__ void cost_lds(uint64_t* o) { cost<2>(o); }
extern "C" __global__ void cost_syncwarp(uint64_t* o) { cost<3>(o); }
extern "C" __global__ void cost_membar(uint64_t* o) { cost<4>(o); }
extern "C" __global__ void cost_activemask(uint64_t* o) { cost<5>(o); }
