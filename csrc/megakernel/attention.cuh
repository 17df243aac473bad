// GQA decode attention, split over KV heads and KV positions (flash-decoding style).
//
// AttnPartial(layer, kv_head, split, head_part) handles G = group / attn_head_parts of the query
// heads that share one KV head (its head part of the group) over positions [split * S, min((split + 1) * S, pos + 1)) and writes, per query head, the unnormalised
// output o (head_dim floats), the running max m and the sum l of exp(score - m). OProj combines
// the used splits: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
#pragma once
#include "common.cuh"
#include "megakernel_params.h"
#include "regions.cuh"

namespace mk {

#if MK_ONE_SPLIT
// Row 40 (MK_ONE_SPLIT): a one-split launch's tile (the host's A3 = ATTN_DIRECT; its split, 0, is the head's only
// non-empty one) comes with split = -1 and writes its heads' o * (1 / l) to attn_out[layer] (the buffer after the
// partials: megakernel.cu attn_out_of) instead of (o, m, l). The O-proj combine of one split computes exactly that
// (weight e^(m - m) * (1 / l) = 1 / l, times o, plus 0 x o), so attn_out holds the combine's bits. The flag rides in
// split (no extra parameter: a pointer argument made the 2-head tile spill 20 B).
__device__ __forceinline__ float* attn_direct_out(const Params& p, int layer) {
  return p.attn_part + (size_t)p.n_layers * p.n_heads * p.n_splits * (p.head_dim + 2) + (size_t)layer * p.hidden;
}
#endif

// G query heads per tile, a compile-time count (the group / TileShape.attn_head_parts): every
// per-head loop is unrolled over exactly the heads the tile has.
template <int G>
__device__ __noinline__ void attention_partial_t(const Params& p, int layer, int kv_head, int split, int head_part,
                                                 int pos, float* smem) {
  const int Dh = (int)p.head_dim, S = (int)p.attn_split;
#if MK_ONE_SPLIT
  const bool direct = split < 0;  // row 40: a one-split launch's tile (split 0), output to attn_out
  split = max(split, 0);
#endif
  const int lo = split * S;
  const int hi = min(lo + S, pos + 1);
  if (lo >= hi) return;  // split past the current length
  const int n = hi - lo;
  float* qs = smem;            // [G][Dh]
  float* sc = smem + G * Dh;   // [G][S] scores, then probabilities
  float* ml = sc + G * S;      // [G][2] max, sum
  const int q0 = kv_head * (int)(p.n_heads / p.n_kv_heads) + head_part * G;  // first query head of the tile
  [[maybe_unused]] const unsigned at = coord(pos, layer);  // the detail regions' coordinate
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_SCORES, at);
  const float4* q4 = reinterpret_cast<const float4*>(p.q + (size_t)layer * p.hidden + q0 * Dh);
  for (int i = threadIdx.x; i < G * Dh / 4; i += THREADS) reinterpret_cast<float4*>(qs)[i] = __ldcg(q4 + i);
  __syncthreads();
  const float scale = rsqrtf((float)Dh);
  const size_t head_base = ((size_t)layer * p.n_kv_heads + kv_head) * p.max_seq;
  // The split's V rows (S x Dh bf16) go to shared memory during the score pass when they fit in the
  // PV partial-sum area (which is written only after the PV pass has read them).
  float* red = smem + ((G * Dh + G * S + 2 * G + 3) & ~3);  // [NWARPS][G][Dh] warp partial sums (16-byte aligned)
  uint4* vs = reinterpret_cast<uint4*>(red);
  const bool v_in_smem = (size_t)(red - smem) * 4 + max((size_t)S * Dh * 2, (size_t)NWARPS * G * Dh * 4) <=
                         (size_t)SMEM_FLOATS * 4;
  // Scores like the PV pass below: a warp reads ROWS_PER_WARP K rows per load (16 bytes per lane),
  // each lane dots its 8 dims with all G heads' q (registers), the lanes of a row sum by shuffles.
  // Inner loops are branch-free (rows past n
  // reload row n - 1 and are not stored): with a branch between two strong loads the compiler
  // issued one load per trip (SASS of 2026-12-01), which made this tile latency-bound.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  {
    const int lpr = Dh / 8, rpw = 32 / lpr, sub = lane / lpr, c8 = lane - sub * lpr;
    float qr[G][8];
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const float4 a = *reinterpret_cast<const float4*>(qs + (j < G ? j : G - 1) * Dh + 8 * c8);
      const float4 b = *reinterpret_cast<const float4*>(qs + (j < G ? j : G - 1) * Dh + 8 * c8 + 4);
      qr[j][0] = a.x; qr[j][1] = a.y; qr[j][2] = a.z; qr[j][3] = a.w;
      qr[j][4] = b.x; qr[j][5] = b.y; qr[j][6] = b.z; qr[j][7] = b.w;
    }
    const uint4* kbase = reinterpret_cast<const uint4*>(p.k_cache + (head_base + lo) * Dh) + c8;
    const uint4* vbase = reinterpret_cast<const uint4*>(p.v_cache + (head_base + lo) * Dh) + c8;
    const int stride = NWARPS * rpw;
    for (int base = warp * rpw; base < n; base += 4 * stride) {  // warp-uniform trips (shuffles inside)
      uint4 k[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) k[u] = __ldcg(kbase + (size_t)min(base + sub + u * stride, n - 1) * lpr);
      if (v_in_smem) {  // V rows ride along with the K rows (one L2 trip for both), parked in shared memory
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = __ldcg(vbase + (size_t)min(base + sub + u * stride, n - 1) * lpr);
#pragma unroll
        for (int u = 0; u < 4; ++u) vs[(size_t)min(base + sub + u * stride, n - 1) * lpr + c8] = v[u];
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int t = base + sub + u * stride;
        const float f[8] = {bf_lo(k[u].x), bf_hi(k[u].x), bf_lo(k[u].y), bf_hi(k[u].y),
                            bf_lo(k[u].z), bf_hi(k[u].z), bf_lo(k[u].w), bf_hi(k[u].w)};
#pragma unroll
        for (int j = 0; j < G; ++j) {
          float d = 0.f;
#pragma unroll
          for (int e = 0; e < 8; ++e) d = fmaf(f[e], qr[j][e], d);
          for (int o = 1; o < lpr; o <<= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
          if (j < G && c8 == 0 && t < n) sc[j * S + t] = d * scale;
        }
      }
    }
  }
  __syncthreads();
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_SCORES, at);
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_SOFTMAX, at);
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
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_SOFTMAX, at);
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_PV, at);
  // o = sum_t p_t v_t for all G heads at once (they share each V row): a warp reads ROWS_PER_WARP
  // V rows per load (16 bytes per lane, LANES_PER_ROW lanes per row), warps take interleaved
  // positions, so every V row is read once and 8 x 4 rows are in flight per unrolled trip; then
  // the row groups of a warp and the warps are summed (shuffles, then shared memory).
  {
    const int lpr = Dh / 8, rpw = 32 / lpr;  // lanes per V row, rows per warp-wide load
    const int sub = lane / lpr, c8 = lane - sub * lpr;  // this lane's row in the load, its 8 dims
    float acc[G][8];
#pragma unroll
    for (int j = 0; j < G; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[j][e] = 0.f;
    const uint4* vbase = reinterpret_cast<const uint4*>(p.v_cache + (head_base + lo) * Dh) + c8;
    const int stride = NWARPS * rpw;
    constexpr int PV = MK_BLOCKS_PER_SM > 1 ? 2 : 4;  // V rows per lane in flight (2 under the 128-register cap)
    for (int t0 = warp * rpw + sub; t0 < n; t0 += PV * stride) {
      uint4 v[PV];
#pragma unroll
      for (int u = 0; u < PV; ++u) {
        const size_t row = (size_t)min(t0 + u * stride, n - 1) * lpr;
        v[u] = v_in_smem ? vs[row + c8] : __ldcg(vbase + row);
      }
#pragma unroll
      for (int u = 0; u < PV; ++u) {
        const int t = min(t0 + u * stride, n - 1);
        const bool keep = t0 + u * stride < n;
        const float f[8] = {bf_lo(v[u].x), bf_hi(v[u].x), bf_lo(v[u].y), bf_hi(v[u].y),
                            bf_lo(v[u].z), bf_hi(v[u].z), bf_lo(v[u].w), bf_hi(v[u].w)};
#pragma unroll
        for (int j = 0; j < G; ++j) {
          const float pt = keep ? sc[(j < G ? j : G - 1) * S + t] : 0.f;
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[j][e] = fmaf(pt, f[e], acc[j][e]);
        }
      }
    }
    __syncthreads();  // every warp has read its V rows from `vs` before `red` (the same bytes) is written
#pragma unroll
    for (int j = 0; j < G; ++j) {
      if (j < G) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          float v = acc[j][e];
          for (int o = lpr; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
          acc[j][e] = v;
        }
        if (sub == 0) {
          float4* dst = reinterpret_cast<float4*>(red + ((size_t)warp * G + j) * Dh + 8 * c8);
          dst[0] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
          dst[1] = make_float4(acc[j][4], acc[j][5], acc[j][6], acc[j][7]);
        }
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * Dh; i += THREADS) {
      const int j = i / Dh, d = i - j * Dh;
      float o = 0.f;
#pragma unroll
      for (int w = 0; w < NWARPS; ++w) o += red[((size_t)w * G + j) * Dh + d];
#if MK_ONE_SPLIT
      if (direct) {  // one-split launch: the normalised output, as the combine of this one split
        attn_direct_out(p, layer)[(size_t)(q0 + j) * Dh + d] = o * (1.f / ml[2 * j + 1]);
        continue;
      }
#endif
      p.attn_part[(((size_t)layer * p.n_heads + q0 + j) * p.n_splits + split) * (Dh + 2) + d] = o;
    }
#if MK_ONE_SPLIT
    if (!direct)  // a direct tile writes no (max, sum): nothing combines its split
#endif
    for (int j = threadIdx.x; j < G; j += THREADS) {
      float* out = p.attn_part + (((size_t)layer * p.n_heads + q0 + j) * p.n_splits + split) * (Dh + 2);
      out[Dh] = ml[2 * j];
      out[Dh + 1] = ml[2 * j + 1];
    }
  }
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_PV, at);
}

