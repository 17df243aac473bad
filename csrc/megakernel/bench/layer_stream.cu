// Layer-stream microbenchmark: what does a loader warp that streams weights *across* dependency waits buy
// over the megakernel's register-streamed workers, on TinyLlama-1.1B's phase chain (benchmarks/layer_stream.py)?
//
// One persistent launch runs `layers` layers of five dependent phases, fresh bf16 weights per layer (88.1 MB):
//   QKV  GEMV 2560 x 2048, 160 tiles of 16 rows    ATTN 32 tiles, no weights: a 64-float load of QKV's output,
//   O    GEMV 2048 x 2048, 128 tiles of 16 rows         a %globaltimer spin of attn_ns, 64 floats written
//   GU   GEMV 11264 x 2048, 256 tiles of 44 rows   DOWN GEMV 2048 x 5632, 256 tiles of 8 rows
// Tile t of a phase belongs to worker (CTA) t % gridDim.x. A tile waits until the previous phase's counter of
// its layer (QKV: the previous layer's DOWN) reached that phase's tile count (thread 0, ld.acquire.gpu), reads
// its input vector (fixed host vectors, __ldcg, so outputs are checkable), writes its rows, and thread 0 adds 1
// to its own counter (red.release.gpu) after a barrier. `wait` = 0 skips every dependency wait (the streaming
// control). Thread 0 stamps %globaltimer when a tile is done: the host takes the latest stamp per (layer,
// phase) over the workers as that phase's end. Every wait has a %globaltimer deadline; a missed one sets
// err[0..3] = {code, layer, phase, block} and every CTA leaves (each wait also gives up once err[0] is set), so a
// bug cannot hang the GPU.
//
//   layer_regs: the megakernel's worker (256 threads, 2 CTAs per SM, <= 128 registers): warp 0 L2-prefetches
//               the tile's first pf_head bytes, thread 0 waits, load_vector, then gemv_tile (gemv_rows<false>;
//               Down: gemv_halves, the megakernel's default MK_DOWN_PIECES=1) with loads straight from global.
//               layer_regs_stamps: the same with each tile's hand-off parts stamped (benchmarks: regs+stamps).
//   layer_ring: one CTA per SM, 8 consumer warps + 1 loader warp. Lane 0 of the loader walks the CTA's whole
//               tile list (all layers) and bulk-copies (cp.async.bulk) each tile's contiguous weight bytes, whole
//               rows per page, into a ring of `pages` x `page_bytes` of dynamic shared memory, waiting only for
//               a free page, never for a dependency. Consumers take the tiles in the same order, each thread a
//               16-byte chunk of every row (layer_ring16: 16 consumer warps in 2 groups taking steps in turn).
//   layer_rows: the same loader, 16 consumer warps owning whole rows; layer_mma: layer_rows with the K-2048
//               phases on the tensor cores. Both described at their code below (session 19, benchmarks: rows, mma).
#include <cuda_bf16.h>
#include <stdint.h>

#include "gemv.cuh"   // mk::gemv_rows, gemv_halves, load_vector, prefetch_tile, dot8, warp_sum
#include "mbarrier.cuh"  // bar_init, bar_arrive, bar_try (and stage.cuh: mk::smem_addr)

