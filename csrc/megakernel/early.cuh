// Rows 48 + 48b (config.cuh: MK_EARLY_REGS; the decoder's default, TileShape.early_regs=7, since their H200 run): a
// QKV or one-split O-proj tile of 16 rows x K = 2048 (TinyLlama's shapes) loads its whole weight tile into registers
// *before* its dependency wait, so its 64 KiB move while the phase before it finishes (QKV: Down's tail and the
// hand-off; O-proj: the attention phase, which leaves DRAM idle), then waits, loads its input vector and only
// multiplies; a gate/up tile (44 rows, bit 4) does the same with its first 16 rows, then streams the rest as ever
// (gemv_tile, a call once those registers are used). Row 48c (bit 8, opt-in, a measured miss): Down's first trips.
// Registers are the one staging buffer that costs no L1: shared-memory staging shrank L1 and slowed every
// register-streamed GEMV (rows 43, 46, 46b), and L2 is no nearer than DRAM for a GEMV tile (rows 45, 45b). It is the
// tile gemv_rows<false> streams in its one batch (GEMV_ROWS rows per warp, GEMV_UNROLL chunks per lane per row),
// summed in the same order: outputs are the plain build's bit for bit (NOTES.md "Row 48 measured" and after).
//
// No call may sit between the loads and their use: ptxas saves live registers around a call, so the 64 weight
// registers would go to the stack (NOTES.md, row 14's compiler lessons). So the wait loop (sync.cuh
// wait_counter_impl), the norm and the vector load are inlined here (forms of load_rmsnorm / load_vector for n =
// EARLY_K), and this header holds a copy of op_qkv's KV update and of op_oproj's residual (megakernel.cu): sharing
// their bodies through forceinline functions changed the SASS of the builds without the flag (ptxas 13.0,
// 2026-12-03), which its existence must not. tests/test_megakernel_early_gpu.py checks it all against NOEARLY_TILES'
// build bit for bit.
//
// Included by megakernel.cu inside namespace mk, after the ops (it uses Smem, tile_weights, attn_out_of, the regions).
#pragma once

#if MK_EARLY_REGS
#if !MK_STATIC_TICKETS
#error "MK_EARLY_REGS takes the static next ticket (early_tile): build it with MK_STATIC_TICKETS=1"
#endif

constexpr int EARLY_ROWS = NWARPS * GEMV_ROWS;  // one batch: every warp GEMV_ROWS rows
constexpr int EARLY_K = 32 * 8 * GEMV_UNROLL;   // GEMV_UNROLL 16-byte chunks per lane per row
// early_rmsnorm / early_vector take one 8-float chunk per thread: other GEMV_UNROLL builds keep every tile plain
constexpr bool EARLY_SHAPES = EARLY_K == 8 * THREADS;

// The tile takes the early path: the op is switched on by the flag's bits and the tile is one batch of gemv_rows.
// O-proj only in one-split launches (A2: its input is attn_out, one vector load; the combine has its own calls).
__device__ __forceinline__ bool early_eligible(const Params& p, const int* ins, int op) {
  if (!EARLY_SHAPES || (int)p.hidden != EARLY_K) return false;
  if (op == OP_QKV_HEAD) return (MK_EARLY_REGS & 1) && p.head_dim == (size_t)EARLY_ROWS * p.qkv_parts;
  if (op == OP_O_PROJ) return (MK_EARLY_REGS & 2) && ins[W_A1] == EARLY_ROWS && ins[W_A2] != 0;
  if (op == OP_GATE_UP) return (MK_EARLY_REGS & 4) && 2 * ins[W_A1] >= EARLY_ROWS;
#if MK_EARLY_REGS & 8
  // row 48c: a Down tile of one row per warp (gemv_halves' shape) whose K-halves have at least one full early batch
  if (op == OP_DOWN) return MK_DOWN_PIECES == 1 && ins[W_A1] == NWARPS && p.ffn % 16 == 0 &&
                            p.ffn / 16 >= 32 * GEMV_UNROLL;
#endif
  return false;
}