#if MK_KV_PREFETCH
// The tile's split [lo, lo + n) at position pos (split < 0: a one-split launch's tile, split 0).
__device__ __forceinline__ int kv_split_lo(const Params& p, int split) { return max(split, 0) * (int)p.attn_split; }
__device__ __forceinline__ int kv_split_len(const Params& p, int split, int pos) {
  const int lo = kv_split_lo(p, split);
  return min(lo + (int)p.attn_split, pos + 1) - lo;
}

// Row 44: warp 0, before the tile's dependency wait: the split's K and V rows [lo, lo + n) into L2 (32 KiB pieces, one
// per lane: megakernel.cu prefetch_tile). The weights streamed since evict them, so without it every K/V trip of the
// tile's body is a DRAM round trip after the wait. Rows this launch has not written yet are prefetched too: L2 is where
// their writes land, so the later loads still see them.
__device__ __noinline__ void kv_prefetch_l2(const Params& p, int layer, int kv_head, int split, int pos) {
  const int Dh = (int)p.head_dim, n = kv_split_len(p, split, pos);
  if (n <= 0) return;
  const size_t row0 = (((size_t)layer * p.n_kv_heads + kv_head) * p.max_seq + kv_split_lo(p, split)) * Dh;
  const unsigned bytes = (unsigned)n * (unsigned)Dh * 2u;
  prefetch_tile(reinterpret_cast<const char*>(p.k_cache + row0), bytes);
  prefetch_tile(reinterpret_cast<const char*>(p.v_cache + row0), bytes);
}
#endif

