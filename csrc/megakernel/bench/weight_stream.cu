// Weight-stream microbenchmark for the megakernel's design question (megakernel/NOTES.md row 16):
// how fast can CTAs stream bf16 GEMV weights, and how much longer does a dependent L2 / DRAM round
// trip get while they do?
//
// Block 0 is a probe: lane 0 of warp 0 chases a pointer ring that stays in L2 (8 lines), lane 0 of
// warp 1 a random ring over 256 MiB (each hop a DRAM miss). They chase while every streaming block
// is running (from the last block's start to the first block's end), or for min_hops with no
// streaming blocks (the unloaded latency). Blocks 1.. stream: each takes tiles b-1, b-1+G, ... of
// `rows` rows x K bf16 and writes out[row] = W[row, :] . x, by one of
//   kMode 0: the megakernel's plain GEMV loop (gemv.cuh, 2 loads in flight per warp),
//   kMode 1: its batched loop (16 loads per lane issued before use),
//   kMode 2: a bulk-copy ring: one loader thread (warp 8) copies 16 KiB pages (4 rows of K = 2048)
//            into `pages` shared-memory slots with cp.async.bulk, never waiting on anything but a
//            free slot, while 8 consumer warps dot the landed pages from shared memory.
//
// The probe's method (probe_kind), the question being which path to L2 a streaming neighbour on the same SM slows:
//   PROBE_LD        lane 0 of warps 0 / 1: one ld.global.cg per hop (the megakernel's polls and activation loads);
//   PROBE_BULK      the same rings, each hop a 16-byte cp.async.bulk into shared memory, completed on an mbarrier
//                   (the copy engine's path, not the load/store unit's);
//   PROBE_VEC_LD    the whole probe block: each hop an 8 KiB vector of an L2-resident ring of 8 (the megakernel's
//                   early_vector: two float4 loads per thread, stores to shared memory, a barrier); word 0 of a
//                   vector is the next one's index;
//   PROBE_VEC_BULK  the same vectors, each hop one 8 KiB cp.async.bulk issued by thread 0, every thread waiting on
//                   the mbarrier.
// probe_out: [ns, hops] of the L2 chase, [ns, hops] of the DRAM chase (none for the vector kinds), then each chase's
// final index, which the host checks against the ring walked that many hops.
#include <cuda_bf16.h>
#include <stdint.h>

#include "gemv.cuh"
#include "mbarrier.cuh"  // bar_init, bar_arrive, bar_try (and stage.cuh: smem_addr, stage_expect, stage_copy)

