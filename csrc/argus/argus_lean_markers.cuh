/* argus_lean_markers.cuh: the opt-in lean shared-cursor markers (-DARGUS_LEAN_MARKERS=1), a prototype.
 * Measured on H200 (2026-12-02): ~70 ns per marker, so still opt-in. Built from the SASS anatomy of
 * docs/marker_cost_anatomy.md: on the default shared path the record store waits on a serial chain
 * (warp-index S2R -> cursor LDS -> compares -> branch -> timer read -> store) that the register cursor does not have.
 *
 * What it replaces of argus_cursors.cuh: the shared cursor's emit (the default WarpCursor code stays
 * compiled but unused). The steady-state marker (whole warp, ready cursor, default clock) is straight-line
 * up to one branch (tests/test_lean_markers.py):
 *   - one cursor load pair (two LDS.128 issued back to back: one shared latency); the cursor's 32-bit shared
 *     address depends on nothing the loop changes, so ptxas computes it once per kernel body (in a helper: once
 *     per call);
 *   - the readiness test (gridid, CTA, all 32 lanes active) folded into one predicate with no
 *     short-circuit, so no special-register read waits on the load, then made
 *     warp-uniform by a vote (__all_sync on the call site's mask: VOTE.ALL), so the branch to the slow path
 *     needs no convergence barrier (no BSSY/BSYNC);
 *   - after the branch on the vote: the %globaltimer read and the stores, with no MATCH, MEMBAR or atomic: the
 *     record, the new count (STS) and the ring's written count are predicated stores; a marker outside the
 *     coordinate window stores nothing (so it never overwrites a kept record of a wrapped ring).
 * Timestamp: read after a branch on the cursor load (which waits for the load), as the default markers read it. A
 * read before the load is issued before a bar.sync right ahead of the marker releases the warp (H200, 2026-12-02:
 * tests/fixtures/ws_pipeline's consumers were dated ~0.8 us before the producer's load; the after-the-load order
 * was correct and cost the same, 69.65 vs 70.98 ns per marker, so it is the only order).
 * Slow path (lean_emit_slow, out of line): claim, divergent or partial lane groups, clock64 stamps and the
 * anchored build, as the fast markers do it: each lane group's lowest lane takes its slot(s) with a shared
 * atomic and writes an ARGUS_KIND_LANES record after a marker not run by the whole warp. So every marker of
 * a partial last warp (block size not a multiple of 32), of a clock64 arm and of the anchored build is a
 * slow-path marker.
 * Included by argus_cursors.cuh inside namespace argus_detail, after the helpers it uses. */
#ifndef ARGUS_CURSORS_CUH_
#error "argus_lean_markers.cuh is included by argus_cursors.cuh only"
#endif

/* State bits of the cursor's grid word: a clock64 cursor takes the slow path (SLOW); a claim in progress
 * makes other lane groups of the warp wait (CLAIMING). */
#define ARGUS_LEAN_SLOW_ 0x80000000u
#define ARGUS_LEAN_CLAIMING_ 0x40000000u

/* First half: what the readiness and window tests read; second half: what the slot needs. */
struct __align__(16) LeanCursor {
  argus_u32 grid;        /* low 32 bits of %gridid of the owning launch, ^ state bits */
  argus_u32 cta;         /* linear CTA index of the owner */
  argus_u32 coord_begin; /* coordinate window [begin, begin + span) */
  argus_u32 coord_span;
  argus_u32 count;       /* records produced (the next slot is count & cap_mask) */
  argus_u32 cap_mask;    /* capacity - 1 */
  argus_u64 ring;        /* global address of the ring header, or of the warp's scratch slot */
};
static_assert(sizeof(LeanCursor) == 32, "LeanCursor is two 16-byte shared loads");
static_assert(__builtin_offsetof(LeanCursor, count) == 16, "emit stores the count at [cursor+16]");

__device__ __forceinline__ LeanCursor* lean_cursors() {
  __shared__ LeanCursor cursors[ARGUS_MAX_WARPS_PER_CTA];
  return cursors;
}

/* 32-bit shared address of warp `warp`'s cursor: the array's own address, folded by the compiler. */
__device__ __forceinline__ argus_u32 lean_cursor_addr(argus_u32 warp) {
  return (argus_u32)__cvta_generic_to_shared(lean_cursors() + warp);
}

__device__ __forceinline__ LeanCursor lean_load(argus_u32 addr) {
  LeanCursor c;
  argus_u32 lo, hi;
  asm volatile(
      "ld.shared.v4.u32 {%0, %1, %2, %3}, [%8];\n\t"
      "ld.shared.v4.u32 {%4, %5, %6, %7}, [%8+16];"
      : "=r"(c.grid), "=r"(c.cta), "=r"(c.coord_begin), "=r"(c.coord_span), "=r"(c.count), "=r"(c.cap_mask),
        "=r"(lo), "=r"(hi)
      : "r"(addr)
      : "memory");
  c.ring = ((argus_u64)hi << 32) | lo;
  return c;
}

