// Weight page ring (opt-in, MK_RING = pages per CTA; 0 = off, the default build has none of this), and the
// loader warp's ring (opt-in, MK_LOADER = pages per CTA, row 31: at the end of this file).
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
#include "sync.cuh"

namespace mk {

#if MK_RING && MK_LOADER
#error "MK_RING (pages per tile at ticket time) and MK_LOADER (a loader warp's ring) share the ring: one or the other"
#endif
#if MK_RING || MK_LOADER
constexpr unsigned RING_PAGE = 16u * 1024u;
constexpr int RING_SLOTS = MK_RING ? MK_RING : MK_LOADER;
constexpr int RING_PARTS_FLOATS = MAX_TILE_ROWS * NWARPS;  // per-(row, warp) partial sums, after the pages

__device__ __forceinline__ unsigned char* ring_page(unsigned seq) {
  return stage_buffer + (size_t)(seq % RING_SLOTS) * RING_PAGE;
}

__device__ __forceinline__ float* ring_parts() {
  return reinterpret_cast<float*>(stage_buffer + (size_t)RING_SLOTS * RING_PAGE);
}

__device__ __forceinline__ unsigned ring_pages_of(unsigned bytes) { return (bytes + RING_PAGE - 1) / RING_PAGE; }

// One thread: bulk-copy `n` bytes (a multiple of 16, <= RING_PAGE) from global `src` into page `dst`, completing
// on `bar` (arrival + tx bytes).
__device__ __forceinline__ void ring_copy_page(unsigned long long* bar, unsigned char* dst, const char* src, unsigned n) {
  // The slot's earlier generic-proxy reads (behind a barrier or an mbarrier) come before the copy engine's writes.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(n) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(src), "r"(n), "r"(smem_addr(bar)) : "memory");
}

// Every consumer thread: its 16-byte chunks of one landed page (the page holds the tile's chunks first ..
// first + n - 1; cpr chunks per row). A warp's 32 lanes read 32 consecutive chunks of one row, so lane 0 adds the
// warp's sum of that row piece into parts[row * NWARPS + warp]: per warp, pages in order.
__device__ __forceinline__ void ring_dot_page(const uint4* page, unsigned first, unsigned n, unsigned cpr,
                                              const float4* x4, float* parts) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float acc = 0.f;
  int acc_row = -1;
#pragma unroll
  for (unsigned j = 0; j < RING_PAGE / 16u / THREADS; ++j) {
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
}

// Every consumer thread, after a barrier that published every warp's partials: out[row] in a fixed warp order.
__device__ __forceinline__ void ring_sum_parts(int rows, float* __restrict__ out) {
  const float* parts = ring_parts();
  for (int row = threadIdx.x; row < rows; row += THREADS) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < NWARPS; ++w) s += parts[row * NWARPS + w];
    out[row] = s;
  }
}

// Every consumer thread, before a tile's first page: zero this warp's own partial slots.
__device__ __forceinline__ float* ring_zero_parts(int rows) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* parts = ring_parts();
  for (int row = lane; row < rows; row += 32) parts[row * NWARPS + warp] = 0.f;
  __syncwarp();
  return parts;
}
#endif  // MK_RING || MK_LOADER

#if MK_RING
static_assert(MK_RING >= 1 && MK_RING <= 8, "MK_RING: 1 to 8 pages per CTA");

struct Ring {
  unsigned long long bar[MK_RING];  // one mbarrier per slot (arrival count 1 + the copy's bytes)
  const char* src;                  // the current tile's weights
  unsigned bytes;                   // ... and their size (0: no tile in the ring)
  unsigned base;                    // sequence number of the tile's first page
  unsigned issued;                  // pages of the tile issued so far
};

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
  const unsigned seq = r.base + k, off = k * RING_PAGE;
  ring_copy_page(&r.bar[seq % MK_RING], ring_page(seq), r.src + off, min(RING_PAGE, r.bytes - off));
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
  const unsigned cpr = (unsigned)K >> 3, chunks_per_page = RING_PAGE / 16u;  // 16-byte chunks
  const unsigned pages = ring_pages_of(r.bytes);
  float* parts = ring_zero_parts(rows);
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  for (unsigned k = 0; k < pages; ++k) {
    const unsigned seq = r.base + k;
    const bool landed = stage_wait(&r.bar[seq % MK_RING], (seq / MK_RING) & 1u, timeout_ns);
    if (MK_SYNC_OR(!landed)) return false;
    const unsigned first = k * chunks_per_page;  // the page's first chunk in the tile
    ring_dot_page(reinterpret_cast<const uint4*>(ring_page(seq)), first, min(chunks_per_page, (r.bytes >> 4) - first),
                  cpr, x4, parts);
    MK_SYNC();  // every thread is done with the page's slot
    if (threadIdx.x == 0 && r.issued < pages) ring_issue_page(r, r.issued++);
  }
  MK_SYNC();  // thread 0's last issue count and every warp's partials are visible
  ring_sum_parts(rows, out);
  return true;
}
#endif  // MK_RING