namespace {

constexpr int PAGE_BYTES = 16 * 1024;
constexpr int K_RING = 2048;                       // the ring mode's row length (4 rows per page)
constexpr int ROWS_PER_PAGE = PAGE_BYTES / (K_RING * 2);
constexpr int CONSUMERS = 8;                       // consumer warps of the ring mode (+1 loader warp)

using bench::bar_arrive;
using bench::bar_init;
using mk::globaltimer_ns;

__device__ __forceinline__ void bar_wait(unsigned long long* bar, unsigned parity) {
  while (!bench::bar_try(bar, parity)) {
  }
}

enum ProbeKind { PROBE_LD = 0, PROBE_BULK = 1, PROBE_VEC_LD = 2, PROBE_VEC_BULK = 3 };
constexpr int VEC_FLOATS = 2048;  // a probe vector: 8 KiB, the megakernel's K = 2048 activation in fp32

__device__ __forceinline__ unsigned chase_load(const unsigned* p) {
  unsigned v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One 16-byte bulk copy of the ring word at ring[cur] (lines are 128 or 256 bytes apart: 16-byte aligned).
__device__ __forceinline__ unsigned chase_bulk(const unsigned* ring, unsigned cur, unsigned long long* bar,
                                               unsigned* slot, unsigned& parity) {
  mk::stage_expect(bar, 16);
  mk::stage_copy(bar, reinterpret_cast<unsigned char*>(slot), reinterpret_cast<const char*>(ring + cur), 16);
  bar_wait(bar, parity);
  parity ^= 1u;
  return *reinterpret_cast<volatile unsigned*>(slot);
}

// Probe block: ns per dependent hop of each ring while the streaming blocks run. `buf`: VEC_FLOATS floats of shared
// memory (the streaming blocks' own activation buffer: the probe adds no shared memory to any block).
__device__ void probe(const unsigned* l2_ring, const unsigned* dram_ring, const float* vec_ring, unsigned* started,
                      unsigned* finished, int n_stream, unsigned min_hops, unsigned dram_start, int kind, float* buf,
                      unsigned long long* probe_out) {
  __shared__ __align__(8) unsigned long long bars[2];
  __shared__ int stop;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  volatile unsigned* vstart = started;
  volatile unsigned* vfinish = finished;
  if (threadIdx.x == 0) {
    bar_init(&bars[0], 1);
    bar_init(&bars[1], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    stop = 0;
  }
  __syncthreads();
  if (kind == PROBE_VEC_LD || kind == PROBE_VEC_BULK) {  // the whole block chases 8 KiB vectors
    if (threadIdx.x == 0 && n_stream > 0)
      while (*vstart < (unsigned)n_stream) {}
    __syncthreads();
    unsigned cur = 0, hops = 0, parity = 0;
    const unsigned long long t0 = globaltimer_ns();
    for (;;) {
#pragma unroll 1
      for (int k = 0; k < 16; ++k) {
        const float* v = vec_ring + (size_t)cur * VEC_FLOATS;
        if (kind == PROBE_VEC_LD) {
          // threads 0..255 (the ring kernel's loader warp sits it out): both loads before the stores, one round trip
          constexpr int SLOTS = VEC_FLOATS / 4 / 256;
          const float4* v4 = reinterpret_cast<const float4*>(v);
          float4 a[SLOTS];
          if (threadIdx.x < 256) {
#pragma unroll
            for (int i = 0; i < SLOTS; ++i) a[i] = __ldcg(v4 + threadIdx.x + i * 256);
#pragma unroll
            for (int i = 0; i < SLOTS; ++i) reinterpret_cast<float4*>(buf)[threadIdx.x + i * 256] = a[i];
          }
          __syncthreads();
        } else {
          if (threadIdx.x == 0) {  // stage.cuh's copy: the megakernel's own bulk-copy path
            mk::stage_expect(&bars[0], VEC_FLOATS * 4);
            mk::stage_copy(&bars[0], reinterpret_cast<unsigned char*>(buf), reinterpret_cast<const char*>(v),
                           VEC_FLOATS * 4);
          }
          bar_wait(&bars[0], parity);
          parity ^= 1u;
        }
        cur = __float_as_uint(buf[0]);
        __syncthreads();  // every thread read word 0 before the next hop overwrites the buffer
      }
      hops += 16;
      if (threadIdx.x == 0) stop = n_stream > 0 ? *vfinish > 0 : hops >= min_hops;
      __syncthreads();
      const int done = stop;
      __syncthreads();
      if (done) break;
    }
    const unsigned long long t1 = globaltimer_ns();
    if (threadIdx.x == 0) {
      probe_out[0] = t1 - t0;
      probe_out[1] = hops;
      probe_out[4] = cur;
    }
    return;
  }
  if (lane != 0 || warp > 1) return;
  const unsigned* ring = warp == 0 ? l2_ring : dram_ring;
  unsigned* slot = reinterpret_cast<unsigned*>(buf) + 4 * warp;  // 16 bytes per chasing lane
  if (n_stream > 0)
    while (*vstart < (unsigned)n_stream) {}
  // the DRAM ring starts where the host says: a fresh stretch of lines per launch, not ones an earlier launch left in L2
  unsigned cur = warp == 0 ? 0u : dram_start, hops = 0, parity = 0;
  const unsigned long long t0 = globaltimer_ns();
  for (;;) {
    if (kind == PROBE_BULK) {
#pragma unroll 1
      for (int k = 0; k < 16; ++k) cur = chase_bulk(ring, cur, &bars[warp], slot, parity);
    } else {
#pragma unroll 1
      for (int k = 0; k < 16; ++k) cur = chase_load(ring + cur);
    }
    hops += 16;
    if (n_stream > 0 ? *vfinish > 0 : hops >= min_hops) break;
  }
  const unsigned long long t1 = globaltimer_ns();
  probe_out[2 * warp] = t1 - t0;
  probe_out[2 * warp + 1] = hops;
  probe_out[4 + warp] = cur;
}

// The ring mode's streaming block: loader warp 8, consumer warps 0..7 (288 threads).
__device__ void stream_ring(const __nv_bfloat16* W, const float* x, float* out, int tiles, int rows, int pages,
                            int b, int G, float* xs) {
  extern __shared__ __align__(128) unsigned char ring_smem[];
  __shared__ __align__(8) unsigned long long full[16], empty[16];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < K_RING; i += blockDim.x) xs[i] = x[i];
  if (threadIdx.x == 0) {
    for (int s = 0; s < pages; ++s) {
      bar_init(&full[s], 1);
      bar_init(&empty[s], CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int pages_per_tile = rows / ROWS_PER_PAGE;
  const int my_tiles = b < tiles ? (tiles - 1 - b) / G + 1 : 0;
  const int my_pages = my_tiles * pages_per_tile;
  if (warp == CONSUMERS) {  // the loader
    if (lane == 0) {
      for (int i = 0; i < my_pages; ++i) {
        const int slot = i % pages, round = i / pages;
        if (round > 0) bar_wait(&empty[slot], (round - 1) & 1);
        const int tile = b + (i / pages_per_tile) * G;
        const char* src = reinterpret_cast<const char*>(W) + ((size_t)tile * pages_per_tile + i % pages_per_tile) * PAGE_BYTES;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     ::"r"(mk::smem_addr(&full[slot])), "r"(PAGE_BYTES) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(mk::smem_addr(ring_smem + (size_t)slot * PAGE_BYTES)), "l"(src), "r"(PAGE_BYTES),
                       "r"(mk::smem_addr(&full[slot])) : "memory");
      }
    }
    return;
  }
  // consumer warp w: row w / 2 of each page, half w % 2 of it (1024 bf16 = 4 chunks of 8 per lane)
  const int row_in_page = warp >> 1, half = warp & 1;
  const float4* x4 = reinterpret_cast<const float4*>(xs) + half * (K_RING / 8);
  for (int i = 0; i < my_pages; ++i) {
    const int slot = i % pages, round = i / pages;
    bar_wait(&full[slot], round & 1);
    const uint4* w4 = reinterpret_cast<const uint4*>(ring_smem + (size_t)slot * PAGE_BYTES) +
                      row_in_page * (K_RING / 8) + half * (K_RING / 16);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < K_RING / 16 / 32; ++j) {
      const int c = lane + 32 * j;
      acc += mk::dot8(w4[c], x4[2 * c], x4[2 * c + 1]);
    }
    __syncwarp();
    if (lane == 0) bar_arrive(&empty[slot]);  // this warp is done reading the slot
    acc = mk::warp_sum(acc);
    const int tile = b + (i / pages_per_tile) * G;
    if (lane == 0) atomicAdd(out + (size_t)tile * rows + (i % pages_per_tile) * ROWS_PER_PAGE + row_in_page, acc);
  }
}

template <int kMode>
__device__ void stream_registers(const __nv_bfloat16* W, const float* x, float* out, int K, int tiles, int rows,
                                 int b, int G, float* xs) {
  for (int i = threadIdx.x; i < K; i += blockDim.x) xs[i] = x[i];
  __syncthreads();
  for (int tile = b; tile < tiles; tile += G)
    mk::gemv_rows<kMode == 1>(W + (size_t)tile * rows * K, K, rows, xs, out + (size_t)tile * rows);
}

}  // namespace

// One launch: block 0 probes, blocks 1..gridDim.x-1 stream (none when gridDim.x == 1).
template <int kMode>
__device__ void weight_stream(const __nv_bfloat16* W, const float* x, float* out, int K, int tiles, int rows,
                              int pages, const unsigned* l2_ring, const unsigned* dram_ring, const float* vec_ring,
                              unsigned* counters, unsigned min_hops, unsigned dram_start, int probe_kind,
                              unsigned long long* probe_out, unsigned long long* block_ns) {
  // the streaming blocks' activation vector (K floats), which the probe block borrows for its landing slots
  __shared__ __align__(128) float xs[kMode == 2 ? K_RING : 8192];
  const int n_stream = (int)gridDim.x - 1;
  if (blockIdx.x == 0) {
    probe(l2_ring, dram_ring, vec_ring, counters, counters + 1, n_stream, min_hops, dram_start, probe_kind, xs,
          probe_out);
    return;
  }
  const int b = (int)blockIdx.x - 1;
  if (threadIdx.x == 0) {
    block_ns[2 * b] = globaltimer_ns();
    atomicAdd(counters, 1u);
  }
  if constexpr (kMode == 2) stream_ring(W, x, out, tiles, rows, pages, b, n_stream, xs);
  else stream_registers<kMode>(W, x, out, K, tiles, rows, b, n_stream, xs);
  __syncthreads();
  if (threadIdx.x == 0) {
    block_ns[2 * b + 1] = globaltimer_ns();
    atomicAdd(counters + 1, 1u);
  }
}

#define ARGS                                                                                                   \
  const __nv_bfloat16 *W, const float *x, float *out, int K, int tiles, int rows, int pages,                   \
      const unsigned *l2_ring, const unsigned *dram_ring, const float *vec_ring, unsigned *counters,              \
      unsigned min_hops, unsigned dram_start, int probe_kind, unsigned long long *probe_out, unsigned long long *block_ns
#define PASS                                                                                                   \
  W, x, out, K, tiles, rows, pages, l2_ring, dram_ring, vec_ring, counters, min_hops, dram_start, probe_kind,   \
      probe_out, block_ns

extern "C" __global__ void __launch_bounds__(256, 2) stream_plain(ARGS) { weight_stream<0>(PASS); }
extern "C" __global__ void __launch_bounds__(256, 2) stream_batch(ARGS) { weight_stream<1>(PASS); }
extern "C" __global__ void __launch_bounds__(288, 2) stream_ring_copy(ARGS) { weight_stream<2>(PASS); }
