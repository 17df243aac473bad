/* argus_lean_markers.cuh: the opt-in lean shared-cursor markers (-DARGUS_LEAN_MARKERS=1).
 * Measured on the H200 at 8000724 (the first design of this file): 70 ns per marker in a kernel body, 109 ns in a
 * __noinline__ helper (docs/marker_cost_anatomy.md). This version is NOT RUN ON A GPU YET.
 *
 * What it replaces of argus_cursors.cuh: the shared cursor's emit (the default WarpCursor code stays compiled but
 * unused). Per warp a 32-byte cursor in shared memory (LeanCursor), plus each lane's own copy of the warp's record
 * count (lean_counts): 5 KiB of static shared memory in all.
 *
 * Steady state (whole warp, ready cursor, default clock; tests/test_lean_markers.py):
 *   - the cursor and the lane's count are plain C++ shared-memory reads at the start of a marker and plain writes at
 *     its end, with only asm that has no "memory" clobber between, so within a function the compiler keeps them in
 *     registers from one marker to the next: no shared load in a kernel body's loop, and in a helper only at its
 *     first marker (the previous design loaded the cursor at every marker);
 *   - the readiness test (gridid, CTA, all 32 lanes active, no stale count, not a clock64 arm) is one predicate made
 *     warp-uniform by a vote (__all_sync on the call site's mask: VOTE.ALL), so the branch to the slow path needs no
 *     convergence barrier; the stamp (%globaltimer) is read before the vote;
 *   - the record and the ring's written and dropped counts are predicated stores; a marker outside the coordinate
 *     window stores nothing (so it never overwrites a kept record of a wrapped ring).
 * Lane copies: a lane group that runs a marker without the rest of the warp (divergence, a partial last warp)
 * takes the slow path and then marks its lanes' counts stale; the other lanes' register copies are then behind,
 * so the next whole-warp marker sees a stale lane in its vote and takes the slow path too, which refreshes every
 * lane. So lanes of a warp in different regions are recorded per lane group, never with a stale slot.
 * -DARGUS_LEAN_GUARDED_STAMP=1 reads the stamp after the branch on the readiness vote instead (the default markers
 * read it after a branch on the cursor load, for the ws_pipeline barrier case), so a GPU run can price the guard.
 * Slow path (lean_emit_slow, out of line): claim, divergent or partial lane groups, clock64 stamps and the anchored
 * build: each lane group's lowest lane takes its slot(s) with a shared atomic and writes an ARGUS_KIND_LANES record
 * after a marker not run by the whole warp. So every marker of a partial last warp (block size not a multiple of
 * 32), of a clock64 arm and of the anchored build is a slow-path marker.
 * Included by argus_cursors.cuh inside namespace argus_detail, after the helpers it uses. */
#ifndef ARGUS_CURSORS_CUH_
#error "argus_lean_markers.cuh is included by argus_cursors.cuh only"
#endif

#ifndef ARGUS_LEAN_GUARDED_STAMP
#define ARGUS_LEAN_GUARDED_STAMP 0
#endif

/* A clock64 cursor takes the slow path (a bit of its cap_mask); a claim in progress makes other lane groups of the
 * warp wait (a state bit of its grid word). */
#define ARGUS_LEAN_CLOCK64_ 0x80000000u
#define ARGUS_LEAN_CLAIMING_ 0x40000000u