// load_rmsnorm (gemv.cuh) at n = EARLY_K (EARLY_SHAPES), inlined: one 8-float chunk per thread, the same products and
// sum order (xs = x * g; returns rsqrt(mean(x^2) + eps)).
__device__ __forceinline__ float early_rmsnorm(const float* x, const __nv_bfloat16* __restrict__ g, float eps,
                                               float* xs, float* scratch) {
  const int c = threadIdx.x;
  const float4 a = __ldcg(reinterpret_cast<const float4*>(x) + 2 * c);
  const float4 b = __ldcg(reinterpret_cast<const float4*>(x) + 2 * c + 1);
  const uint4 w = __ldg(reinterpret_cast<const uint4*>(g) + c);
  const float ss = a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
  float4* xs4 = reinterpret_cast<float4*>(xs);
  xs4[2 * c] = make_float4(a.x * bf_lo(w.x), a.y * bf_hi(w.x), a.z * bf_lo(w.y), a.w * bf_hi(w.y));
  xs4[2 * c + 1] = make_float4(b.x * bf_lo(w.z), b.y * bf_hi(w.z), b.z * bf_lo(w.w), b.w * bf_hi(w.w));
  const float total = block_sum(0.f + ss, scratch);  // its barriers also publish xs; 0 + ss: load_rmsnorm's sum
  return rsqrtf(total / (float)EARLY_K + eps);
}

// xs = x (EARLY_K floats through L2), both of a thread's loads before its stores (one round trip), then a barrier.
__device__ __forceinline__ void early_vector(const float* x, float* xs) {
  constexpr int SLOTS = EARLY_K / 4 / THREADS;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4 v[SLOTS];
#pragma unroll
  for (int i = 0; i < SLOTS; ++i) v[i] = __ldcg(x4 + threadIdx.x + i * THREADS);
#pragma unroll
  for (int i = 0; i < SLOTS; ++i) reinterpret_cast<float4*>(xs)[threadIdx.x + i * THREADS] = v[i];
  __syncthreads();
}

// Row 55: a q / k tile's RoPE angle for thread t < rows / 2 (early_qkv_store's c, sn), loaded at the tile's start
// (static tables): loaded at the store, its round trip was the tile's last step, on the phase's critical path.
__device__ __forceinline__ void early_rope(const Params& p, int kind, int part, int step, float& c, float& sn) {
  const int half = (int)p.head_dim / 2, h = (int)p.head_dim / (int)p.qkv_parts / 2, t = threadIdx.x;
  c = sn = 0.f;
  if (kind != HEAD_V && t < h) {
    const size_t i = (size_t)step * half + part * h + t;
    c = p.rope_cos[i];
    sn = p.rope_sin[i];
  }
}

// A copy of op_qkv's KV update (megakernel.cu): V rows into the cache, q / k rotated (RoPE) into q / the K cache.
__device__ __forceinline__ void early_qkv_store(const Params& p, const Smem& s, int layer, int kind, int head, int part,
                                                int step, float rstd, float rope_c, float rope_s) {
  const int D = (int)p.hidden, Dh = (int)p.head_dim, half = Dh / 2;
  const int rows = Dh / (int)p.qkv_parts, h = rows / 2;
  MK_REGION(ARGUS_REGION_DECODE_KV_UPDATE, coord(step, layer));
  const int t = threadIdx.x;
  if (kind == HEAD_V) {
    if (t < rows)
      p.v_cache[(((size_t)layer * p.n_kv_heads + head) * p.max_seq + step) * Dh + part * rows + t] =
          __float2bfloat16(s.out[t] * rstd);
    return;
  }
  if (t < h) {
    const int d = part * h + t;
#if MK_TAIL_LOADS  // this thread's RoPE angle, loaded at the tile's start (early_rope)
    const float c = rope_c, sn = rope_s;
#else
    (void)rope_c, (void)rope_s;
    const float c = p.rope_cos[(size_t)step * half + d], sn = p.rope_sin[(size_t)step * half + d];
#endif
    const float a = s.out[t] * rstd, b = s.out[h + t] * rstd;
    const float y0 = a * c - b * sn, y1 = b * c + a * sn;
    if (kind == HEAD_Q) {
      float* q = p.q + (size_t)layer * D + (size_t)head * Dh;
      q[d] = y0;
      q[d + half] = y1;
    } else {
      __nv_bfloat16* k = p.k_cache + (((size_t)layer * p.n_kv_heads + head) * p.max_seq + step) * Dh;
      k[d] = __float2bfloat16(y0);
      k[d + half] = __float2bfloat16(y1);
    }
  }
}