namespace {

constexpr int NPHASE = 5;
enum { QKV = 0, ATTN = 1, OPROJ = 2, GU = 3, DOWN = 4 };
// Per phase (benchmarks/layer_stream.py PHASES mirrors these; tests/test_layer_stream.py checks they agree).
// Functions, not arrays: a constexpr array cannot be indexed at run time in device code.
__host__ __device__ constexpr int pick(int phase, int qkv, int attn, int o, int gu, int down) {
  return phase == QKV ? qkv : phase == ATTN ? attn : phase == OPROJ ? o : phase == GU ? gu : down;
}
__host__ __device__ constexpr int ROWS(int p) { return pick(p, 2560, 2048, 2048, 11264, 2048); }  // outputs per layer
__host__ __device__ constexpr int KDIM(int p) { return pick(p, 2048, 0, 2048, 2048, 5632); }
__host__ __device__ constexpr int TILE_ROWS(int p) { return pick(p, 16, 64, 16, 44, 8); }  // ATTN: 64 floats
__host__ __device__ constexpr int TILES(int p) { return pick(p, 160, 32, 128, 256, 256); }
__host__ __device__ constexpr int OUT_OFF(int p) { return pick(p, 0, 2560, 4608, 6656, 17920); }  // in a layer's outputs
constexpr int OUT_PER_LAYER = 19968;
constexpr int MAX_TILE_ROWS = 44;
constexpr int CONSUMERS = 8;        // consumer warps per group of layer_ring (layer_ring16: 2 groups); then the loader
constexpr int CTHREADS = CONSUMERS * 32;  // threads of one consumer group
static_assert(OUT_OFF(4) + ROWS(4) == OUT_PER_LAYER, "output layout");
static_assert(ROWS(ATTN) == TILES(ATTN) * TILE_ROWS(ATTN) && ROWS(ATTN) <= ROWS(QKV), "ATTN copies QKV outputs");
static_assert(TILES(QKV) * TILE_ROWS(QKV) == ROWS(QKV) && TILES(OPROJ) * TILE_ROWS(OPROJ) == ROWS(OPROJ) &&
              TILES(GU) * TILE_ROWS(GU) == ROWS(GU) && TILES(DOWN) * TILE_ROWS(DOWN) == ROWS(DOWN), "whole tiles");
static_assert(KDIM(QKV) % 256 == 0 && KDIM(DOWN) % 256 == 0, "a warp's 32 chunks lie in one row (ring consumers)");

enum { ERR_DEP = 1, ERR_FULL = 2, ERR_EMPTY = 3 };  // err[0]: which wait missed its deadline

struct Args {
  const __nv_bfloat16 *wqkv, *wo, *wgu, *wd;  // [layers, ROWS, K] per weight phase
  const float* xd;                 // input of QKV, O and GU (2048 floats)
  const float* xf;                 // input of DOWN (5632 floats)
  float* out;                      // [layers, OUT_PER_LAYER]
  unsigned* counters;              // [layers, NPHASE], zeroed by the host per launch
  int* err;                        // 4 words
  unsigned long long* worker_ns;   // [workers, 2]: start, end
  unsigned long long* phase_ns;    // [workers, layers, NPHASE]: end of the worker's last tile of it (0: none)
  unsigned long long* stamps;      // layer_regs_stamps (else unused): [workers, layers, NPHASE, 2] then [workers] (SM),
                                   // per worker, layer and phase its last tile's dependency
                                   // seen and activations loaded (%globaltimer), for the hand-off's parts
  int layers, wait, pf_head, pages, page_bytes;
  unsigned long long attn_ns, timeout_ns;
};

using mk::ld_acquire;
using mk::red_release_add;
using mk::globaltimer_ns;

__device__ __forceinline__ bool failed(const int* err) { return *(volatile const int*)err != 0; }

__device__ void report(int* err, int code, int layer, int phase) {
  if (atomicCAS(err, 0, -1) == 0) {  // the first failure reports; -1 holds the slot while the words are written
    err[1] = layer;
    err[2] = phase;
    err[3] = blockIdx.x;
    __threadfence();
    atomicExch(err, code);
  }
}

// Thread 0: tile (layer, phase) may start once the counter of the phase before it reached its tile count.
// Returns false past the deadline or once another CTA failed.
__device__ bool wait_dependency(const Args& a, int layer, int phase) {
  if (!a.wait || (layer == 0 && phase == QKV)) return true;
  const int prev = phase == QKV ? DOWN : phase - 1;
  const unsigned* ctr = a.counters + (size_t)(phase == QKV ? layer - 1 : layer) * NPHASE + prev;
  const unsigned need = (unsigned)TILES(prev);
  if (ld_acquire(ctr) >= need) return true;
  const unsigned long long start = globaltimer_ns();
  for (unsigned spins = 1;; ++spins) {
    if (ld_acquire(ctr) >= need) return true;
    if ((spins & 63u) == 0) {
      if (failed(a.err)) return false;
      if (globaltimer_ns() - start > a.timeout_ns) {
        report(a.err, ERR_DEP, layer, phase);
        return false;
      }
    }
  }
}

using bench::bar_arrive;
using bench::bar_init;
using bench::bar_try;

// Wait for phase `parity` of an mbarrier; false past the deadline or once any CTA failed (the caller reports).
// err is read only after 100 us of waiting: a page normally lands within microseconds, and 1056 warps polling
// one global word while they wait for pages would be traffic the register mode does not have.
// `give_up_on_error` = false: the loader's final drain, which must see its copies land whatever happened.
__device__ bool bar_wait(unsigned long long* bar, unsigned parity, const Args& a, bool give_up_on_error = true) {
  if (bar_try(bar, parity)) return true;
  const unsigned long long start = globaltimer_ns();
  for (unsigned spins = 1;; ++spins) {
    if (bar_try(bar, parity)) return true;
    if ((spins & 15u) == 0) {
      const unsigned long long waited = globaltimer_ns() - start;
      if (waited > a.timeout_ns || (give_up_on_error && waited > 100000ull && failed(a.err))) return false;
    }
  }
}

// Consumer-only barrier (named barrier 1, the NT consumer threads) that also ORs a flag over them.
template <int NT>
__device__ __forceinline__ bool consumers_any(bool v) {
  unsigned r;
  asm volatile("{ .reg .pred p, q; setp.ne.u32 p, %1, 0; bar.red.or.pred q, 1, %2, p; selp.u32 %0, 1, 0, q; }"
               : "=r"(r) : "r"((unsigned)v), "n"(NT) : "memory");
  return r != 0;
}

// Tiles of `phase` this CTA runs (tile t to worker t % gridDim.x).
__device__ __forceinline__ int cta_tiles(int phase) {
  return (TILES(phase) - 1 - (int)blockIdx.x) / (int)gridDim.x + 1;
}

// One thread, after a barrier that orders the tiles' output writes before it: `tiles` more of (layer, phase) are
// done (the counter the next phase waits on), and the worker's end stamp of it.
__device__ __forceinline__ void signal_tiles(const Args& a, int layer, int phase, unsigned tiles) {
  red_release_add(a.counters + (size_t)layer * NPHASE + phase, tiles);
  a.phase_ns[((size_t)blockIdx.x * a.layers + layer) * NPHASE + phase] = globaltimer_ns();
}

__device__ __forceinline__ const __nv_bfloat16* tile_weights(const Args& a, int layer, int phase, int tile) {
  // a select, not an indexed array: that would put Args in local memory
  const __nv_bfloat16* w = phase == QKV ? a.wqkv : phase == OPROJ ? a.wo : phase == GU ? a.wgu : a.wd;
  return w + ((size_t)layer * ROWS(phase) + (size_t)tile * TILE_ROWS(phase)) * KDIM(phase);
}

__device__ __forceinline__ float* tile_out(const Args& a, int layer, int phase, int tile) {
  return a.out + (size_t)layer * OUT_PER_LAYER + OUT_OFF(phase) + tile * TILE_ROWS(phase);
}

// ATTN's body (threads 0..63 of the tile's CTA after its wait): copy QKV's outputs, spin attn_ns on thread 0.
// Ends with `sync` (the CTA's or the consumers' barrier), so the copy is done before the caller signals.
template <typename Sync>
__device__ __forceinline__ void attn_tile(const Args& a, int layer, int tile, Sync sync) {
  const int i = threadIdx.x;
  float v = 0.f;
  if (i < TILE_ROWS(ATTN)) v = __ldcg(a.out + (size_t)layer * OUT_PER_LAYER + OUT_OFF(QKV) + tile * TILE_ROWS(ATTN) + i);
  if (i == 0 && a.attn_ns) {
    const unsigned long long t0 = globaltimer_ns();
    while (globaltimer_ns() - t0 < a.attn_ns) {}
  }
  sync();  // the spin ends before anything is written
  if (i < TILE_ROWS(ATTN)) tile_out(a, layer, ATTN, tile)[i] = v;
  sync();
}

// ---------------------------------------------------------------------------------------------------------------
// layer_regs: the megakernel's worker loop (megakernel.cu: worker, op_*), static tiles.
// kStamps (layer_regs_stamps): thread 0 stamps each tile's hand-off parts into a.stamps, and the worker's SM after
// them (is a phase's slowest tile on an SM running two tiles?). A template, not a null test in layer_regs: the test
// alone made ptxas spill there (STACK 8 at 128 registers) and cost ~0.6 us per layer.
template <bool kStamps>
__device__ void run_regs(const Args& a) {
  __shared__ __align__(16) float xs[mk::SMEM_FLOATS];
  __shared__ int bad;
  const int worker = blockIdx.x, workers = gridDim.x;
  if (kStamps && threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    a.stamps[(size_t)workers * a.layers * NPHASE * 2 + worker] = sm;
  }
  for (int layer = 0; layer < a.layers; ++layer) {
    for (int phase = 0; phase < NPHASE; ++phase) {
      for (int tile = worker; tile < TILES(phase); tile += workers) {
        const int K = KDIM(phase);
        const __nv_bfloat16* W = phase == ATTN ? nullptr : tile_weights(a, layer, phase, tile);
        // The megakernel's pre-wait L2 prefetch of the tile's head (MK_PF_OWN_CAP, 32 KiB by default).
        if (W && a.pf_head > 0 && threadIdx.x < 32)
          mk::prefetch_tile(reinterpret_cast<const char*>(W), min((unsigned)a.pf_head, (unsigned)(TILE_ROWS(phase) * K * 2)));
        if (threadIdx.x == 0) bad = !wait_dependency(a, layer, phase);
        unsigned long long* stamp = kStamps ? a.stamps + (((size_t)worker * a.layers + layer) * NPHASE + phase) * 2
                                            : nullptr;
        if (kStamps && threadIdx.x == 0) stamp[0] = stamp[1] = globaltimer_ns();
        __syncthreads();
        if (bad) return;
        if (phase == ATTN) {
          attn_tile(a, layer, tile, [] { __syncthreads(); });
        } else {
          mk::load_vector(phase == DOWN ? a.xf : a.xd, K, xs);  // ends with a barrier
          if (kStamps && threadIdx.x == 0) stamp[1] = globaltimer_ns();
          float* out = tile_out(a, layer, phase, tile);
          if (phase == DOWN) mk::gemv_halves<mk::NWARPS>(W, K, TILE_ROWS(phase), xs, out);
          else mk::gemv_tile(W, K, TILE_ROWS(phase), xs, out);  // gemv_rows<false>, __noinline__ as there
          __syncthreads();  // every warp's rows are written (and xs is free again) ...
        }
        if (threadIdx.x == 0) signal_tiles(a, layer, phase, 1u);  // ... before the counter says so
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// layer_ring. Pages hold whole rows: rows_per_page = min(tile rows, page_bytes / row bytes) (K 2048 at 16 KiB:
// 4 rows; K 5632: 1 row, 11 KiB of the page). Pages are numbered per CTA in issue order (seq): slot seq % pages,
// phase (seq / pages) & 1 of that slot's full / empty mbarriers. Loader and consumers step a RingPos instead of
// dividing: ncu (session 19) found the consumers' per-step divisions and modulos were ~75 of a step's 340
// instructions, and the consumers, at 2.25 warps per scheduler, bound by dependent-instruction latency.
struct RingPos {
  // parity is round & 1, kept as its own field: deriving it cost layer_ring 4 registers (nvcc 13.0)
  unsigned slot = 0, parity = 0, round = 0;
  __device__ __forceinline__ void advance(int pages) {
    if (++slot == (unsigned)pages) {
      slot = 0;
      parity ^= 1u;
      ++round;
    }
  }
};

// A warp that waits only for its own pages (layer_rows, layer_mma; ring16's two groups) may come to a slot rounds after
// its last visit, and a parity wait cannot tell round r from r - 2 (a 2-page GPU test deadlocked so, session 19).
// The loader writes each slot's round into `rounds` before its copy; once it reads r there, round r - 1 landed and
// was consumed, and round r + 1 cannot be issued before this warp (an owner) arrives: the parity wait is exact.
__device__ bool page_wait(const unsigned* rounds, unsigned long long* full, const RingPos& pos, const Args& a) {
  const volatile unsigned* r = rounds + pos.slot;
  if (*r < pos.round) {
    const unsigned long long start = globaltimer_ns();
    for (unsigned spins = 1; *r < pos.round; ++spins)
      if ((spins & 15u) == 0 && (globaltimer_ns() - start > a.timeout_ns || failed(a.err))) return false;
  }
  return bar_wait(full + pos.slot, pos.parity, a);
}

__device__ __forceinline__ int rows_per_page(int phase, int page_bytes) {
  return min(TILE_ROWS(phase), page_bytes / (KDIM(phase) * 2));
}

// Lane 0 of the loader warp: every weight page of this CTA, all layers, in the consumers' order.
// `rounds`: each slot's round, written before its copy (page_wait).
__device__ void ring_loader(const Args& a, unsigned char* ring, unsigned long long* full, unsigned long long* empty,
                            unsigned* rounds) {
  const int worker = blockIdx.x, workers = gridDim.x;
  unsigned seq = 0;
  RingPos pos;
  bool ok = true;
  for (int layer = 0; layer < a.layers && ok; ++layer) {
    for (int phase = 0; phase < NPHASE && ok; ++phase) {
      if (phase == ATTN) continue;
      const unsigned row_bytes = KDIM(phase) * 2;
      const int rpp = rows_per_page(phase, a.page_bytes);
      for (int tile = worker; tile < TILES(phase) && ok; tile += workers) {
        const char* src = reinterpret_cast<const char*>(tile_weights(a, layer, phase, tile));
        for (int r0 = 0; r0 < TILE_ROWS(phase); r0 += rpp, ++seq, pos.advance(a.pages)) {
          const unsigned slot = pos.slot;
          if (pos.round > 0 && !bar_wait(&empty[slot], pos.parity ^ 1u, a)) {  // the consumers freed it
            report(a.err, ERR_EMPTY, layer, phase);  // a no-op when another wait failed first
            ok = false;
            break;
          }
          const unsigned bytes = (unsigned)min(rpp, TILE_ROWS(phase) - r0) * row_bytes;
          *(volatile unsigned*)(rounds + slot) = pos.round;
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                       ::"r"(mk::smem_addr(&full[slot])), "r"(bytes) : "memory");
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                       ::"r"(mk::smem_addr(ring + (size_t)slot * a.page_bytes)), "l"(src + (size_t)r0 * row_bytes),
                         "r"(bytes), "r"(mk::smem_addr(&full[slot])) : "memory");
        }
      }
    }
  }
  // No copy may outlive the CTA: the last round of each slot has landed (normally the consumers saw it already).
  for (unsigned s = seq > (unsigned)a.pages ? seq - a.pages : 0; s < seq; ++s)
    bar_wait(&full[s % a.pages], (s / a.pages) & 1u, a, false);
}

// R rows, each row's chunks at rowp[r]: this thread's chunks times its activations, then the rows' warp sums side by
// side (their shuffle chains overlap instead of following each other), lane 0 writing parts[row][warp]. Per row the
// same sums in the same order whatever R is.
constexpr int ROWS_PER_STEP = 4;
template <int R, int NC, int C>
__device__ __forceinline__ void step_rows(const uint4* const* rowp, const float4 (&xa)[NC], const float4 (&xb)[NC],
                                          float* parts) {
  const int t = threadIdx.x % CTHREADS, warp = t >> 5, lane = t & 31;  // within the thread's consumer group
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    acc[r] = 0.f;
#pragma unroll
    for (int j = 0; j < NC; ++j) {
      const int c = t + j * CTHREADS;
      if (c < C) acc[r] += mk::dot8(rowp[r][c], xa[j], xb[j]);  // warp-uniform condition (C % 32 == 0)
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) parts[r * CONSUMERS + warp] = acc[r];
  }
}

// The consumers' GEMV of one tile from the ring. Thread t owns chunks c = t, t + 256, ... (< K / 8) of every row,
// with their 8 activations in registers (NC float4 pairs: 1 for K 2048, 3 for 5632, read once per tile), so the
// pages are the only shared-memory traffic. A warp's 32 chunks lie in one row: one warp sum per (row, warp) into
// parts[row][warp], summed in a fixed order at the end. A step takes ROWS_PER_STEP rows at once, from as many pages
// as hold them (K 2048 at 16 KiB: one page of 4 rows; K 5632: four pages of one row), so a page's rows are not
// reduced one after another (the ring mode's consumer bound, session 17: ~2 TB/s); a tile's rows past the last whole
// step, or a page size whose rows per page do not divide a step, take the pages one at a time. Returns false when a
// page missed its deadline. With G consumer groups (layer_ring16: G = 2) the steps (or pages) go to the groups in
// turn, each group's 8 warps doing what the one group of layer_ring does; each page is read by one group.
template <int K, int G>
__device__ bool ring_gemv(const Args& a, int layer, int phase, int tile, const unsigned char* ring,
                          unsigned long long* full, unsigned long long* empty, const unsigned* rounds, RingPos& pos,
                          float* parts) {
  constexpr int C = K / 8, NC = (C + CTHREADS - 1) / CTHREADS;
  const int t = threadIdx.x % CTHREADS, group = threadIdx.x / CTHREADS, lane = t & 31;
  const float4* x4 = reinterpret_cast<const float4*>(phase == DOWN ? a.xf : a.xd);
  float4 xa[NC], xb[NC];
#pragma unroll
  for (int j = 0; j < NC; ++j) {
    const int c = t + j * CTHREADS;
    xa[j] = c < C ? __ldcg(x4 + 2 * c) : make_float4(0.f, 0.f, 0.f, 0.f);
    xb[j] = c < C ? __ldcg(x4 + 2 * c + 1) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const int rows = TILE_ROWS(phase), rpp = rows_per_page(phase, a.page_bytes);
  const bool stepped = ROWS_PER_STEP % rpp == 0 && a.pages * rpp >= ROWS_PER_STEP;  // the step's pages fit the ring
  const int rpp_shift = __ffs(rpp) - 1;  // stepped: rpp is 1, 2 or 4
  bool ok = true;
  for (int r0 = 0, unit = 0; r0 < rows && ok; ++unit) {
    // A whole step, or one page (a tail of 4 rows on an 8-row page is a page, not a step: session 19's bug).
    const bool step = stepped && rows - r0 >= ROWS_PER_STEP;
    const int n = step ? ROWS_PER_STEP : min(rpp, rows - r0);
    const int pages = step ? ROWS_PER_STEP / rpp : 1;  // warp-uniform
    if (unit % G != group) {  // another group's step (G is 1 or 2: no division)
      for (int b = 0; b < pages; ++b) pos.advance(a.pages);
      r0 += n;
      continue;
    }
    const uint4* rowp[ROWS_PER_STEP];
    RingPos at = pos;
    for (int b = 0; b < pages; ++b, at.advance(a.pages)) {
      // page_wait, not a bare parity wait: with G = 2 a group skips the other's pages and could take round r - 2 of a
      // slot for round r (ring16 with 3 pages returned wrong sums so at 04:34, session 19)
      ok = __all_sync(0xffffffffu, page_wait(rounds, full, at, a));  // warp-uniform from here
      if (!ok) break;
      const uint4* page = reinterpret_cast<const uint4*>(ring + (size_t)at.slot * a.page_bytes);
#pragma unroll
      for (int r = 0; r < ROWS_PER_STEP; ++r)
        if ((r >> rpp_shift) == b) rowp[r] = page + (r & (rpp - 1)) * C;
    }
    if (!ok) {  // report now: the other warps' waits give up once err is set
      if (lane == 0) report(a.err, ERR_FULL, layer, phase);
      break;
    }
    if (step) {
      step_rows<ROWS_PER_STEP, NC, C>(rowp, xa, xb, parts + r0 * CONSUMERS);
    } else {  // one page, its rows one at a time
      for (int r = 0; r < n; ++r) {
        const uint4* row = rowp[0] + r * C;
        step_rows<1, NC, C>(&row, xa, xb, parts + (r0 + r) * CONSUMERS);
      }
    }
    __syncwarp();
    for (int b = 0; b < pages; ++b, pos.advance(a.pages))
      if (lane == 0) bar_arrive(&empty[pos.slot]);  // this warp is done with the slot
    r0 += n;
  }
  if (consumers_any<G * CTHREADS>(!ok)) return false;
  if (threadIdx.x < rows) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < CONSUMERS; ++w) s += parts[threadIdx.x * CONSUMERS + w];
    tile_out(a, layer, phase, tile)[threadIdx.x] = s;
  }
  return true;
}

template <int G>
__device__ void ring_consumers(const Args& a, const unsigned char* ring, unsigned long long* full,
                               unsigned long long* empty, const unsigned* rounds) {
  __shared__ float parts[MAX_TILE_ROWS * CONSUMERS];
  const int worker = blockIdx.x, workers = gridDim.x;
  RingPos pos;
  for (int layer = 0; layer < a.layers; ++layer) {
    for (int phase = 0; phase < NPHASE; ++phase) {
      for (int tile = worker; tile < TILES(phase); tile += workers) {
        const bool bad = threadIdx.x == 0 && !wait_dependency(a, layer, phase);
        if (consumers_any<G * CTHREADS>(bad)) return;
        bool ok = true;
        if (phase == ATTN) attn_tile(a, layer, tile, [] { consumers_any<G * CTHREADS>(false); });
        else if (phase == DOWN) ok = ring_gemv<KDIM(DOWN), G>(a, layer, phase, tile, ring, full, empty, rounds, pos, parts);
        else ok = ring_gemv<KDIM(QKV), G>(a, layer, phase, tile, ring, full, empty, rounds, pos, parts);
        if (!ok) return;
        consumers_any<G * CTHREADS>(false);  // the tile's outputs are written (and parts is free again) before the signal
        if (threadIdx.x == 0) signal_tiles(a, layer, phase, 1u);
      }
    }
  }
}

// The ring kernels' layout: the ring and its barriers set up once, then threads [0, consumer_threads) consume and
// the first thread of the warp after them loads. `empty_arrivals`: the arrivals that free a page.
template <class Consumers>
__device__ void run_with_loader(const Args& a, int consumer_threads, unsigned empty_arrivals, Consumers consumers) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) unsigned long long full[32], empty[32];
  __shared__ unsigned rounds[32];  // page_wait
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.pages; ++s) {
      rounds[s] = 0;
      bar_init(&full[s], 1);  // the loader's arrive.expect_tx (+ the copy's bytes)
      bar_init(&empty[s], empty_arrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if ((int)threadIdx.x >= consumer_threads) {
    if ((int)threadIdx.x == consumer_threads) ring_loader(a, ring, full, empty, rounds);
    __syncwarp();
  } else {
    consumers(ring, full, empty, rounds);
  }
}

template <int G>
__device__ void run_ring(const Args& a) {
  // a page is free once every warp of the consumer group that read it arrived
  run_with_loader(a, G * CTHREADS, CONSUMERS, [&](unsigned char* ring, unsigned long long* full,
                                                 unsigned long long* empty, unsigned* rounds) {
    ring_consumers<G>(a, ring, full, empty, rounds);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// layer_rows: the same loader and ring, consumers that give each warp whole rows (session 19). ncu of layer_ring
// found its consumers, not DRAM, bound it: a thread owned one 16-byte chunk of every row, so each row's 32 lanes
// needed their own shuffle tree (5 shuffles and adds per 512 bytes) and every page a wait, a barrier and ring
// bookkeeping per warp. Here row g of the CTA's rows of a phase (tiles in order) belongs to warp g % NW: a lane
// multiplies K / 256 chunks of it (8 at K 2048, 22 at 5632) and the row takes one shuffle tree. The activations are
// loaded into shared memory once per phase (xs, after the dependency wait, as the megakernel's load_vector does);
// at K 2048 each lane then keeps its 8 chunks' activations in registers.
//
// A page's row owners wait for it (page_wait) and arrive on its empty barrier (count NW): the owner of its first row
// arrives for NW - (owners - 1), the others for one each. A phase takes two consumer barriers (thread 0's
// dependency wait, then xs loaded by all); each warp then counts itself done in shared memory and the last one
// signals the phase's tiles (no barrier at the end). ncu of the first version (b60ab86): 43 instructions per page
// and warp when every warp also arrived on every page (40% of all), 3 consumer barriers per phase ~23% of the stall
// samples.
constexpr int ROWS_WARPS = 16;
constexpr int ROWS_THREADS = ROWS_WARPS * 32;

__device__ __forceinline__ void bar_arrive_count(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(mk::smem_addr(bar)), "r"(count) : "memory");
}

template <int K>
__device__ bool rows_phase(const Args& a, int layer, int phase, const unsigned char* ring, unsigned long long* full,
                           unsigned long long* empty, const unsigned* rounds, RingPos& pos, const float* xs) {
  constexpr int C = K / 8, CPL = C / 32;  // chunks per row, per lane
  constexpr bool kXRegs = CPL <= 8;       // K 2048: the lane's activations in registers (64 floats)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int worker = blockIdx.x, workers = gridDim.x;
  const int rows = TILE_ROWS(phase), rpp = rows_per_page(phase, a.page_bytes);
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  float4 xr[kXRegs ? 2 * CPL : 1];
  if constexpr (kXRegs) {
#pragma unroll
    for (int j = 0; j < CPL; ++j) {
      xr[2 * j] = x4[2 * (lane + 32 * j)];
      xr[2 * j + 1] = x4[2 * (lane + 32 * j) + 1];
    }
  }
  unsigned turn = 0;  // the warp of the page's first row: (rows before it) % NW
  bool ok = true;
  for (int tile = worker; tile < TILES(phase) && ok; tile += workers) {
    float* out = tile_out(a, layer, phase, tile);
    for (int r0 = 0; r0 < rows; r0 += rpp) {
      const int n = min(rpp, rows - r0);
      const int first = (warp - (int)turn) & (ROWS_WARPS - 1);  // this warp's first row of the page
      if (first < n) {
        ok = __all_sync(0xffffffffu, page_wait(rounds, full, pos, a));
        if (!ok) {
          if (lane == 0) report(a.err, ERR_FULL, layer, phase);
          break;
        }
        const uint4* page = reinterpret_cast<const uint4*>(ring + (size_t)pos.slot * a.page_bytes);
        for (int i = first; i < n; i += ROWS_WARPS) {
          const uint4* row = page + (size_t)i * C;
          float acc0 = 0.f, acc1 = 0.f;  // two chains: half the dependent adds
#pragma unroll
          for (int j = 0; j < CPL; j += 2) {
            const int c = lane + 32 * j;
            if constexpr (kXRegs) {
              acc0 += mk::dot8(row[c], xr[2 * j], xr[2 * j + 1]);
              if (j + 1 < CPL) acc1 += mk::dot8(row[c + 32], xr[2 * j + 2], xr[2 * j + 3]);
            } else {
              acc0 += mk::dot8(row[c], x4[2 * c], x4[2 * c + 1]);
              if (j + 1 < CPL) acc1 += mk::dot8(row[c + 32], x4[2 * c + 64], x4[2 * c + 65]);
            }
          }
          const float sum = mk::warp_sum(acc0 + acc1);
          if (lane == 0) out[r0 + i] = sum;
        }
        __syncwarp();
        const int owners = min(n, ROWS_WARPS);
        if (lane == 0) bar_arrive_count(&empty[pos.slot], first == 0 ? ROWS_WARPS - (owners - 1) : 1u);
      }
      pos.advance(a.pages);
      turn = (turn + n) & (ROWS_WARPS - 1);
    }
  }
  return ok;
}

// layer_mma: layer_rows with the K-2048 phases' multiply on the tensor cores (session 19). layer_rows' consumers, at
// ~29 us per layer streaming, are slower than DRAM (21), so pages prefetched across a wait only queue for them.
// mma.m16n8k16 (bf16 in, fp32 accumulate) multiplies 8 weight rows (its n) by 32 k per pair of instructions:
// A holds the activations, row 0 their bf16 high part and row 1 the bf16 remainder x - hi (rows 2-15 zero), so
// row 0 + row 1 of D is W x with ~16-bit activations, not 8. Thread (g, t) feeds row g's 16-byte chunk 4s + t of
// each step s, the two halves of the chunk to the two instructions; the A operand's slots take the same real k
// (x's chunk 4s + t, from lanes 0-3 the high parts, 4-7 the remainders), so every k meets its own activation.
// Estimated from the source, not measured: ~6 instructions per 512 bytes and warp against ~17 on the CUDA cores.
// Pages are taken in pairs (8 rows, pages of 4 rows: 16 KiB at K 2048).
__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a2, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

// Pair q's k range is split in MMA_SPLIT parts, part j to warp (MMA_SPLIT q + j) % NW (QKV and O hold only 2-4
// pairs per CTA: whole pairs would leave most warps idle); each writes its 8 rows' partial sums to parts[j][row] and
// the phase's last warp adds them in a fixed order (rows_consumers).
constexpr int MMA_SPLIT = 4;
constexpr int MMA_MAX_ROWS = 2 * MAX_TILE_ROWS;  // a CTA's rows of one K-2048 phase (gate/up: 2 tiles of 44)

template <int K>
__device__ bool mma_phase(const Args& a, int layer, int phase, const unsigned char* ring, unsigned long long* full,
                          unsigned long long* empty, const unsigned* rounds, RingPos& pos, const __nv_bfloat16* xh,
                          const __nv_bfloat16* xl, float (*parts)[MMA_MAX_ROWS]) {
  constexpr int C = K / 8, STEPS = C / 4;  // 16-byte chunks per row; a step: 4 chunks (32 k) of 8 rows
  constexpr int PART = STEPS / MMA_SPLIT;
  static_assert(PART % 2 == 0, "two steps per iteration");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rows = TILE_ROWS(phase);
  const int total = cta_tiles(phase) * rows;  // this CTA's rows, tiles in order
  const int npages = total / 4;
  bool ok = true;
  for (int p = 0; p < npages; p += 2) {
    const int np = min(2, npages - p);
    const int j = (warp - MMA_SPLIT * (p >> 1)) & (ROWS_WARPS - 1);  // this warp's part of the pair, if < SPLIT
    if (j >= MMA_SPLIT) {
      for (int b = 0; b < np; ++b) pos.advance(a.pages);
      continue;
    }
    unsigned slot[2] = {0u, 0u};
    const uint4* pg[2] = {nullptr, nullptr};
#pragma unroll
    for (int b = 0; b < 2; ++b) {  // (b < 2, not np: constant indices keep slot and pg in registers)
      if (b >= np) break;
      ok = __all_sync(0xffffffffu, page_wait(rounds, full, pos, a));
      if (!ok) break;
      slot[b] = pos.slot;
      pg[b] = reinterpret_cast<const uint4*>(ring + (size_t)pos.slot * a.page_bytes);
      pos.advance(a.pages);
    }
    if (!ok) {
      if (lane == 0) report(a.err, ERR_FULL, layer, phase);
      break;
    }
    const bool has_row = (g >> 2) < np;  // a 1-page pair has rows 0-3 only
    const uint4* row = ((g >> 2) ? pg[1] : pg[0]) + (g & 3) * C;
    const bool xlane = g < 2;
    const uint4* xsrc = reinterpret_cast<const uint4*>(g == 0 ? xh : xl);
    float d[4][4] = {};  // four accumulator chains
#pragma unroll 1
    for (int s = j * PART; s < (j + 1) * PART; s += 2) {  // (unrolled further, ptxas spills at its 96 registers)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int c = 4 * (s + u) + t;
        const uint4 w = has_row ? row[c] : make_uint4(0u, 0u, 0u, 0u);
        const uint4 x = xlane ? xsrc[c] : make_uint4(0u, 0u, 0u, 0u);
        mma_bf16(d[2 * u], x.x, x.y, w.x, w.y);
        mma_bf16(d[2 * u + 1], x.z, x.w, w.z, w.w);
      }
    }
    float d0 = (d[0][0] + d[1][0]) + (d[2][0] + d[3][0]), d1 = (d[0][1] + d[1][1]) + (d[2][1] + d[3][1]);
    d0 += __shfl_down_sync(0xffffffffu, d0, 4);  // lanes 0-3: the high parts' sums plus lanes 4-7's remainders'
    d1 += __shfl_down_sync(0xffffffffu, d1, 4);
    if (lane < 4) {
      parts[j][4 * p + 2 * t] = d0;  // the CTA's rows 4p + n, W row n = 2t, 2t + 1 of the pair
      parts[j][4 * p + 2 * t + 1] = d1;
    }
    __syncwarp();
    if (lane == 0) {
      bar_arrive_count(&empty[slot[0]], ROWS_WARPS / MMA_SPLIT);
      if (np > 1) bar_arrive_count(&empty[slot[1]], ROWS_WARPS / MMA_SPLIT);
    }
  }
  return ok;
}

// layer_mma's phase end (the phase's last warp): each of the CTA's rows is the sum of its MMA_SPLIT parts.
__device__ void mma_write(const Args& a, int layer, int phase, const float (*parts)[MMA_MAX_ROWS]) {
  const int worker = blockIdx.x, workers = gridDim.x, rows = TILE_ROWS(phase);
  const int total = cta_tiles(phase) * rows;
  for (int R = threadIdx.x & 31; R < total; R += 32) {
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < MMA_SPLIT; ++j) sum += parts[j][R];
    tile_out(a, layer, phase, worker + (R / rows) * workers)[R % rows] = sum;
  }
}

// Phases of layers before `layer` and phases before `phase` of it that worker takes part in (has a tile of).
__device__ __forceinline__ unsigned phases_before(int worker, int layer, int phase) {
  unsigned per_layer = 0, before = 0;
#pragma unroll
  for (int p = 0; p < NPHASE; ++p) {
    const unsigned in = worker < TILES(p);
    per_layer += in;
    before += p < phase ? in : 0u;
  }
  return (unsigned)layer * per_layer + before;
}

// Lane 0 of warp 0: spin until `count` (a shared count of finished work, summed over phases so far) reaches `target`.
__device__ __forceinline__ void wait_done(const unsigned* count, unsigned target) {
  while (*(volatile const unsigned*)count < target) {}
}

template <bool kMma>
__device__ void rows_consumers(const Args& a, const unsigned char* ring, unsigned long long* full,
                               unsigned long long* empty, const unsigned* rounds) {
  __shared__ __align__(16) float xs[KDIM(DOWN)];
  __shared__ __align__(16) __nv_bfloat16 xh[kMma ? KDIM(QKV) : 8], xl[kMma ? KDIM(QKV) : 8];  // layer_mma's A
  __shared__ float parts[kMma ? MMA_SPLIT : 1][MMA_MAX_ROWS];  // layer_mma's partial row sums
  // done: warps that finished their part of a phase; finished: phases whose last warp also wrote and signalled
  // (summed over this CTA's phases). The next phase may reuse xs and parts once `finished` counts this one.
  __shared__ unsigned done, finished;
  const int worker = blockIdx.x, workers = gridDim.x, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) done = finished = 0;
  consumers_any<ROWS_THREADS>(false);
  RingPos pos;
  bool ok = true;
  for (int layer = 0; layer < a.layers; ++layer) {
    for (int phase = 0; phase < NPHASE; ++phase) {
      if (worker >= TILES(phase)) continue;  // no tile of this phase here (ATTN: 32 tiles)
      bool bad = !ok;
      if (threadIdx.x == 0) {  // the dependency, and every warp done with xs (the stream mode's only guard for it)
        bad = bad || !wait_dependency(a, layer, phase);
        if (!bad) wait_done(&finished, phases_before(worker, layer, phase));
      }
      if (consumers_any<ROWS_THREADS>(bad)) return;
      if (phase != ATTN) {  // this phase's activations, every consumer thread a share: one L2 round trip
        const int K = KDIM(phase);
        const float4* src = reinterpret_cast<const float4*>(phase == DOWN ? a.xf : a.xd);
        for (int i = threadIdx.x; i < K / 4; i += ROWS_THREADS) reinterpret_cast<float4*>(xs)[i] = __ldcg(src + i);
        consumers_any<ROWS_THREADS>(false);  // xs is whole
        if (kMma && phase != DOWN) {  // the tensor cores' activations: bf16 high part and remainder
          for (int k = threadIdx.x; k < KDIM(QKV); k += ROWS_THREADS) {
            const __nv_bfloat16 hi = __float2bfloat16(xs[k]);
            xh[k] = hi;
            xl[k] = __float2bfloat16(xs[k] - __bfloat162float(hi));
          }
          consumers_any<ROWS_THREADS>(false);
        }
      }
      // pages of 4 rows (16 KiB) pair into mma's 8 rows
      const bool mma = kMma && phase != DOWN && phase != ATTN && rows_per_page(phase, a.page_bytes) == 4;
      if (phase == ATTN) {
        for (int tile = worker; tile < TILES(ATTN); tile += workers)
          attn_tile(a, layer, tile, [] { consumers_any<ROWS_THREADS>(false); });
      } else {
        if (phase == DOWN) ok = rows_phase<KDIM(DOWN)>(a, layer, phase, ring, full, empty, rounds, pos, xs);
        else if (mma) ok = mma_phase<KDIM(QKV)>(a, layer, phase, ring, full, empty, rounds, pos, xh, xl, parts);
        else ok = rows_phase<KDIM(QKV)>(a, layer, phase, ring, full, empty, rounds, pos, xs);
      }
      // This warp's rows are written ... ; the last warp of the phase signals its tiles. CTA-scope fences around the
      // shared count (release, then the last warp's acquire) chain into the counter's gpu-scope release; the
      // __threadfence (fence.sc.gpu, an L1 invalidate per warp) they replace was 22% of the stall samples (b60ab86+1).
      // recomputed, not kept from the wait above: live across the phase it cost layer_mma a stack slot (nvcc 13.0)
      const unsigned nth = phases_before(worker, layer, phase) + 1;
      bool last = false;
      if (lane == 0) {
        asm volatile("fence.acq_rel.cta;" ::: "memory");
        last = atomicAdd(&done, 1u) + 1 == nth * ROWS_WARPS;
        if (last) asm volatile("fence.acq_rel.cta;" ::: "memory");
      }
      if (__shfl_sync(0xffffffffu, last, 0)) {
        if (mma) mma_write(a, layer, phase, parts);
        __syncwarp();
        if (lane == 0) {
          signal_tiles(a, layer, phase, (unsigned)cta_tiles(phase));
          asm volatile("fence.acq_rel.cta;" ::: "memory");
          atomicAdd(&finished, 1u);
        }
      }
    }
  }
}