#if MK_ATTN_V2
// Row 32 (MK_ATTN_V2=1; NOTES.md "Ready: row 32"), tiles of 1 or 2 query heads: the same (o, m, l) per head as attention_partial_t, with a
// shorter dependent chain. Each lane owns the rows (positions) it loads: its K and V rows and the tile's q are
// issued together (one round trip instead of q, barrier, then K/V), its scores stay in registers and feed an
// online softmax and the PV sum over its own rows (no score, probability or V round trip through shared memory).
// The lanes of a warp combine by shuffles (max, then the rescaled sums), the warps through shared memory after the
// one CTA barrier. U: rows per lane in flight per trip (all 128 of a split in one trip at Dh 64).
template <int G>
__device__ __noinline__ void attention_partial_v2_t(const Params& p, int layer, int kv_head, int split, int head_part,
                                                    int pos, float* smem) {
  constexpr int U = 4;
  const int Dh = (int)p.head_dim, S = (int)p.attn_split;
#if MK_ONE_SPLIT
  const bool direct = split < 0;  // row 40: a one-split launch's tile (split 0), output to attn_out
  split = max(split, 0);
#endif
  const int lo = split * S;
  const int n = min(lo + S, pos + 1) - lo;
  if (n <= 0) return;  // split past the current length
  const int q0 = kv_head * (int)(p.n_heads / p.n_kv_heads) + head_part * G;  // first query head of the tile
  [[maybe_unused]] const unsigned at = coord(pos, layer);  // the detail regions' coordinate
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int lpr = Dh / 8, rpw = 32 / lpr, sub = lane / lpr, c8 = lane - sub * lpr, stride = NWARPS * rpw;
  const size_t head_base = ((size_t)layer * p.n_kv_heads + kv_head) * p.max_seq;
  const uint4* kbase = reinterpret_cast<const uint4*>(p.k_cache + (head_base + lo) * Dh) + c8;
  const uint4* vbase = reinterpret_cast<const uint4*>(p.v_cache + (head_base + lo) * Dh) + c8;
  // read before the shared stores below: p lives in shared memory, so a later read would wait on them
#if MK_ONE_SPLIT
  // a direct tile's heads are rows of Dh floats of attn_out[layer]
  float* const out0 = direct ? attn_direct_out(p, layer) + (size_t)q0 * Dh
                             : p.attn_part + (((size_t)layer * p.n_heads + q0) * p.n_splits + split) * (Dh + 2);
  const size_t head_stride = direct ? (size_t)Dh : (size_t)p.n_splits * (Dh + 2);
#else
  float* const out0 = p.attn_part + (((size_t)layer * p.n_heads + q0) * p.n_splits + split) * (Dh + 2);
  const size_t head_stride = (size_t)p.n_splits * (Dh + 2);
#endif
  const float scale = rsqrtf((float)Dh);
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_SCORES, at);
  float4 qa[G], qb[G];  // this lane's 8 dims of each head's q: issued with the first trip's K/V loads
  const float* qg = p.q + (size_t)layer * p.hidden + (size_t)q0 * Dh + 8 * c8;