/* Lanes warp `warp` has at launch (fewer than 32 in the last warp of a block not a multiple of 32). */
__device__ __forceinline__ argus_u32 lean_warp_lanes(argus_u32 warp) {
  const argus_u32 left = blockDim.x * blockDim.y * blockDim.z - 32u * warp;
  return left >= 32u ? 0xFFFFFFFFu : (1u << left) - 1u;
}

/* The cursor of a warp that records, after claim_ring_header found its ring. */
__device__ __forceinline__ void take_ring(LeanCursor& c, const CtlView& v, argus_u32 count, argus_u64 gaddr) {
  c.count = count;
  c.cap_mask = v.capacity - 1;
  c.ring = gaddr;
#if ARGUS_TIMESTAMP != ARGUS_TS_ANCHORED
  if (v.clock_mode == ARGUS_CLOCK_CLOCK64) c.grid ^= ARGUS_LEAN_SLOW_;  // cycle stamps: the slow path
#endif
  c.coord_begin = v.coord_begin;
  c.coord_span = v.coord_end - v.coord_begin;
}

/* Body first, then (after a CTA fence) the grid word that makes the cursor ready. */
__device__ __forceinline__ void lean_publish(argus_u32 addr, const LeanCursor& c) {
  asm volatile(
      "st.shared.u32 [%0+4], %2;\n\t"
      "st.shared.v2.u32 [%0+8], {%3, %4};\n\t"
      "st.shared.v4.u32 [%0+16], {%5, %6, %7, %8};\n\t"
      "membar.cta;\n\t"
      "st.shared.u32 [%0], %1;" ::"r"(addr),
      "r"(c.grid), "r"(c.cta), "r"(c.coord_begin), "r"(c.coord_span), "r"(c.count), "r"(c.cap_mask),
      "r"((argus_u32)c.ring), "r"((argus_u32)(c.ring >> 32))
      : "memory");
}

/* First marker of a warp in a CTA instance (one lane; lean_acquire serialises lane groups). A warp that
 * records nothing gets a cursor on its scratch slot with an empty window: coordinated markers then store
 * nothing, uncoordinated ones write round 32 records of the 64-record slot. */
__device__ __forceinline__ LeanCursor lean_claim(argus_u32 addr, argus_u32 grid, argus_u32 cta, argus_u32 warp) {
  LeanCursor c;
  c.grid = grid;
  c.cta = cta;
  c.coord_begin = 0;
  c.coord_span = 0;
  c.count = 0;
  c.cap_mask = 31u;
  argus_u64 scratch;
  asm("cvta.to.global.u64 %0, %1;"
      : "=l"(scratch)
      : "l"((argus_u64)&argus_scratch[ARGUS_SCRATCH_SLOT_RECORDS * ((cta * warps_in_block() + warp) % ARGUS_SCRATCH_SLOTS)]));
  c.ring = scratch;
  const argus_u32 sm = sm_id();
  const CtlView v = read_ctl(sm, cta, warp);
  claim_ring_header(c, v, sm, cta, warp);
  lean_publish(addr, c);
  return c;
}

/* The warp's ready cursor; a stale one is claimed by the first lane group to win the CAS on its grid word. */
__device__ __forceinline__ LeanCursor lean_acquire(argus_u32 addr, argus_u32 grid, argus_u32 cta, argus_u32 warp) {
  for (;;) {
    const LeanCursor c = lean_load(addr);
    if (c.cta == cta && ((c.grid ^ grid) & ~ARGUS_LEAN_SLOW_) == 0u) {
      asm volatile("membar.cta;" ::: "memory");  // the body was published before the tag
      return lean_load(addr);
    }
    if (c.grid == (grid ^ ARGUS_LEAN_CLAIMING_)) continue;  // another lane group of this warp is claiming
    argus_u32 old;
    asm volatile("atom.shared.cas.b32 %0, [%1], %2, %3;"
                 : "=r"(old) : "r"(addr), "r"(c.grid), "r"(grid ^ ARGUS_LEAN_CLAIMING_) : "memory");
    if (old == c.grid) return lean_claim(addr, grid, cta, warp);
  }
}

/* One 16-byte record at slot `n` of the ring at `hdr`. */
__device__ __forceinline__ void lean_store_record(argus_u64 hdr, argus_u32 n, argus_u32 cap_mask, argus_u32 a,
                                                  argus_u32 b, argus_u64 t, argus_u32 kind) {
  const argus_u64 rec = hdr + ARGUS_RING_HEAD_BYTES_ + (argus_u64)(n & cap_mask) * sizeof(ArgusRecord);
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(rec), "r"(a), "r"(b), "r"((argus_u32)t),
               "r"(stamp_hi(t, kind)) : "memory");
}

/* One lane group's marker on the slow path (run by its lowest lane): the slot(s) by a shared atomic, a
 * lane-group record after the marker when the group is not the whole warp, the header counts by red.max
 * (groups may store them out of order). */