#if MK_TMA_INPUT
// Row 60: the early ops whose input comes by bulk copies (config.cuh MK_TMA_INPUT's bits).
__device__ __forceinline__ bool tma_input_op(int op) {
  return op == OP_O_PROJ ? (MK_TMA_INPUT & 2) != 0 : (op == OP_QKV_HEAD || op == OP_GATE_UP) && (MK_TMA_INPUT & 1);
}

// The tile's input vector: where tma_input_issue copies it from (computed before the wait, off the poll's path).
__device__ __forceinline__ const float* tma_input_source(const Params& p, int op, int layer) {
  const size_t off = (size_t)layer * EARLY_K;
  return op == OP_QKV_HEAD ? p.x + off : op == OP_GATE_UP ? p.x_mid + off : attn_out_of(p) + off;
}

// An early tile's copies (tma_input_op): x / x_mid with the norm's weights, or attn_out.
__device__ __forceinline__ void tma_early_issue(const Params& p, Smem& s, int op, int layer, const float* x) {
  const size_t off = (size_t)layer * EARLY_K;
  tma_input_issue(s, x, EARLY_K * 4,
                  op == OP_QKV_HEAD ? p.attn_norm + off : op == OP_GATE_UP ? p.ffn_norm + off : nullptr, EARLY_K * 2);
}

// early_rmsnorm with x and the norm weights already in shared memory (x in xs, g after it): the same products and sum
// order, so the same bits.
__device__ __forceinline__ float early_rmsnorm_landed(float* xs, float eps, float* scratch) {
  const int c = threadIdx.x;
  float4* xs4 = reinterpret_cast<float4*>(xs);
  const float4 a = xs4[2 * c], b = xs4[2 * c + 1];
  const uint4 w = reinterpret_cast<const uint4*>(xs + EARLY_K)[c];
  const float ss = a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
  xs4[2 * c] = make_float4(a.x * bf_lo(w.x), a.y * bf_hi(w.x), a.z * bf_lo(w.y), a.w * bf_hi(w.y));
  xs4[2 * c + 1] = make_float4(b.x * bf_lo(w.z), b.y * bf_hi(w.z), b.z * bf_lo(w.w), b.w * bf_hi(w.w));
  const float total = block_sum(0.f + ss, scratch);
  return rsqrtf(total / (float)EARLY_K + eps);
}
#endif

// Thread 0 waits for the tile's dependency (the worker's wait block, with the wait loop inlined); then every thread:
// false if the kernel must stop. Sets s.ok and s.next_ticket as the worker does; ends the core_loop region.
// tma_src (row 60, MK_TMA_INPUT): where thread 0 bulk-copies the tile's input from once it saw the counter; null: no
// copy (the tile loads its input itself).
__device__ __forceinline__ bool early_wait(const Params& p, Smem& s, unsigned t, int step, int index, int op, int layer,
                                           const float* tma_src = nullptr) {
  if (threadIdx.x == 0) {
    bool ok = true;
    s.next_ticket = t + (gridDim.x - 1);
    const int wait = s.ins[W_WAIT];
    if (wait != NO_COUNTER) {
      const int need = (step + 1 + s.ins[W_WAIT_DELTA]) * s.ins[W_WAIT_COUNT];
      if (need > 0) {
        const WaitSite site{(int)t, step, index, op, layer, wait};
        MK_DETAIL_LANE(ARGUS_REGION_DECODE_CORE_LOOP_WAIT, coord(step, layer));
        ok = wait_counter_impl<false>(p, p.counters + wait, (unsigned)need, site, (unsigned long long)p.timeout_ns,
                                      nullptr);
      }
    }
#if MK_TMA_INPUT
    if (ok && tma_src) tma_early_issue(p, s, op, layer, tma_src);  // row 60: before the barrier
#else
    (void)tma_src;
#endif
    s.ok = ok;
  }
  __syncthreads();
  ARGUS_END_AT(ARGUS_REGION_DECODE_CORE_LOOP, coord(step, layer));
  return s.ok;
}