#pragma unroll
  for (int j = 0; j < G; ++j) {
    qa[j] = __ldcg(reinterpret_cast<const float4*>(qg + j * Dh));
    qb[j] = __ldcg(reinterpret_cast<const float4*>(qg + j * Dh + 4));
  }
  float m[G], l[G], acc[G][8];  // this lane's running max, sum and PV sum (its 8 dims) per head, over its rows
#pragma unroll
  for (int j = 0; j < G; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[j][e] = 0.f;
  }
  for (int base = warp * rpw; base < n; base += U * stride) {  // warp-uniform trips (shuffles inside)
    uint4 k[U], v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) k[u] = __ldcg(kbase + (size_t)min(base + sub + u * stride, n - 1) * lpr);
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldcg(vbase + (size_t)min(base + sub + u * stride, n - 1) * lpr);
    float s[U][G];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float f[8] = {bf_lo(k[u].x), bf_hi(k[u].x), bf_lo(k[u].y), bf_hi(k[u].y),
                          bf_lo(k[u].z), bf_hi(k[u].z), bf_lo(k[u].w), bf_hi(k[u].w)};
#pragma unroll
      for (int j = 0; j < G; ++j) {
        const float q[8] = {qa[j].x, qa[j].y, qa[j].z, qa[j].w, qb[j].x, qb[j].y, qb[j].z, qb[j].w};
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(f[e], q[e], d);
        s[u][j] = d;
      }
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {  // a row's lanes sum its dot: all U x G trees side by side, one level a time
      if (o < lpr) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int j = 0; j < G; ++j) s[u][j] += __shfl_xor_sync(0xffffffffu, s[u][j], o);
      }
    }
    MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_SCORES, at);
    MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_SOFTMAX, at);