__device__ __forceinline__ void lean_record_slow(argus_u32 kind, argus_u32 id, argus_u32 coord, argus_u32 active,
                                                 argus_u32 lane) {
  const argus_u32 warp = warp_in_cta();
  const argus_u32 addr = lean_cursor_addr(warp);
  const LeanCursor c = lean_acquire(addr, grid_id_lo(), cta_linear(), warp);
  if (!in_window(coord, c.coord_begin, c.coord_span)) return;
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  const argus_u64 t = cycle_counter();
#else
  const argus_u64 t = (c.grid & ARGUS_LEAN_SLOW_) ? cycle_counter() : global_timer();
#endif
  const argus_u32 k = active == lean_warp_lanes(warp) ? 1u : 2u;
  const argus_u32 n = atomicAdd(&lean_cursors()[warp].count, k);
  lean_store_record(c.ring, n, c.cap_mask, id, coord, t, kind);
  if (k == 2u) lean_store_record(c.ring, n + 1u, c.cap_mask, active, lane, t, ARGUS_KIND_LANES);
  asm volatile("red.global.max.u32 [%0], %1;" ::"l"(c.ring + ARGUS_RING_WRITTEN_OFFSET), "r"(n + k) : "memory");
  if (n + k > c.cap_mask + 1u)
    asm volatile("red.global.max.u32 [%0], %1;" ::"l"(c.ring + ARGUS_RING_DROPPED_OFFSET), "r"(n + k - c.cap_mask - 1u)
                 : "memory");
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  store_anchor(c.ring, n, c.cap_mask, t);
  if (k == 2u) store_anchor(c.ring, n + 1u, c.cap_mask, t);
#endif
}

/* Out of line, so its code and registers stay off the fast path. `active` is the call site's mask (an
 * __activemask() here could merge lane groups that the hardware reconverged at this entry); the group
 * leaves together (__syncwarp), so no lane runs the next marker without it. */
__device__ __noinline__ void lean_emit_slow(argus_u32 kind, argus_u32 id, argus_u32 coord, argus_u32 active) {
  const argus_u32 lane = lane_id();
  if (lane == (argus_u32)(__ffs(active) - 1)) lean_record_slow(kind, id, coord, active, lane);
  __syncwarp(active);
}

/* The fast path's stores, predicated on `take` (ready and in the window): the new count, the record, the
 * ring's written count, and its dropped count once the ring has wrapped. */
__device__ __forceinline__ void lean_store(argus_u32 take, argus_u32 addr, const LeanCursor& c, argus_u32 id,
                                           argus_u32 coord, argus_u64 t, argus_u32 kind) {
  const argus_u32 n = c.count;
  const argus_u64 rec = c.ring + ARGUS_RING_HEAD_BYTES_ + (argus_u64)(n & c.cap_mask) * sizeof(ArgusRecord);
  asm volatile(
      "{\n\t.reg .pred p, q;\n\t"
      "setp.ne.u32 p, %0, 0;\n\t"
      "@p st.shared.u32 [%1+16], %2;\n\t"
      "@p st.global.v4.b32 [%3], {%4, %5, %6, %7};\n\t"
      "@p st.global.b32 [%8], %2;\n\t"
      "setp.gt.and.u32 q, %2, %9, p;\n\t"
      "@q st.global.b32 [%10], %11;\n\t}"
      ::"r"(take), "r"(addr), "r"(n + 1u), "l"(rec), "r"(id), "r"(coord), "r"((argus_u32)t), "r"(stamp_hi(t, kind)),
        "l"(c.ring + ARGUS_RING_WRITTEN_OFFSET), "r"(c.cap_mask + 1u), "l"(c.ring + ARGUS_RING_DROPPED_OFFSET),
        "r"(n - c.cap_mask)
      : "memory");
}

/* One marker. Every lane loads the cursor (a broadcast), computes the same values and makes the same
 * stores (one transaction each), so the lanes of a converged warp must agree on the coordinate, as with
 * the register cursor. A marker that is not ready (stale cursor, partial warp, clock64, anchored build)
 * stores nothing here and goes to lean_emit_slow. */
__device__ __forceinline__ void emit(argus_u32 kind, argus_u32 id, argus_u32 coord) {
  const argus_u32 active = __activemask();
  const argus_u32 addr = lean_cursor_addr(warp_in_cta());
  const LeanCursor c = lean_load(addr);
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  const bool ready = false;  // cycle stamps and anchors: the slow path
#else
  /* One test, no short-circuit: the CTA index and gridid are read whatever the load returns. */
  const bool ready = __all_sync(active, ((c.grid ^ grid_id_lo()) | (c.cta ^ cta_linear()) | ~active) == 0u);
#endif
  const argus_u32 take = (argus_u32)ready & (argus_u32)in_window(coord, c.coord_begin, c.coord_span);
  /* The stamp is read after the branch on the cursor load, which waits for the load (and so for a barrier before it). */
  if (__builtin_expect(ready, 1)) {
    lean_store(take, addr, c, id, coord, global_timer(), kind);
    return;
  }
  lean_emit_slow(kind, id, coord, active);
}