#if MK_EARLY_REGS & 8
// load_vector (gemv.cuh, MK_VEC_BATCH) inlined: xs = x (n floats), a thread's first VEC_SLOTS loads before its stores.
// Not shared with early_vector (O-proj's) or load_vector: either sharing changed a measured default's SASS (ptxas
// 13.0, 2026-12-03: the early default's cubin 438ca531, the plain build's aea2b8b7).
__device__ __forceinline__ void early_vector_n(const float* x, int n, float* xs) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* xs4 = reinterpret_cast<float4*>(xs);
  const int n4 = n >> 2;
  float4 v[VEC_SLOTS];
#pragma unroll
  for (int i = 0; i < VEC_SLOTS; ++i) {
    const int c = threadIdx.x + i * THREADS;
    v[i] = c < n4 ? __ldcg(x4 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int i = 0; i < VEC_SLOTS; ++i) {
    const int c = threadIdx.x + i * THREADS;
    if (c < n4) xs4[c] = v[i];
  }
#pragma unroll 1
  for (int c = threadIdx.x + VEC_SLOTS * THREADS; c < n4; c += THREADS) xs4[c] = __ldcg(x4 + c);
  __syncthreads();
}

// Row 48c (bit 8): a Down tile, one row per warp as gemv_halves streams it (its two K-halves side by side): the
// first GEMV_UNROLL trips' loads (2 x GEMV_UNROLL per lane, 64 registers) before the wait, then h into xs, then
// those trips' FMAs and the rest of the row's trips, in gemv_halves' order (bit for bit op_down), then the residual.
__device__ __noinline__ bool early_down_tile(const Params& p, Smem& s, unsigned t, int step, int index, int layer) {
  const int D = (int)p.hidden, F = (int)p.ffn, half = F >> 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  ARGUS_BEGIN_AT(ARGUS_REGION_DECODE_CORE_LOOP, coord(step, layer));
  const int row0 = s.ins[W_A0];
  const char* lo = reinterpret_cast<const char*>(p.wd + ((size_t)layer * D + row0 + warp) * F);
  const char* hi = lo + (size_t)half * 16;
  uint4 w0[GEMV_UNROLL], w1[GEMV_UNROLL];
#pragma unroll
  for (int u = 0; u < GEMV_UNROLL; ++u) {
    const size_t c = (size_t)(lane + 32 * u) * 16;
    w0[u] = ld_weights(lo + c);
    w1[u] = ld_weights(hi + c);
  }
  if (!early_wait(p, s, t, step, index, OP_DOWN, layer)) return false;
#if MK_TAIL_LOADS
  float x_mid_r = 0.f;
#endif
  {
    MK_REGION(ARGUS_REGION_DECODE_GEMM, coord(step, layer));
    MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_GEMM_DOWN_VECTOR, coord(step, layer));
    early_vector_n(p.h + (size_t)layer * F, F, s.xs);
    MK_DETAIL_END(ARGUS_REGION_DECODE_GEMM_DOWN_VECTOR, coord(step, layer));
#if MK_TAIL_LOADS  // row 55, as op_down: the residual's input beside the rest of the stream
    if (threadIdx.x < NWARPS) x_mid_r = __ldcg(p.x_mid + (size_t)layer * D + row0 + threadIdx.x);
#endif
    MK_DETAIL_BEGIN(ARGUS_REGION_DECODE_GEMM_DOWN_WEIGHTS, coord(step, layer));
    const float4* x4 = reinterpret_cast<const float4*>(s.xs);
    float acc0 = 0.f, acc1 = 0.f;
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; ++u) {
      const int c = lane + 32 * u;
      acc0 += dot8(w0[u], x4[2 * c], x4[2 * c + 1]);
      acc1 += dot8(w1[u], x4[2 * (half + c)], x4[2 * (half + c) + 1]);
    }