#pragma unroll
    for (int j = 0; j < G; ++j) {  // online softmax over this lane's rows (rows past n reload n - 1: weight 0)
      float mn = m[j];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        s[u][j] = base + sub + u * stride < n ? s[u][j] * scale : -INFINITY;
        mn = fmaxf(mn, s[u][j]);
      }
      const float a = mn == -INFINITY ? 1.f : __expf(m[j] - mn);  // m = -inf, mn finite: 0
      l[j] *= a;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[j][e] *= a;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float pt = s[u][j] == -INFINITY ? 0.f : __expf(s[u][j] - mn);
        l[j] += pt;
        const float f[8] = {bf_lo(v[u].x), bf_hi(v[u].x), bf_lo(v[u].y), bf_hi(v[u].y),
                            bf_lo(v[u].z), bf_hi(v[u].z), bf_lo(v[u].w), bf_hi(v[u].w)};
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[j][e] = fmaf(pt, f[e], acc[j][e]);
      }
      m[j] = mn;
    }
    MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_SOFTMAX, at);
    MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_SCORES, at);
  }
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_SCORES, at);
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_PV, at);
  // The warp's row groups (lanes with the same c8): max, then rescaled sums, by shuffles. A warp without rows keeps
  // m = -inf, l = 0, acc = 0 (its weight below is 0).
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    if (o >= lpr) {
#pragma unroll
      for (int j = 0; j < G; ++j) {
        const float mo = __shfl_xor_sync(0xffffffffu, m[j], o);
        const float mn = fmaxf(m[j], mo);
        const float a = m[j] == -INFINITY ? 0.f : __expf(m[j] - mn), b = mo == -INFINITY ? 0.f : __expf(mo - mn);
        l[j] = l[j] * a + __shfl_xor_sync(0xffffffffu, l[j], o) * b;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[j][e] = acc[j][e] * a + __shfl_xor_sync(0xffffffffu, acc[j][e], o) * b;
        m[j] = mn;
      }
    }
  }
  float* red = smem;                  // [NWARPS][G][Dh] the warps' PV sums
  float* wml = smem + NWARPS * G * Dh;  // [NWARPS][G][2] their (max, sum)
  if (sub == 0) {
#pragma unroll
    for (int j = 0; j < G; ++j) {
      float4* dst = reinterpret_cast<float4*>(red + ((size_t)warp * G + j) * Dh + 8 * c8);
      dst[0] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
      dst[1] = make_float4(acc[j][4], acc[j][5], acc[j][6], acc[j][7]);
      if (c8 == 0) {
        wml[2 * (warp * G + j)] = m[j];
        wml[2 * (warp * G + j) + 1] = l[j];
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * Dh; i += THREADS) {  // the warps' sums, weighted by e^(m_w - M)
    const int j = i / Dh, d = i - j * Dh;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NWARPS; ++w) M = fmaxf(M, wml[2 * (w * G + j)]);  // finite: the split has a row
    float o = 0.f, den = 0.f;
#pragma unroll
    for (int w = 0; w < NWARPS; ++w) {
      const float a = __expf(wml[2 * (w * G + j)] - M);  // a warp without rows: e^-inf = 0
      o = fmaf(a, red[((size_t)w * G + j) * Dh + d], o);
      den = fmaf(a, wml[2 * (w * G + j) + 1], den);
    }
    float* out = out0 + j * head_stride;
#if MK_ONE_SPLIT
    if (direct) {  // one-split launch: the normalised output, as the combine of this one split
      out[d] = o * (1.f / den);
      continue;
    }
#endif
    out[d] = o;
    if (d == 0) {
      out[Dh] = M;
      out[Dh + 1] = den;
    }
  }
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_PV, at);
}
#endif

__device__ __forceinline__ void attention_partial(const Params& p, int layer, int kv_head, int split, int head_part,
                                                  int pos, float* smem) {
  switch ((int)(p.n_heads / p.n_kv_heads / p.attn_head_parts)) {  // host-checked: 1, 2, 4 or 8
#if MK_ATTN_V2  // 1 or 2 heads per tile (the default's 2); 4 and 8 keep the three-pass tile (v2 would spill there)
    case 1: attention_partial_v2_t<1>(p, layer, kv_head, split, head_part, pos, smem); break;
    case 2: attention_partial_v2_t<2>(p, layer, kv_head, split, head_part, pos, smem); break;
#else
    case 1: attention_partial_t<1>(p, layer, kv_head, split, head_part, pos, smem); break;
    case 2: attention_partial_t<2>(p, layer, kv_head, split, head_part, pos, smem); break;
#endif
    case 4: attention_partial_t<4>(p, layer, kv_head, split, head_part, pos, smem); break;
    default: attention_partial_t<8>(p, layer, kv_head, split, head_part, pos, smem); break;
  }
}

// wts[h * used + s] = head h's combine weight of split s, e^(m_s - M) / sum_s'(l_s' e^(m_s' - M)), from the
// splits' (max, sum) pairs at base + off (rows of Dh + 2 floats, NS per head): an online max / sum over chunks of 8
// splits. Shared by both combines (load_attention_combined, combine_group_t) so their weights are bit-identical.
// base and off stay apart (not one pointer) so the inlined address arithmetic is grouped as before the fold.
__device__ __forceinline__ void combine_weights_head(const float* base, size_t off, float* wts, int h, int NS, int Dh,
                                                     int used) {
  const float* ph = base + off + (size_t)h * NS * (Dh + 2);
  float den = 0.f, M = -INFINITY;  // declared in this order: load_attention_combined's SASS stays as before the fold
  for (int s0 = 0; s0 < used; s0 += 8) {
    float m[8], l[8];  // a chunk's (max, sum) pairs in flight at once
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int sc = min(s0 + s, used - 1);
      m[s] = __ldcg(ph + sc * (Dh + 2) + Dh);
      l[s] = __ldcg(ph + sc * (Dh + 2) + Dh + 1);
    }
    float Mn = M;
#pragma unroll
    for (int s = 0; s < 8; ++s) Mn = fmaxf(Mn, m[s]);  // clamped repeats do not change the max
    den *= __expf(M - Mn);  // 0 * exp(-inf) on the first chunk: den is 0 there, M - Mn = -inf -> 0
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      if (s0 + s < used) {
        den = fmaf(__expf(m[s] - Mn), l[s], den);
        wts[h * used + s0 + s] = m[s];  // the raw max for now
      }
    }
    M = Mn;
  }
  const float inv = 1.f / den;
  for (int s = 0; s < used; ++s) wts[h * used + s] = __expf(wts[h * used + s] - M) * inv;
}