/* First half: what the readiness and window tests read; second half: what the slot needs. */
struct __align__(16) LeanCursor {
  argus_u32 grid;        /* low 32 bits of %gridid of the owning launch (^ ARGUS_LEAN_CLAIMING_ while claimed) */
  argus_u32 cta;         /* linear CTA index of the owner */
  argus_u32 coord_begin; /* coordinate window [begin, begin + span) */
  argus_u32 coord_span;
  argus_u32 count;       /* records produced (the next slot is count & cap_mask) */
  argus_u32 cap_mask;    /* capacity - 1 (host caps capacity at 2^26), | ARGUS_LEAN_CLOCK64_ for cycle stamps */
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
  if (v.clock_mode == ARGUS_CLOCK_CLOCK64) c.cap_mask |= ARGUS_LEAN_CLOCK64_;  // cycle stamps: the slow path
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
    if (c.cta == cta && c.grid == grid) {
      /* The body was published before the tag (membar.cta there); an acquire-release fence here is enough to read
       * it after the tag (MEMBAR.ALL.CTA, not the sequentially consistent MEMBAR.SC.CTA). */
      asm volatile("fence.acq_rel.cta;" ::: "memory");
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
  const argus_u64 t = (c.cap_mask & ARGUS_LEAN_CLOCK64_) ? cycle_counter() : global_timer();
#endif
  const argus_u32 cap_mask = c.cap_mask & ~ARGUS_LEAN_CLOCK64_;
  const argus_u32 k = active == lean_warp_lanes(warp) ? 1u : 2u;
  const argus_u32 n = atomicAdd(&lean_cursors()[warp].count, k);
  lean_store_record(c.ring, n, cap_mask, id, coord, t, kind);
  if (k == 2u) lean_store_record(c.ring, n + 1u, cap_mask, active, lane, t, ARGUS_KIND_LANES);
  asm volatile("red.global.max.u32 [%0], %1;" ::"l"(c.ring + ARGUS_RING_WRITTEN_OFFSET), "r"(n + k) : "memory");
  if (n + k > cap_mask + 1u)
    asm volatile("red.global.max.u32 [%0], %1;" ::"l"(c.ring + ARGUS_RING_DROPPED_OFFSET), "r"(n + k - cap_mask - 1u)
                 : "memory");
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  store_anchor(c.ring, n, cap_mask, t);
  if (k == 2u) store_anchor(c.ring, n + 1u, cap_mask, t);
#endif
}

/* Out of line, so its code and registers stay off the fast path. `active` is the call site's mask (an
 * __activemask() here could merge lane groups that the hardware reconverged at this entry); the group
 * leaves together (__syncwarp), so no lane runs the next marker without it. Returns the warp's cursor as
 * it is then (ready: claimed for this launch and CTA). */
__device__ __noinline__ LeanCursor lean_emit_slow(argus_u32 kind, argus_u32 id, argus_u32 coord, argus_u32 active) {
  const argus_u32 lane = lane_id();
  if (lane == (argus_u32)(__ffs(active) - 1)) lean_record_slow(kind, id, coord, active, lane);
  __syncwarp(active);
  return lean_load(lean_cursor_addr(warp_in_cta()));
}

/* Each lane's own copy of the warp's record count (the fast path's count), one word per thread of the CTA
 * (4 KiB): written only by its lane, so a lane group can refresh its copies while another group of the
 * warp is on the slow path. LEAN_STALE_: the lane ran the slow path without the rest of the warp, so the
 * copies of the warp's other lanes may be behind. */
#define ARGUS_LEAN_STALE_ 0xFFFFFFFFu
__device__ __forceinline__ argus_u32* lean_counts() {
  __shared__ argus_u32 counts[ARGUS_MAX_WARPS_PER_CTA * 32];
  return counts;
}

__device__ __forceinline__ argus_u32 thread_in_cta() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

/* The fast path's global stores, all predicated on `take` alone: the record, and the ring's written and dropped
 * counts (dropped = max(n + 1 - capacity, 0): a select, not a second predicate). No "memory" clobber: the C++ code
 * never reads the ring. */
__device__ __forceinline__ void lean_store(argus_u32 take, const LeanCursor& c, argus_u32 n, argus_u32 id,
                                           argus_u32 coord, argus_u64 t, argus_u32 kind) {
  const argus_u64 rec = c.ring + ARGUS_RING_HEAD_BYTES_ + (argus_u64)(n & c.cap_mask) * sizeof(ArgusRecord);
  const argus_u32 dropped = n + 1u > c.cap_mask + 1u ? n - c.cap_mask : 0u;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.u32 p, %0, 0;\n\t"
      "@p st.global.v4.b32 [%1], {%2, %3, %4, %5};\n\t"
      "@p st.global.b32 [%6], %7;\n\t"
      "@p st.global.b32 [%8], %9;\n\t}"
      ::"r"(take), "l"(rec), "r"(id), "r"(coord), "r"((argus_u32)t), "r"(stamp_hi(t, kind)),
        "l"(c.ring + ARGUS_RING_WRITTEN_OFFSET), "r"(n + 1u), "l"(c.ring + ARGUS_RING_DROPPED_OFFSET), "r"(dropped));
}