#pragma unroll 4
    for (int c = lane + 32 * GEMV_UNROLL; c < half; c += 32) {  // the row's other trips, as gemv_halves
      const uint4 a = ld_weights(lo + (size_t)c * 16), b = ld_weights(hi + (size_t)c * 16);
      acc0 += dot8(a, x4[2 * c], x4[2 * c + 1]);
      acc1 += dot8(b, x4[2 * (half + c)], x4[2 * (half + c) + 1]);
    }
    const float sum = warp_sum(acc0 + acc1);
    if (lane == 0) s.out[warp] = sum;
    __syncthreads();
    MK_DETAIL_END(ARGUS_REGION_DECODE_GEMM_DOWN_WEIGHTS, coord(step, layer));
  }
#if MK_TAIL_LOADS
  if (threadIdx.x < NWARPS) p.x[(size_t)(layer + 1) * D + row0 + threadIdx.x] = x_mid_r + s.out[threadIdx.x];
#else
  for (int r = threadIdx.x; r < NWARPS; r += THREADS)  // op_down's residual: x[L + 1] = x_mid + h . Wd
    p.x[(size_t)(layer + 1) * D + row0 + r] = __ldcg(p.x_mid + (size_t)layer * D + row0 + r) + s.out[r];
#endif
  return true;
}
#endif

// The whole tile: loads, thread 0's wait (false: the kernel must stop, as the worker's wait), input, multiply,
// outputs. Sets s.ok and s.next_ticket as the worker's wait block does; the worker signals afterwards as for any op.
__device__ __noinline__ bool early_tile(const Params& p, Smem& s, unsigned t, int step, int index, int op, int layer) {
#if MK_EARLY_REGS & 8
  if (op == OP_DOWN) return early_down_tile(p, s, t, step, index, layer);
#endif
  const int D = (int)p.hidden;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  ARGUS_BEGIN_AT(ARGUS_REGION_DECODE_CORE_LOOP, coord(step, layer));
  // the tile's first row (tile_weights' arithmetic for these two ops, with the row count known: no 64-bit divide)
  const size_t Dh = p.head_dim, KV = p.n_kv_heads * p.head_dim, row_bytes = (size_t)EARLY_K * 2;
  const int a0 = s.ins[W_A0];
  const __nv_bfloat16* first =
      op == OP_QKV_HEAD
          ? p.wqkv + ((size_t)layer * (D + 2 * KV) + (a0 == HEAD_Q ? 0 : a0 == HEAD_K ? D : D + KV) +
                      (size_t)s.ins[W_A1] * Dh + (size_t)s.ins[W_A2] * EARLY_ROWS) * D
      : op == OP_O_PROJ ? p.wo + ((size_t)layer * D + a0) * D
                        : p.wgu + ((size_t)layer * 2 * p.ffn + 2 * (size_t)a0) * D;
  const int rows = op == OP_GATE_UP ? 2 * s.ins[W_A1] : EARLY_ROWS;  // gate/up: 16 early, the rest after
  float rope_c = 0.f, rope_s = 0.f;
#if MK_TAIL_LOADS
  if (op == OP_QKV_HEAD) early_rope(p, a0, s.ins[W_A2], step, rope_c, rope_s);
#endif
  const char* w = reinterpret_cast<const char*>(first);
  // gemv_rows<false>'s load order: chunk by chunk, the warp's rows side by side; unconditional (a load under a
  // branch used after a barrier was stored to the stack: row 14's lesson 1)
  uint4 wr[GEMV_UNROLL][GEMV_ROWS];
#pragma unroll
  for (int u = 0; u < GEMV_UNROLL; ++u)
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i)
      wr[u][i] = ld_weights(w + (size_t)(warp * GEMV_ROWS + i) * row_bytes + (size_t)(lane + 32 * u) * 16);
#if MK_TMA_INPUT
  const float* tma_src = tma_input_op(op) ? tma_input_source(p, op, layer) : nullptr;
#else
  const float* tma_src = nullptr;
#endif
  if (!early_wait(p, s, t, step, index, op, layer, tma_src)) return false;
  float rstd = 1.f;
#if MK_TAIL_LOADS
  float x_r = 0.f;