#if MK_COMBINE_LANES
// Row 59 (MK_COMBINE_LANES): combine_weights_head for used <= 8 splits with its 16 loads per head spread over 8 lanes:
// lane j of head h = threadIdx.x / 8 loads split min(j, used - 1)'s (max, sum) pair as one 8-byte load, shuffles give
// the group's lane 0 all 8 pairs, and it runs the same chunk arithmetic (the same weights, bit for bit). Called by
// whole warps: threadIdx.x < 8 x n_heads, a multiple of 32.
__device__ __forceinline__ void combine_weights_lanes(const float* base, size_t off, float* wts, int NS, int Dh,
                                                      int used) {
  const int h = (int)threadIdx.x >> 3, j = (int)threadIdx.x & 7;
  const float* ph = base + off + (size_t)h * NS * (Dh + 2);
  const float2 ml = __ldcg(reinterpret_cast<const float2*>(ph + min(j, used - 1) * (Dh + 2) + Dh));
  const int lane0 = (int)(threadIdx.x & 31) & ~7;
  float m[8], l[8];
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    m[s] = __shfl_sync(0xffffffffu, ml.x, lane0 + s);
    l[s] = __shfl_sync(0xffffffffu, ml.y, lane0 + s);
  }
  if (j == 0) {  // combine_weights_head's one chunk, operation for operation (folding the two into one helper
                 // changed the default's SASS, nvcc 13.0): M = max, den = sum e^(m_s - M) l_s, then the weights
    float M = -INFINITY;
#pragma unroll
    for (int s = 0; s < 8; ++s) M = fmaxf(M, m[s]);
    float den = 0.f;  // the head's first chunk: its den *= e^(-inf - M) leaves 0
#pragma unroll
    for (int s = 0; s < 8; ++s)
      if (s < used) den = fmaf(__expf(m[s] - M), l[s], den);
    const float inv = 1.f / den;
    for (int s = 0; s < used; ++s) wts[h * used + s] = __expf(m[s] - M) * inv;
  }
}
#endif

// The combined outputs to xs[0, D), then a barrier (the O-proj GEMV reads them): both forms of load_attention_combined.
__device__ __forceinline__ void store_combined(const float (&acc)[COMBINE_PER_THREAD], float* xs, int D) {
#pragma unroll
  for (int k = 0; k < COMBINE_PER_THREAD; ++k) {
    const int i = threadIdx.x + k * THREADS;
    if (i < D) xs[i] = acc[k];
  }
  __syncthreads();
}

// xs[h * Dh + d] = combined attention output of layer `layer` at position `pos`.
// First one thread per head turns the splits' (max, sum) into weights e^(m_s - M) / sum_s'(...);
// then every thread sums its COMBINE_PER_THREAD outputs over the splits with all loads in flight.
// Shared memory: xs[hidden] then the weights [n_heads][used] (host-checked to fit).
// Both forms' names for the launch's shapes, the splits used at `pos`, layer `layer`'s partials (p.attn_part read once:
// the weights pass stores to shared memory, where p lives) and the weights' place in xs. A macro, not a function
// returning a struct: that form changed the loop form's SASS (the measured control, mk_comb_loop; nvcc 13.0).
#define MK_COMBINE_FRAME                                                                       \
  const int Dh = (int)p.head_dim, H = (int)p.n_heads, NS = (int)p.n_splits, D = (int)p.hidden; \
  const int used = (pos + (int)p.attn_split) / (int)p.attn_split; /* ceil((pos + 1) / S) */   \
  const float* attn = p.attn_part;                                                             \
  const size_t off = (size_t)layer * H * NS * (Dh + 2);                                        \
  const float* part = attn + off;                                                              \
  float* wts = xs + D;
