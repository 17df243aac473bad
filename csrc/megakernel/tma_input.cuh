// Row 60 (config.cuh MK_TMA_INPUT, opt-in; megakernel/NOTES.md "Ready: row 60"): a tile's input vector by bulk
// copies (cp.async.bulk into the CTA's xs, completing on one mbarrier) that thread 0 issues the moment its poll sees
// the counter, instead of every thread's loads after the barrier: the copy engine's path to L2, which a
// register-streaming neighbour on the SM may slow less than it slows loads (benchmarks/weight_stream.py's probes).
// The early tiles' uses are in early.cuh; Down's (bit 4) is tma_down_vector below, called by op_down.
//
// Included by megakernel.cu inside namespace mk, after Smem.
#pragma once

#if MK_TMA_INPUT
// Thread 0, its poll having seen the counter (an acquire): `bytes` of the tile's input vector x into xs and, for a
// norm (`g` set), `g_bytes` of the norm's bf16 weights into the floats after x's EARLY_K (early.cuh), by bulk copies
// completing on s.input_bar. The copy engine reads memory through the async proxy: the proxy fence orders those
// reads after the acquire.
__device__ __forceinline__ void tma_input_issue(Smem& s, const float* x, unsigned bytes, const __nv_bfloat16* g,
                                                unsigned g_bytes) {
  asm volatile("fence.proxy.async.global;" ::: "memory");
  stage_expect(&s.input_bar, bytes + (g ? g_bytes : 0));
  stage_copy(&s.input_bar, reinterpret_cast<unsigned char*>(s.xs), reinterpret_cast<const char*>(x), bytes);
  if (g)
    stage_copy(&s.input_bar, reinterpret_cast<unsigned char*>(s.xs) + bytes, reinterpret_cast<const char*>(g),
               g_bytes);
  s.input_parity = s.input_uses & 1u;
  ++s.input_uses;
}

// Every thread: wait until this tile's input copies landed; false (an error raised) if they did not by the deadline.
__device__ __forceinline__ bool tma_input_landed(const Params& p, Smem& s) {
  const bool landed = stage_wait(&s.input_bar, s.input_parity, (unsigned long long)p.timeout_ns);
  if (__syncthreads_or(!landed)) {  // every thread takes the same branch, even at the deadline's edge
    if (threadIdx.x == 0) raise_error(p, ERROR_STAGE_TIMEOUT, -1, -1, -1, -1);
    return false;
  }
  return true;
}

#if MK_TMA_INPUT & 4
// Bit 4: a Down tile's h (ffn floats) by one bulk copy, issued and landed in op_down (Down tiles are not early); a
// shape whose h is not whole 16-byte pieces that fit xs takes load_vector.
__device__ __noinline__ bool tma_down_vector(const Params& p, Smem& s, int layer) {
  const float* h = p.h + (size_t)layer * p.ffn;
  if (p.ffn % 4 != 0 || p.ffn > (size_t)SMEM_FLOATS) {
    load_vector(h, (int)p.ffn, s.xs);
    return true;
  }
  if (threadIdx.x == 0) tma_input_issue(s, h, (unsigned)p.ffn * 4u, nullptr, 0);
  return tma_input_landed(p, s);
}
#endif
#endif