/* The cursor's fields written back one by one with plain stores (the count is the caller's business), so the
 * compiler knows the memory again after the marker's asm. */
__device__ __forceinline__ void lean_write_back(LeanCursor* cur, const LeanCursor& c) {
  cur->grid = grid_id_lo();
  cur->cta = cta_linear();
  cur->coord_begin = c.coord_begin;
  cur->coord_span = c.coord_span;
  cur->cap_mask = c.cap_mask;
  cur->ring = c.ring;
}

/* The fields the fast path reads, one by one (a struct copy was loaded as wider words, which the compiler did not
 * forward from the 32-bit stores: nvcc 13.0). The warp's count is not read: the lane's own copy is. */
__device__ __forceinline__ LeanCursor lean_read(const LeanCursor* cur) {
  LeanCursor c;
  c.grid = cur->grid;
  c.cta = cur->cta;
  c.coord_begin = cur->coord_begin;
  c.coord_span = cur->coord_span;
  c.count = 0u;
  c.cap_mask = cur->cap_mask;
  c.ring = cur->ring;
  return c;
}

/* After a slow-path call: the calling lanes write what it returned back (the fixed fields, which hold the same
 * bytes once the cursor is ready; the count to the lane's own copy, or "stale" after a partial group's marker),
 * so the compiler knows the memory again on this path too and the next marker needs no shared load. The warp's
 * count is not written here: another lane group may be taking slots with atomics. */
__device__ __forceinline__ void lean_after_slow(LeanCursor* cur, argus_u32* count, const LeanCursor& r, bool whole) {
  lean_write_back(cur, r);
  *count = whole ? r.count : ARGUS_LEAN_STALE_;
}

/* One marker. The cursor and the lane's count are read first and written back last with plain C++ accesses,
 * and only asm without a "memory" clobber sits between, so within a function the compiler keeps them in
 * registers from one marker to the next (it reloads them after anything that may write shared memory: a call,
 * a barrier, an atomic, and an asm volatile between one marker's write-back and the next marker's read, which
 * is why the stamp is read after the cursor). A converged warp's lanes hold the same values unless a lane group
 * ran markers without the rest of the warp: then its lanes' counts are marked stale, and the next whole-warp
 * marker takes the slow path. Fast path: the whole warp, its cursor ready (this launch and CTA, the default
 * clock), no stale count: one VOTE.ALL, one uniform branch on it (taken: ptxas lays the slow-path call out in
 * line), then the predicated record stores and the write-back. */
__device__ __forceinline__ void emit(argus_u32 kind, argus_u32 id, argus_u32 coord) {
  const argus_u32 tid = thread_in_cta();
  LeanCursor* cur = lean_cursors() + (tid >> 5);
  argus_u32* count = lean_counts() + tid;
  const LeanCursor c = lean_read(cur);
  const argus_u32 n = *count;
  const argus_u32 active = __activemask();
#if !ARGUS_LEAN_GUARDED_STAMP
  /* Before the vote: nothing it waits for is on the chain (as the register cursor's read). */
  const argus_u64 t = global_timer();
#endif
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  const bool ready = false;  // cycle stamps and anchors: the slow path
#else
  /* One test, no short-circuit: the CTA index and gridid are read whatever the cursor holds. */
  const argus_u32 bad = (c.grid ^ grid_id_lo()) | (c.cta ^ cta_linear()) | ~active | (c.cap_mask & ARGUS_LEAN_CLOCK64_);
  const bool ready = __all_sync(active, bad == 0u && n != ARGUS_LEAN_STALE_);
#endif
  const argus_u32 take = (argus_u32)ready & (argus_u32)in_window(coord, c.coord_begin, c.coord_span);
  if (__builtin_expect(ready, 1)) {
#if ARGUS_LEAN_GUARDED_STAMP
    /* The stamp is read after the branch on the readiness vote. */
    const argus_u64 t = global_timer();
#endif
    lean_store(take, c, n, id, coord, t, kind);
    /* The whole warp is here, so no other lane group writes the cursor: write it all back (the count is the
     * warp's, for the slow path). */
    lean_write_back(cur, c);
    cur->count = n + take;
    *count = n + take;
    return;
  }
  const LeanCursor r = lean_emit_slow(kind, id, coord, active);
  lean_after_slow(cur, count, r, active == lean_warp_lanes(tid >> 5));
}