#if MK_COMBINE_AHEAD
// Row 58 (MK_COMBINE_AHEAD = C splits per chunk): the same combine with the partials' loads off the weights' path.
// Each thread issues its first C splits' outputs (C x COMBINE_PER_THREAD loads) before the weights pass, so they fly
// during it, and each next chunk's after the FMAs of the one before: ceil(used / C) L2 trips in all, the first beside
// the weights, against 1 + ceil(used / 2) for the loop below. The same FMAs in the same order per output (splits
// past used add w = 0 times a clamped, finite split), so the values are the loop's.
__device__ __noinline__ void load_attention_combined(const Params& p, int layer, int pos, float* xs) {
  constexpr int C = MK_COMBINE_AHEAD;
  MK_COMBINE_FRAME
  int first[COMBINE_PER_THREAD];  // each output's split-0 offset in part (32-bit: fewer registers live)
#pragma unroll
  for (int k = 0; k < COMBINE_PER_THREAD; ++k) {
    const int i = min((int)threadIdx.x + k * THREADS, D - 1);
    const int h = i / Dh;
    first[k] = h * NS * (Dh + 2) + (i - h * Dh);
  }
  float v[C][COMBINE_PER_THREAD];
  auto load_chunk = [&](int s0) {
#pragma unroll
    for (int u = 0; u < C; ++u) {
      const int row = min(s0 + u, used - 1) * (Dh + 2);
#pragma unroll
      for (int k = 0; k < COMBINE_PER_THREAD; ++k) v[u][k] = __ldcg(part + first[k] + row);
    }
  };
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_COMBINE_WEIGHTS, coord(pos, layer));
  load_chunk(0);
#if MK_COMBINE_LANES
  if (used <= 8 && H * 8 <= THREADS && H % 4 == 0) {  // 8 lanes per head in whole warps (uniform)
    if ((int)threadIdx.x < H * 8) combine_weights_lanes(attn, off, wts, NS, Dh, used);
  } else
#endif
  for (int h = threadIdx.x; h < H; h += THREADS)
    combine_weights_head(attn, off, wts, h, NS, Dh, used);
  __syncthreads();
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_COMBINE_WEIGHTS, coord(pos, layer));
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_COMBINE_SUM, coord(pos, layer));
  float acc[COMBINE_PER_THREAD];
#pragma unroll
  for (int k = 0; k < COMBINE_PER_THREAD; ++k) acc[k] = 0.f;
  for (int s0 = 0; s0 < used; s0 += C) {
    if (s0 > 0) load_chunk(s0);
#pragma unroll
    for (int u = 0; u < C; ++u)  // the loop form's FMAs in its order (it keeps its unsigned index: the control's SASS)
#pragma unroll
      for (int k = 0; k < COMBINE_PER_THREAD; ++k) {
        const int i = min((int)threadIdx.x + k * THREADS, D - 1);
        const float w = s0 + u < used ? wts[(i / Dh) * used + s0 + u] : 0.f;
        acc[k] = fmaf(w, v[u][k], acc[k]);
      }
  }
  store_combined(acc, xs, D);
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_COMBINE_SUM, coord(pos, layer));
}
#else
__device__ __noinline__ void load_attention_combined(const Params& p, int layer, int pos, float* xs) {
  MK_COMBINE_FRAME
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_COMBINE_WEIGHTS, coord(pos, layer));
  for (int h = threadIdx.x; h < H; h += THREADS)
    combine_weights_head(attn, off, wts, h, NS, Dh, used);
  __syncthreads();
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_COMBINE_WEIGHTS, coord(pos, layer));
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_COMBINE_SUM, coord(pos, layer));
  float acc[COMBINE_PER_THREAD];
#pragma unroll
  for (int k = 0; k < COMBINE_PER_THREAD; ++k) acc[k] = 0.f;
  for (int s0 = 0; s0 < used; s0 += 2) {  // branch-free body: 2 splits x COMBINE_PER_THREAD loads in flight
    float v[2][COMBINE_PER_THREAD];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int k = 0; k < COMBINE_PER_THREAD; ++k) {
        const int i = min(threadIdx.x + k * THREADS, D - 1);
        const int h = i / Dh, d = i - h * Dh;
        v[u][k] = __ldcg(part + ((size_t)h * NS + min(s0 + u, used - 1)) * (Dh + 2) + d);
      }
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int k = 0; k < COMBINE_PER_THREAD; ++k) {
        const int i = min(threadIdx.x + k * THREADS, D - 1);
        const float w = s0 + u < used ? wts[(i / Dh) * used + s0 + u] : 0.f;
        acc[k] = fmaf(w, v[u][k], acc[k]);
      }
  }
  store_combined(acc, xs, D);
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_COMBINE_SUM, coord(pos, layer));
}
#endif
#undef MK_COMBINE_FRAME