#if MK_LOADER
// The loader warp's ring (row 31, megakernel/NOTES.md "Ready: row 31"). Static tickets make a worker's future tiles
// known, so one lane of a 9th warp (megakernel.cu: loader_run) walks the same tickets as its consumers and streams
// every ring tile's weights into MK_LOADER pages, as far ahead as free pages allow, across tickets and across the
// consumers' dependency waits (it never waits on a counter). Page n (a per-CTA sequence over all ring tiles' pages,
// each tile starting on a new page) goes to slot n % MK_LOADER; full[slot] completes phase (n / MK_LOADER) & 1 when
// it lands, empty[slot] when all NWARPS consumer warps have read it (each warp releases a page on its own: no CTA
// barrier per page). Ring tiles: weights whose rows are whole multiples of 256 bf16 (ring_dot_page's mapping); the
// loader and the consumers apply the same rule (loader_tile) to the same tiles.
static_assert(MK_LOADER >= 1 && MK_LOADER <= 16, "MK_LOADER: 1 to 16 pages per CTA");

struct Loader {
  unsigned long long full[MK_LOADER];   // page landed: the loader's arrival + the copy's bytes
  unsigned long long empty[MK_LOADER];  // page read: one arrival per consumer warp
  unsigned seq;                         // consumers: sequence number of the next ring tile's first page
  volatile int stop;                    // consumers stopped (an error: they left the ticket loop or lost a page)
};

__device__ __forceinline__ bool loader_tile(unsigned bytes, unsigned row_bytes) {
  return bytes > 0 && (row_bytes & 511u) == 0;
}

// Thread 0, once per CTA, before the CTA-wide barrier that starts the loader.
__device__ __forceinline__ void loader_init(Loader& l) {
  for (int i = 0; i < MK_LOADER; ++i) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&l.full[i])) : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&l.empty[i])), "n"(NWARPS) : "memory");
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  l.seq = 0;
  l.stop = 0;
}

// The loader: wait until slot `slot` completed phase `phase` of its consumers' releases. False past the deadline
// or once the consumers stopped.
__device__ __forceinline__ bool loader_wait_empty(Loader& l, unsigned slot, unsigned phase, unsigned long long timeout_ns) {
  unsigned long long start = 0;
  for (unsigned spins = 0;; ++spins) {
    if (mbar_try_wait(&l.empty[slot], phase)) return true;
    if (l.stop) return false;
    const unsigned long long now = globaltimer_ns();
    if (spins == 0) start = now;
    else if (now - start > timeout_ns) return false;
  }
}

// The loader, before it exits: the pages still in flight land first (no copy outlives the CTA). Pages below
// issued - MK_LOADER were read by the consumers already (their slots were released before reuse).
__device__ __forceinline__ void loader_drain(Loader& l, unsigned issued, unsigned long long timeout_ns) {
  for (unsigned n = issued > (unsigned)MK_LOADER ? issued - MK_LOADER : 0u; n < issued; ++n)
    stage_wait(&l.full[n % MK_LOADER], (n / MK_LOADER) & 1u, timeout_ns);
}

// Every consumer thread: out[row] = W[row, :] . xs for the next ring tile (`bytes` = rows x K bf16, K a multiple
// of 256), page by page as they land; each warp releases a page once it has read it. One barrier at the end.
// False (every thread) when a page did not land by the deadline, and from then on (the page sequence is lost: the
// loader stops too, and the tiles after it fail at once instead of each waiting out the deadline).
__device__ __noinline__ bool loader_gemv(Loader& l, unsigned bytes, int K, int rows, const float* __restrict__ xs,
                                         float* __restrict__ out, unsigned long long timeout_ns) {
  if (l.stop) return false;  // the same for every thread: written before the barrier after the failed tile
  const unsigned cpr = (unsigned)K >> 3, chunks_per_page = RING_PAGE / 16u, base = l.seq;
  const unsigned pages = ring_pages_of(bytes);
  float* parts = ring_zero_parts(rows);
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  bool ok = true;
  for (unsigned k = 0; k < pages; ++k) {
    const unsigned seq = base + k, slot = seq % MK_LOADER;
    if (!__all_sync(0xffffffffu, stage_wait(&l.full[slot], (seq / MK_LOADER) & 1u, timeout_ns))) {  // warp-uniform
      ok = false;
      break;
    }
    const unsigned first = k * chunks_per_page;
    ring_dot_page(reinterpret_cast<const uint4*>(ring_page(seq)), first, min(chunks_per_page, (bytes >> 4) - first), cpr,
                  x4, parts);
    __syncwarp();  // the warp's reads of the page come before its release
    if ((threadIdx.x & 31) == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(&l.empty[slot])) : "memory");
  }
  if (MK_SYNC_OR(!ok)) {  // every warp's partials are visible, and every thread has read l.seq and l.stop
    if (threadIdx.x == 0) l.stop = 1;
    return false;
  }
  ring_sum_parts(rows, out);
  if (threadIdx.x == 0) l.seq = base + pages;
  return true;
}
#endif  // MK_LOADER

}  // namespace mk
