// Weight page ring (opt-in, MK_RING = pages per CTA; 0 = off, the default build has none of this).
//
// Why (benchmarks/weight_stream.py on H200, 2026-12-01 18:27, megakernel/NOTES.md row 17): with 2 CTAs
// per SM streaming weights by register loads (the GEMV loops of gemv.cuh), a dependent L2 load on the
// same SM takes ~1000 ns instead of 143 ns unloaded, with no bandwidth gained over 1 CTA per SM; bulk
// copies (cp.async.bulk) of 16 KiB pages into shared memory stream 4.2-4.3 TB/s at 2 CTAs per SM with
// dependent loads at 190-290 ns. Every poll, activation load and attention round trip of the megakernel
// is such a dependent load, on SMs where the other worker streams.
//
// How: a tile's weights are its contiguous bytes in pages of RING_PAGE bytes. When a worker takes a
// GEMV ticket, thread 0 issues the tile's first MK_RING pages *before* the dependency wait (the weights
// do not depend on it); the GEMV (ring_gemv) then waits for each page in order, all threads dot it from
// shared memory, and after a barrier thread 0 refills the freed slot with the tile's next page. Pages
// carry a per-CTA sequence number n: slot n % MK_RING, completing phase (n / MK_RING) & 1 of that slot's
// mbarrier. A warp's 32 lanes read 32 consecutive 16-byte chunks of one row (rows are a multiple of 256
// bf16: host-checked), so a warp reduces its part of a row with one warp sum; per-(row, warp) partials
// are kept in shared memory and summed in a fixed order, so outputs do not depend on timing.
#pragma once
#include "common.cuh"
#include "stage.cuh"

namespace mk {

#if MK_RING
constexpr unsigned RING_PAGE = 16u * 1024u;
constexpr int RING_PARTS_FLOATS = MAX_TILE_ROWS * NWARPS;  // per-(row, warp) partial sums, after the pages
static_assert(MK_RING >= 1 && MK_RING <= 8, "MK_RING: 1 to 8 pages per CTA");

struct Ring {
  unsigned long long bar[MK_RING];  // one mbarrier per slot (arrival count 1 + the copy's bytes)
  const char* src;                  // the current tile's weights
  unsigned bytes;                   // ... and their size (0: no tile in the ring)
  unsigned base;                    // sequence number of the tile's first page
  unsigned issued;                  // pages of the tile issued so far
};

__device__ __forceinline__ unsigned char* ring_page(unsigned seq) {
  return stage_buffer + (size_t)(seq % MK_RING) * RING_PAGE;
}

__device__ __forceinline__ float* ring_parts() {
  return reinterpret_cast<float*>(stage_buffer + (size_t)MK_RING * RING_PAGE);
}

__device__ __forceinline__ unsigned ring_pages_of(unsigned bytes) { return (bytes + RING_PAGE - 1) / RING_PAGE; }

// Thread 0, once per CTA.
__device__ __forceinline__ void ring_init(Ring& r) {
  for (int i = 0; i < MK_RING; ++i)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&r.bar[i])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  r.src = nullptr;
  r.bytes = 0;
  r.base = 0;
  r.issued = 0;
}

// Thread 0: copy page `k` of the current tile into its slot.
__device__ __forceinline__ void ring_issue_page(Ring& r, unsigned k) {
  const unsigned seq = r.base + k, off = k * RING_PAGE, n = min(RING_PAGE, r.bytes - off);
  unsigned long long* bar = &r.bar[seq % MK_RING];
  // The slot's earlier generic-proxy reads (behind a barrier) come before the copy engine's writes.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(n) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(ring_page(seq))), "l"(r.src + off), "r"(n), "r"(smem_addr(bar)) : "memory");
}

// Thread 0, at ticket time: start a GEMV tile's weights (up to MK_RING pages) before its dependency wait.
__device__ __forceinline__ void ring_start_tile(Ring& r, const char* src, unsigned bytes) {
  r.src = src;
  r.bytes = bytes;
  r.issued = min((unsigned)MK_RING, ring_pages_of(bytes));
  for (unsigned k = 0; k < r.issued; ++k) ring_issue_page(r, k);
}

// Thread 0, after the tile (all pages consumed, or a failed wait drained): the next tile's pages follow.
__device__ __forceinline__ void ring_end_tile(Ring& r) {
  r.base += ring_pages_of(r.bytes);
  r.bytes = 0;
  r.issued = 0;
}

// Every thread: wait until the tile's issued pages have all landed (an aborted tile: no copy outlives the CTA).
__device__ __forceinline__ void ring_drain(Ring& r, unsigned long long timeout_ns) {
  for (unsigned k = 0; k < r.issued; ++k) {
    const unsigned seq = r.base + k;
    stage_wait(&r.bar[seq % MK_RING], (seq / MK_RING) & 1u, timeout_ns);
  }
}

// out[row] = W[row, :] . xs for the tile in the ring (rows x K bf16, K a multiple of 256). Returns false
// when a page did not land by the deadline (every thread returns the same).
__device__ bool ring_gemv(Ring& r, int K, int rows, const float* __restrict__ xs, float* __restrict__ out,
                          unsigned long long timeout_ns) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned cpr = (unsigned)K >> 3, chunks_per_page = RING_PAGE / 16u;  // 16-byte chunks
  const unsigned pages = ring_pages_of(r.bytes);
  float* parts = ring_parts();
  for (int row = lane; row < rows; row += 32) parts[row * NWARPS + warp] = 0.f;  // this warp's own slots
  __syncwarp();
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  for (unsigned k = 0; k < pages; ++k) {
    const unsigned seq = r.base + k;
    const bool landed = stage_wait(&r.bar[seq % MK_RING], (seq / MK_RING) & 1u, timeout_ns);
    if (__syncthreads_or(!landed)) return false;
    const uint4* page = reinterpret_cast<const uint4*>(ring_page(seq));
    const unsigned first = k * chunks_per_page;  // the page's first chunk in the tile
    const unsigned n = min(chunks_per_page, (r.bytes >> 4) - first);
    float acc = 0.f;
    int acc_row = -1;
#pragma unroll
    for (unsigned j = 0; j < chunks_per_page / THREADS; ++j) {
      const unsigned c = threadIdx.x + j * THREADS;  // warp-uniform: the warp's chunks are one row's
      if (c - lane >= n) break;
      const unsigned g = first + c, row = g / cpr, col = g - row * cpr;
      const float d = c < n ? dot8(page[c], x4[2 * col], x4[2 * col + 1]) : 0.f;
      if ((int)row != acc_row) {
        if (acc_row >= 0) {
          const float s = warp_sum(acc);
          if (lane == 0) parts[acc_row * NWARPS + warp] += s;
        }
        acc = 0.f;
        acc_row = (int)row;
      }
      acc += d;
    }
    if (acc_row >= 0) {
      const float s = warp_sum(acc);
      if (lane == 0) parts[acc_row * NWARPS + warp] += s;
    }
    __syncthreads();  // every thread is done with the page's slot
    if (threadIdx.x == 0 && r.issued < pages) ring_issue_page(r, r.issued++);
  }
  __syncthreads();  // thread 0's last issue count and every warp's partials are visible
  for (int row = threadIdx.x; row < rows; row += THREADS) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < NWARPS; ++w) s += parts[row * NWARPS + w];
    out[row] = s;
  }
  return true;
}
#endif  // MK_RING

}  // namespace mk
