// GQA decode attention, split over KV heads and KV positions (flash-decoding style).
//
// AttnPartial(layer, kv_head, split) handles the `group` query heads that share one KV head over
// positions [split * S, min((split + 1) * S, pos + 1)) and writes, per query head, the unnormalised
// output o (head_dim floats), the running max m and the sum l of exp(score - m). OProj combines
// the used splits: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
#pragma once
#include "common.cuh"
#include "megakernel_params.h"

namespace mk {

__device__ __noinline__ void attention_partial(const Params& p, int layer, int kv_head, int split, int pos,
                                               float* smem) {
  const int Dh = (int)p.head_dim, G = (int)(p.n_heads / p.n_kv_heads), S = (int)p.attn_split;
  const int lo = split * S;
  const int hi = min(lo + S, pos + 1);
  if (lo >= hi) return;  // split past the current length
  const int n = hi - lo;
  float* qs = smem;            // [G][Dh]
  float* sc = smem + G * Dh;   // [G][S] scores, then probabilities
  float* ml = sc + G * S;      // [G][2] max, sum
  const int q0 = kv_head * G;  // first query head of the group
  for (int i = threadIdx.x; i < G * Dh; i += THREADS) qs[i] = __ldcg(p.q + (size_t)layer * p.hidden + q0 * Dh + i);
  __syncthreads();
  const float scale = rsqrtf((float)Dh);
  const size_t head_base = ((size_t)layer * p.n_kv_heads + kv_head) * p.max_seq;
  for (int t = threadIdx.x; t < n; t += THREADS) {  // one KV position per thread
    const uint4* krow = reinterpret_cast<const uint4*>(p.k_cache + (head_base + lo + t) * Dh);
    float s[MAX_GROUP];
#pragma unroll
    for (int j = 0; j < MAX_GROUP; ++j) s[j] = 0.f;
#pragma unroll 8
    for (int c = 0; c < Dh / 8; ++c) {
      const uint4 k = __ldcg(krow + c);  // appended this step by another CTA
#pragma unroll
      for (int j = 0; j < MAX_GROUP; ++j) {
        if (j < G) {
          const float4 a = *reinterpret_cast<const float4*>(qs + j * Dh + 8 * c);
          const float4 b = *reinterpret_cast<const float4*>(qs + j * Dh + 8 * c + 4);
          s[j] += dot8(k, a, b);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < MAX_GROUP; ++j)
      if (j < G) sc[j * S + t] = s[j] * scale;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int j = warp; j < G; j += NWARPS) {  // softmax pieces, one warp per query head
    float m = -INFINITY;
    for (int t = lane; t < n; t += 32) m = fmaxf(m, sc[j * S + t]);
    m = warp_max(m);
    float l = 0.f;
    for (int t = lane; t < n; t += 32) {
      const float e = __expf(sc[j * S + t] - m);
      sc[j * S + t] = e;
      l += e;
    }
    l = warp_sum(l);
    if (lane == 0) {
      ml[2 * j] = m;
      ml[2 * j + 1] = l;
    }
  }
  __syncthreads();
  for (int j = warp; j < G; j += NWARPS) {  // o = sum_t p_t v_t, lanes own pairs of dims
    float* out = p.attn_part + (((size_t)layer * p.n_heads + q0 + j) * p.n_splits + split) * (Dh + 2);
    for (int d2 = lane; d2 < Dh / 2; d2 += 32) {
      float o0 = 0.f, o1 = 0.f;
      const unsigned* vcol = reinterpret_cast<const unsigned*>(p.v_cache + (head_base + lo) * Dh) + d2;
#pragma unroll 16
      for (int t = 0; t < n; ++t) {  // unrolled: 16 independent V loads in flight, not one L2 trip per t
        const unsigned v = __ldcg(vcol + (size_t)t * (Dh / 2));
        const float pt = sc[j * S + t];
        o0 = fmaf(pt, bf_lo(v), o0);
        o1 = fmaf(pt, bf_hi(v), o1);
      }
      out[2 * d2] = o0;
      out[2 * d2 + 1] = o1;
    }
    if (lane == 0) {
      out[Dh] = ml[2 * j];
      out[Dh + 1] = ml[2 * j + 1];
    }
  }
}

// xs[h * Dh + d] = combined attention output of layer `layer` at position `pos`.
// First one thread per head turns the splits' (max, sum) into weights e^(m_s - M) / sum_s'(...);
// then every thread sums its COMBINE_PER_THREAD outputs over the splits with all loads in flight.
// Shared memory: xs[hidden] then the weights [n_heads][used] (host-checked to fit).
__device__ __noinline__ void load_attention_combined(const Params& p, int layer, int pos, float* xs) {
  const int Dh = (int)p.head_dim, H = (int)p.n_heads, NS = (int)p.n_splits, D = (int)p.hidden;
  const int used = (pos + (int)p.attn_split) / (int)p.attn_split;  // ceil((pos + 1) / S)
  const float* part = p.attn_part + (size_t)layer * H * NS * (Dh + 2);
  float* wts = xs + D;
  for (int h = threadIdx.x; h < H; h += THREADS) {
    const float* ph = part + (size_t)h * NS * (Dh + 2);
    float M = -INFINITY;
#pragma unroll 4
    for (int s = 0; s < used; ++s) M = fmaxf(M, __ldcg(ph + s * (Dh + 2) + Dh));
    float den = 0.f;
#pragma unroll 4
    for (int s = 0; s < used; ++s) {
      const float w = __expf(__ldcg(ph + s * (Dh + 2) + Dh) - M);
      wts[h * used + s] = w;
      den = fmaf(w, __ldcg(ph + s * (Dh + 2) + Dh + 1), den);
    }
    const float inv = 1.f / den;
    for (int s = 0; s < used; ++s) wts[h * used + s] *= inv;
  }
  __syncthreads();
  float acc[COMBINE_PER_THREAD];
#pragma unroll
  for (int k = 0; k < COMBINE_PER_THREAD; ++k) acc[k] = 0.f;
  for (int s = 0; s < used; ++s) {
#pragma unroll
    for (int k = 0; k < COMBINE_PER_THREAD; ++k) {
      const int i = threadIdx.x + k * THREADS;
      if (i < D) {
        const int h = i / Dh, d = i - h * Dh;
        acc[k] = fmaf(wts[h * used + s], __ldcg(part + ((size_t)h * NS + s) * (Dh + 2) + d), acc[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < COMBINE_PER_THREAD; ++k) {
    const int i = threadIdx.x + k * THREADS;
    if (i < D) xs[i] = acc[k];
  }
  __syncthreads();
}

}  // namespace mk
