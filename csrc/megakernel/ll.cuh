// Row 53 (MK_LL, opt-in; config.cuh): residual values that carry their own readiness. Every store of x or x_mid
// also stores the value with the step's tag (step + 1) in one 8-byte word of x_ll / x_mid_ll. An aligned 8-byte
// relaxed store is single-copy atomic, so a reader that sees the tag sees that step's value: it needs no counter
// and no acquire, and one L2 round trip both waits and loads (NVIDIA's NCCL "LL" protocol pairs flag and data the
// same way). Tags never repeat within a sequence; the runtime zeroes the words with the counters (set_prompt), and
// no step's tag is 0.
#pragma once
#include "sync.cuh"  // error_code, raise_error (and common.cuh: globaltimer_ns)

namespace mk {
#if MK_LL
__device__ __forceinline__ unsigned ll_tag(int step) { return (unsigned)step + 1u; }

__device__ __forceinline__ void ll_store(unsigned long long* word, int step, float v) {
  const unsigned long long w = ((unsigned long long)ll_tag(step) << 32) | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(word), "l"(w) : "memory");
}

__device__ __forceinline__ void ll_load2(const unsigned long long* word, unsigned long long& a, unsigned long long& b) {
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(word) : "memory");
}

__device__ __forceinline__ bool ll_ready(unsigned long long w, unsigned tag) { return (unsigned)(w >> 32) == tag; }

// Eight consecutive values (one 8-float chunk: src 64-byte aligned) of step `step`, handed to use(a, b). Spins until
// every tag is the step's; false once about `budget_cycles` SM clocks passed without them (the caller then takes
// the counter's path, whose wait reports a deadlock or a failed CTA). The values go to `use` inside the loop and a
// 32-bit clock bounds it: the caller holds a tile's weights in registers, and values returned through the loop's
// exit, or a 64-bit timer, were spilled around it (ptxas 13.0).
template <class Use>
__device__ __forceinline__ bool ll_read8(const unsigned long long* src, int step, unsigned budget_cycles, Use&& use) {
  const unsigned tag = ll_tag(step);
  const unsigned start = (unsigned)clock();
  for (;;) {
    unsigned long long w[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) ll_load2(src + 2 * i, w[2 * i], w[2 * i + 1]);
    unsigned diff = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) diff |= (unsigned)(w[i] >> 32) ^ tag;
    if (diff == 0) {
      use(make_float4(__uint_as_float((unsigned)w[0]), __uint_as_float((unsigned)w[1]),
                      __uint_as_float((unsigned)w[2]), __uint_as_float((unsigned)w[3])),
          make_float4(__uint_as_float((unsigned)w[4]), __uint_as_float((unsigned)w[5]),
                      __uint_as_float((unsigned)w[6]), __uint_as_float((unsigned)w[7])));
      return true;
    }
    if ((unsigned)clock() - start > budget_cycles) return false;
  }
}

// One value of step `step` (a residual read: the value was stored before, by a tile this one depends on through
// the LL words, so the first load normally has it). Past timeout_ns: a deadlock error, and NaN.
__device__ __forceinline__ float ll_value(const Params& p, const unsigned long long* word, int step, int opcode) {
  const unsigned tag = ll_tag(step);
  unsigned long long start = 0;
  for (unsigned spins = 0;; ++spins) {
    unsigned long long w;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(word) : "memory");
    if (ll_ready(w, tag)) return __uint_as_float((unsigned)w);
    if (spins == 0) start = globaltimer_ns();
    else if ((spins & 15u) == 0 && (globaltimer_ns() - start > (unsigned long long)p.timeout_ns || error_code(p.error))) {
      raise_error(p, ERROR_DEADLOCK, -1, step, -1, opcode);
      return __int_as_float(0x7fc00000);
    }
  }
}

// A residual tile's outputs: out_plain[i0 + r] = in(i0 + r) + add[r] for r < rows, each also stored with its tag. The
// input (x for O-proj, x_mid for Down) came through no counter the tile waited on (its producer signalled one the
// tile's own dependency chain passes through only by LL words), so it is read by its tag too.
__device__ __forceinline__ void ll_residual(const Params& p, const unsigned long long* in, float* out_plain,
                                            unsigned long long* out_ll, size_t i0, int rows, const float* add, int step,
                                            int opcode) {
  for (int r = threadIdx.x; r < rows; r += THREADS) {
    const float v = ll_value(p, in + i0 + r, step, opcode) + add[r];
    out_plain[i0 + r] = v;
    ll_store(out_ll + i0 + r, step, v);
  }
}
#endif
}  // namespace mk