#endif
#if MK_TMA_INPUT & 1
  if (op == OP_QKV_HEAD || op == OP_GATE_UP) {  // row 60: x and the norm weights landed by bulk copies
    MK_REGION(ARGUS_REGION_DECODE_NORM, coord(step, layer));
    if (!tma_input_landed(p, s)) return false;
    rstd = early_rmsnorm_landed(s.xs, (float)p.eps, s.scratch);
  } else
#endif
  if (op == OP_QKV_HEAD) {
    MK_REGION(ARGUS_REGION_DECODE_NORM, coord(step, layer));
    rstd = early_rmsnorm(p.x + (size_t)layer * D, p.attn_norm + (size_t)layer * D, (float)p.eps, s.xs, s.scratch);
  } else if (op == OP_GATE_UP) {
    MK_REGION(ARGUS_REGION_DECODE_NORM, coord(step, layer));
    rstd = early_rmsnorm(p.x_mid + (size_t)layer * D, p.ffn_norm + (size_t)layer * D, (float)p.eps, s.xs, s.scratch);
  } else {
    MK_REGION(ARGUS_REGION_DECODE_ATTENTION, coord(step, layer));
    // row 55: the residual's input x (final since the wait) in the same round trip as the attention vector; loaded
    // at the residual, its trip was the tile's last step. The tile's rows (16) <= THREADS.
#if MK_TAIL_LOADS
    if (threadIdx.x < EARLY_ROWS) x_r = __ldcg(p.x + (size_t)layer * D + a0 + threadIdx.x);
#endif
#if MK_TMA_INPUT & 2
    if (!tma_input_landed(p, s)) return false;  // row 60: attn_out landed by a bulk copy
#else
    early_vector(attn_out_of(p) + (size_t)layer * D, s.xs);
#endif
  }
  {
    MK_REGION(ARGUS_REGION_DECODE_GEMM, coord(step, layer));
    const float4* x4 = reinterpret_cast<const float4*>(s.xs);
    float acc[GEMV_ROWS];
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) acc[i] = 0.f;
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; ++u) {
      const int c = lane + 32 * u;
      const float4 a = x4[2 * c], b = x4[2 * c + 1];
#pragma unroll
      for (int i = 0; i < GEMV_ROWS; ++i) acc[i] += dot8(wr[u][i], a, b);
    }
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; ++i) {
      const float sum = warp_sum(acc[i]);
      if (lane == 0) s.out[warp * GEMV_ROWS + i] = sum;
    }
    if (rows > EARLY_ROWS)  // gate/up's other rows: gemv_rows gives each row its own sum, so the split is exact
      gemv_tile(reinterpret_cast<const __nv_bfloat16*>(w) + (size_t)EARLY_ROWS * EARLY_K, EARLY_K, rows - EARLY_ROWS,
                s.xs, s.out + EARLY_ROWS);
    __syncthreads();
  }
  if (op == OP_QKV_HEAD) {
    early_qkv_store(p, s, layer, s.ins[W_A0], s.ins[W_A1], s.ins[W_A2], step, rstd, rope_c, rope_s);
  } else if (op == OP_GATE_UP) {
    const int f0 = s.ins[W_A0], nf = s.ins[W_A1];
    for (int f = threadIdx.x; f < nf; f += THREADS) {  // op_gate_up's SiLU(gate) * up
      const float g = s.out[f] * rstd, u = s.out[nf + f] * rstd;
      p.h[(size_t)layer * p.ffn + f0 + f] = g / (1.f + expf(-g)) * u;
    }
  } else {
#if MK_TAIL_LOADS
    if (threadIdx.x < EARLY_ROWS)  // op_oproj's residual: x_mid = x + attn . Wo (x_r: x loaded after the wait)
      p.x_mid[(size_t)layer * D + a0 + threadIdx.x] = x_r + s.out[threadIdx.x];
#else
    const int row0 = s.ins[W_A0], rows = s.ins[W_A1];
    for (int r = threadIdx.x; r < rows; r += THREADS)  // op_oproj's residual: x_mid = x + attn . Wo
      p.x_mid[(size_t)layer * D + row0 + r] = __ldcg(p.x + (size_t)layer * D + row0 + r) + s.out[r];
#endif
  }
  return true;
}
#endif