#if MK_LAST_COMBINE
// The combined attention output of one KV head's query group (MK_LAST_COMBINE): what load_attention_combined
// computes for heads [h0, h0 + group), with the same arithmetic in the same order per head and per output (so the
// values are bit for bit the O-proj combine's), written to out[h0 * Dh, (h0 + group) * Dh) in global memory.
// Run by the group's last-arriving AttnPartial tile. One L2 round trip where it fits: warp 0 computes the weights
// (a lane per head) while warps 1.. copy the used splits' outputs to shared memory, then the sum reads them there
// (else the sum loads them from L2 after the weights, as the O-proj combine). PER: outputs per thread
// (group * head_dim <= PER * THREADS), a compile-time count so the loads in flight are all used.
template <int PER>
__device__ __noinline__ void combine_group_t(const Params& p, int layer, int kv_head, int pos, float* smem, float* out) {
  const int Dh = (int)p.head_dim, H = (int)p.n_heads, NS = (int)p.n_splits;
  const int group = H / (int)p.n_kv_heads, h0 = kv_head * group, n = group * Dh;
  const int used = (pos + (int)p.attn_split) / (int)p.attn_split;  // ceil((pos + 1) / S)
  const float* attn = p.attn_part;  // read once, as in load_attention_combined
  const size_t off = ((size_t)layer * H + h0) * NS * (Dh + 2);
  const float* part = attn + off;  // the group's first head
  float* wts = smem;                                // [group][used] weights
  float* os = smem + ((group * used + 1) & ~1);     // [group][used][Dh] the used splits' outputs (8-byte aligned)
  const bool staged = (int)(os - smem) + group * used * Dh <= SMEM_FLOATS;
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_COMBINE_WEIGHTS, coord(pos, layer));
  if (threadIdx.x < 32) {
    for (int h = threadIdx.x; h < group; h += 32)  // a lane per head (host: group <= 8)
      combine_weights_head(attn, off, wts, h, NS, Dh, used);
  } else if (staged) {  // rows are Dh + 2 floats: 8-byte pieces, 8 per thread in flight
    const int n2 = group * used * Dh / 2, C = THREADS - 32;
    for (int j0 = (int)threadIdx.x - 32; j0 < n2; j0 += 8 * C) {
      float2 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int f = 2 * min(j0 + u * C, n2 - 1), hs = f / Dh, d = f - hs * Dh, h = hs / used, sp = hs - h * used;
        v[u] = __ldcg(reinterpret_cast<const float2*>(part + ((size_t)h * NS + sp) * (Dh + 2) + d));
      }
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (j0 + u * C < n2) reinterpret_cast<float2*>(os)[j0 + u * C] = v[u];
    }
  }
  __syncthreads();
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_COMBINE_WEIGHTS, coord(pos, layer));
  MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_ATTENTION_COMBINE_SUM, coord(pos, layer));
  float acc[PER];
#pragma unroll
  for (int k = 0; k < PER; ++k) acc[k] = 0.f;
  for (int s0 = 0; s0 < used; s0 += 2) {  // as the O-proj combine: 2 splits x PER values, clamped, w = 0 past used
    float v[2][PER];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int k = 0; k < PER; ++k) {
        const int i = min((int)threadIdx.x + k * THREADS, n - 1);
        const int h = i / Dh, d = i - h * Dh, sp = min(s0 + u, used - 1);
        v[u][k] = staged ? os[(h * used + sp) * Dh + d] : __ldcg(part + ((size_t)h * NS + sp) * (Dh + 2) + d);
      }
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int k = 0; k < PER; ++k) {
        const int i = min((int)threadIdx.x + k * THREADS, n - 1);
        const float w = s0 + u < used ? wts[(i / Dh) * used + s0 + u] : 0.f;
        acc[k] = fmaf(w, v[u][k], acc[k]);
      }
  }
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int i = threadIdx.x + k * THREADS;
    if (i < n) out[(size_t)h0 * Dh + i] = acc[k];
  }
  MK_DETAIL_END(ARGUS_REGION_DECODE_ATTENTION_COMBINE_SUM, coord(pos, layer));
}

__device__ __forceinline__ void combine_group(const Params& p, int layer, int kv_head, int pos, float* smem, float* out) {
  const int n = (int)(p.n_heads / p.n_kv_heads * p.head_dim);  // host-checked: <= COMBINE_PER_THREAD * THREADS
  if (n <= THREADS) combine_group_t<1>(p, layer, kv_head, pos, smem, out);
  else if (n <= 2 * THREADS) combine_group_t<2>(p, layer, kv_head, pos, smem, out);
  else if (n <= 4 * THREADS) combine_group_t<4>(p, layer, kv_head, pos, smem, out);
  else combine_group_t<COMBINE_PER_THREAD>(p, layer, kv_head, pos, smem, out);
}
#endif

}  // namespace mk