template <bool kMma>
__device__ void run_rows(const Args& a) {
  // the page's owners' arrivals add up to ROWS_WARPS
  run_with_loader(a, ROWS_THREADS, ROWS_WARPS, [&](unsigned char* ring, unsigned long long* full,
                                                  unsigned long long* empty, unsigned* rounds) {
    rows_consumers<kMma>(a, ring, full, empty, rounds);
  });
}

template <int G, bool kStamps = false>  // G consumer groups of 8 warps; 0: the register kernel; -1: rows; -2: mma
__device__ void layer_stream(const Args& a) {
  if (threadIdx.x == 0) a.worker_ns[2 * blockIdx.x] = globaltimer_ns();
  if constexpr (G < 0) run_rows<G == -2>(a);
  else if constexpr (G > 0) run_ring<G>(a);
  else run_regs<kStamps>(a);
  __syncthreads();
  if (threadIdx.x == 0) a.worker_ns[2 * blockIdx.x + 1] = globaltimer_ns();
}

}  // namespace

#define LS_ARGS                                                                                                    \
  const __nv_bfloat16 *wqkv, const __nv_bfloat16 *wo, const __nv_bfloat16 *wgu, const __nv_bfloat16 *wd,           \
      const float *xd, const float *xf, float *out, unsigned *counters, int *err, unsigned long long *worker_ns,   \
      unsigned long long *phase_ns, unsigned long long *stamps, int layers, int wait, int pf_head, int pages,      \
      int page_bytes, unsigned long long attn_ns, unsigned long long timeout_ns
#define LS_PACK                                                                                                    \
  Args{wqkv, wo, wgu, wd, xd, xf, out, counters, err, worker_ns, phase_ns, stamps, layers, wait, pf_head, pages, \
       page_bytes, attn_ns, timeout_ns}

extern "C" __global__ void __launch_bounds__(256, 2) layer_regs(LS_ARGS) { layer_stream<0>(LS_PACK); }
extern "C" __global__ void __launch_bounds__(256, 2) layer_regs_stamps(LS_ARGS) { layer_stream<0, true>(LS_PACK); }
extern "C" __global__ void __launch_bounds__(CTHREADS + 32, 1) layer_ring(LS_ARGS) { layer_stream<1>(LS_PACK); }
// 16 consumer warps (as HazyResearch's megakernel has): do twice the warps per SM hide the consumers' latency?
extern "C" __global__ void __launch_bounds__(2 * CTHREADS + 32, 1) layer_ring16(LS_ARGS) { layer_stream<2>(LS_PACK); }
extern "C" __global__ void __launch_bounds__(ROWS_THREADS + 32, 1) layer_rows(LS_ARGS) { layer_stream<-1>(LS_PACK); }
extern "C" __global__ void __launch_bounds__(ROWS_THREADS + 32, 1) layer_mma(LS_ARGS) { layer_stream<-2>(LS_PACK); }
