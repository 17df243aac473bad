/* argus_fast_markers.cuh: the opt-in fast shared-cursor markers (-DARGUS_FAST_MARKERS=1), work in progress.
 * NOT VERIFIED ON A GPU: on one H200 (2026-12-02, docs/gpu_runs/2026-12-02-0001-session7) the version of
 * bcbaa12 + 9f24c2a failed 4 marker GPU tests and the version of c5419d9 failed 15 (extra lane-group
 * records on every shared-cursor path). This is c5419d9's version with one fix for that failure (emit_slow:
 * the lane group leaves together), itself not yet run on a GPU. The default markers (argus_cursors.cuh
 * without this define) are the GPU-verified ones of a58e52b.
 *
 * What it replaces of argus_cursors.cuh: the shared cursor (WarpCursor, its claim, load and emit). A fast
 * path of one cursor load pair, one branch and unpredicated stores for a converged whole warp at a ready
 * cursor; everything else (claim, divergent or partial lane groups, clock64) in an out-of-line emit_slow,
 * where lane groups of a warp take their own slots and write an ARGUS_KIND_LANES record after a marker
 * that was not run by the whole warp (argus_rt/trace/decode.py pairs each group's BEGIN/END).
 * Included by argus_cursors.cuh inside namespace argus_detail, after the helpers it uses. */
#ifndef ARGUS_CURSORS_CUH_
#error "argus_fast_markers.cuh is included by argus_cursors.cuh only"
#endif

/* Per-warp cursor in shared memory. It belongs to one CTA instance of one launch: (grid, cta)
 * identify that instance, so no kernel prologue is needed; a stale cursor (left by an earlier CTA
 * or launch on this SM) fails the check and the warp claims its ring again. `grid` also carries the
 * cursor's state: the fast path (emit) matches only a ready cursor of the default clock, so a claim
 * in progress (ARGUS_CUR_CLAIMING_) and clock64 stamps (ARGUS_CUR_SLOW_) take the slow path. A stale
 * cursor whose gridid differs from this launch's in exactly those bits would be taken for ready
 * (2^30 launches apart, with the same CTA index). Loaded with two 16-byte shared loads issued back to
 * back, so the fast path waits for one shared-memory latency. */
#define ARGUS_CUR_SLOW_ 0x80000000u
#define ARGUS_CUR_CLAIMING_ 0x40000000u
struct __align__(16) WarpCursor {
  argus_u32 grid;        /* low 32 bits of %gridid of the launch that owns this cursor, ^ state bits */
  argus_u32 count;       /* records produced so far (the next slot is count & cap_mask) */
  argus_u32 cap_mask;    /* capacity - 1 */
  argus_u32 coord_begin; /* iteration window [begin, begin + span) copied from argus_ctl at claim */
  argus_u32 cta;         /* linear CTA index of the owner; in the second half, so the fast path's test
                            needs both loads and ptxas issues them together */
  argus_u32 coord_span;
  argus_u64 ring;        /* global address of the ring header; of the warp's scratch slot when it records nothing */
};
static_assert(sizeof(WarpCursor) == 32, "WarpCursor is two 16-byte shared loads");

__device__ __forceinline__ WarpCursor* warp_cursors() {
  __shared__ WarpCursor cursors[ARGUS_MAX_WARPS_PER_CTA];
  return cursors;
}

/* Lanes warp `warp` of this CTA has at launch: all 32, or fewer in the last warp of a block whose size
 * is not a multiple of 32. A marker run by exactly these lanes is the warp's own (no lane-group record). */
__device__ __forceinline__ argus_u32 warp_lanes(argus_u32 warp) {
  const argus_u32 left = blockDim.x * blockDim.y * blockDim.z - 32u * warp;
  return left >= 32u ? 0xFFFFFFFFu : (1u << left) - 1u;
}

/* Write a claimed cursor: its body first, then (after a CTA fence) the grid word that makes it ready,
 * so a lane group that sees the ready tag also sees the body. */
__device__ __forceinline__ void publish_cursor(argus_u32 addr, const WarpCursor& c) {
  asm volatile(
      "st.shared.u32 [%0+4], %2;\n\t"
      "st.shared.v2.u32 [%0+8], {%3, %4};\n\t"
      "st.shared.v4.u32 [%0+16], {%5, %6, %7, %8};\n\t"
      "membar.cta;\n\t"
      "st.shared.u32 [%0], %1;" ::"r"(addr),
      "r"(c.grid), "r"(c.count), "r"(c.cap_mask), "r"(c.coord_begin), "r"(c.cta), "r"(c.coord_span),
      "r"((argus_u32)c.ring), "r"((argus_u32)(c.ring >> 32))
      : "memory");
}

/* Global address of this warp's scratch slot (argus_scratch): where a warp that records nothing writes. */
__device__ __forceinline__ argus_u64 scratch_slot(argus_u32 cta, argus_u32 warp) {
  argus_u64 gaddr;
  asm("cvta.to.global.u64 %0, %1;"
      : "=l"(gaddr)
      : "l"((argus_u64)&argus_scratch[ARGUS_SCRATCH_SLOT_RECORDS * ((cta * warps_in_block() + warp) % ARGUS_SCRATCH_SLOTS)]));
  return gaddr;
}

/* The cursor of a warp that records, after claim_ring_header found its ring (c.grid is still this launch's). */
__device__ __forceinline__ void take_ring(WarpCursor& c, const CtlView& v, argus_u32 count, argus_u64 gaddr) {
  c.count = count;
  c.cap_mask = v.capacity - 1;
  c.ring = gaddr;
#if ARGUS_TIMESTAMP != ARGUS_TS_ANCHORED
  if (v.clock_mode == ARGUS_CLOCK_CLOCK64) c.grid ^= ARGUS_CUR_SLOW_;  // cycle stamps: the slow path
#endif
  c.coord_begin = v.coord_begin;
  c.coord_span = v.coord_end - v.coord_begin;
}

/* First marker of a warp in a CTA instance: apply the filters, find the ring, (re)start it
 * (claim_ring_header), publish the cursor. Runs once per warp per CTA instance, on one lane
 * (acquire_cursor serialises lane groups).
 * A warp that records nothing gets a cursor on its scratch slot (32 records: header offsets and
 * records stay inside the 64-record slot), so its markers run the same code as a recording warp. */
__device__ __forceinline__ WarpCursor claim_ring(argus_u32 cur_addr, argus_u32 grid, argus_u32 cta, argus_u32 warp) {
  WarpCursor c;
  c.grid = grid;
  c.cta = cta;
  c.count = 0;
  c.cap_mask = 31u;
  c.ring = scratch_slot(cta, warp);
  c.coord_begin = 0;
  c.coord_span = 0;
  const argus_u32 sm = sm_id();
  const CtlView v = read_ctl(sm, cta, warp);
  claim_ring_header(c, v, sm, cta, warp);
  publish_cursor(cur_addr, c);
  return c;
}

/* Both halves of the cursor in one statement, so the fast path waits for one shared latency. */
__device__ __forceinline__ WarpCursor load_cursor(const WarpCursor* cur) {
  WarpCursor c;
  argus_u32 ring_lo, ring_hi;
  const argus_u32 addr = shared_address(cur);
  asm volatile(
      "ld.shared.v4.u32 {%0, %1, %2, %3}, [%8];\n\t"
      "ld.shared.v4.u32 {%4, %5, %6, %7}, [%8+16];"
      : "=r"(c.grid), "=r"(c.count), "=r"(c.cap_mask), "=r"(c.coord_begin), "=r"(c.cta), "=r"(c.coord_span),
        "=r"(ring_lo), "=r"(ring_hi)
      : "r"(addr)
      : "memory");
  c.ring = ((argus_u64)ring_hi << 32) | ring_lo;
  return c;
}

/* The warp's ready cursor, claimed by this lane if it is stale. Run by one lane of each lane group
 * that reaches a marker: divergent groups of one warp can reach their first marker together, so the
 * claim is taken with a compare-and-swap on the grid word (only this warp's groups use this slot of
 * this CTA's shared memory) and the other groups wait while it reads "claiming". */
__device__ __forceinline__ WarpCursor acquire_cursor(WarpCursor* cur, argus_u32 grid, argus_u32 cta, argus_u32 warp) {
  const argus_u32 addr = shared_address(cur);
  for (;;) {
    const WarpCursor c = load_cursor(cur);
    if (c.cta == cta && ((c.grid ^ grid) & ~ARGUS_CUR_SLOW_) == 0u) {
      asm volatile("membar.cta;" ::: "memory");  // the body was published before the tag
      return load_cursor(cur);
    }
    if (c.grid == (grid ^ ARGUS_CUR_CLAIMING_)) continue;  // another lane group of this warp is claiming
    argus_u32 old;
    asm volatile("atom.shared.cas.b32 %0, [%1], %2, %3;"
                 : "=r"(old) : "r"(addr), "r"(c.grid), "r"(grid ^ ARGUS_CUR_CLAIMING_) : "memory");
    if (old == c.grid) return claim_ring(addr, grid, cta, warp);
  }
}

/* The slow path's stamp, read once the cursor is acquired: after the ring's claim (by this or another lane
 * group of the warp), so no record of a ring comes before its first anchor (anchored build), and a first
 * marker's time leaves out the claim. Cycle stamps under clock64 (the cursor's slow tag) or the anchored build. */
__device__ __forceinline__ argus_u64 slow_stamp(const WarpCursor& c) {
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  return cycle_counter();
#else
  return (c.grid & ARGUS_CUR_SLOW_) ? cycle_counter() : global_timer();
#endif
}

/* A marker that is not the fast path's: a divergent or partial warp, a cursor to claim, clock64
 * stamps. `active` is the lane group as its own call site saw it (__activemask() there): this function is
 * shared by every marker, and lane groups of one warp that call it from different markers can be run
 * together in it (the hardware may reconverge them at its entry), so an __activemask() taken here would
 * merge them into one group. One lane per group (its lowest lane) runs this, so several lanes, each
 * with its own group, marker and coordinate, may run what follows at once; each takes its slot(s) with a
 * shared-memory atomic. A group that is not the whole warp (warp_lanes) follows its record with an
 * ARGUS_KIND_LANES record {its mask, its lowest lane, same time}: the decoder pairs each group's
 * BEGIN/END by it. The header counts grow with red.max (groups may store them out of order). */
__device__ __forceinline__ void record_slow(argus_u32 kind, argus_u32 id, argus_u32 coord, argus_u32 active,
                                            argus_u32 lane) {
  const argus_u32 warp = warp_in_cta();
  WarpCursor* cur = warp_cursors() + warp;
  const WarpCursor c = acquire_cursor(cur, grid_id_lo(), cta_linear(), warp);
  if (!in_window(coord, c.coord_begin, c.coord_span)) return;
  const argus_u64 t = slow_stamp(c);
  const argus_u32 k = active == warp_lanes(warp) ? 1u : 2u;
  const argus_u32 n = atomicAdd(&cur->count, k);  // lane groups of the warp each get their own slots
  const argus_u64 hdr = c.ring;
  const argus_u64 rec = hdr + ARGUS_RING_HEAD_BYTES_ + (argus_u64)(n & c.cap_mask) * sizeof(ArgusRecord);
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(rec), "r"(id), "r"(coord), "r"((argus_u32)t),
               "r"(stamp_hi(t, kind)) : "memory");
  if (k == 2u) {
    const argus_u64 lanes = hdr + ARGUS_RING_HEAD_BYTES_ + (argus_u64)((n + 1u) & c.cap_mask) * sizeof(ArgusRecord);
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(lanes), "r"(active), "r"(lane), "r"((argus_u32)t),
                 "r"(stamp_hi(t, ARGUS_KIND_LANES)) : "memory");
  }
  asm volatile("red.global.max.u32 [%0], %1;" ::"l"(hdr + ARGUS_RING_WRITTEN_OFFSET), "r"(n + k) : "memory");
  if (n + k > c.cap_mask + 1u)
    asm volatile("red.global.max.u32 [%0], %1;" ::"l"(hdr + ARGUS_RING_DROPPED_OFFSET), "r"(n + k - c.cap_mask - 1u) : "memory");
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  store_anchor(hdr, n, c.cap_mask, t);
  if (k == 2u) store_anchor(hdr, n + 1u, c.cap_mask, t);
#endif
}

/* The slow path of one lane group, out of line: its code and registers stay off the fast path. The group's
 * lowest lane records; the others wait for it (__syncwarp on the call site's mask), so the group leaves
 * together. c5419d9 let them return at once: on H200 (bf5d6b0 log) lanes 1-31 then ran the next marker
 * without lane 0 (a lane group 0xfffffffe, then lane 0 alone: 3 records more per ring of 24, and END of
 * a region with no open region). Fix from that log, not yet run on a GPU. */
__device__ __noinline__ void emit_slow(argus_u32 kind, argus_u32 id, argus_u32 coord, argus_u32 active) {
  const argus_u32 lane = lane_id();
  if (lane == (argus_u32)(__ffs(active) - 1)) record_slow(kind, id, coord, active, lane);
  __syncwarp(active);
}

/* The fast path stores written and dropped with one base address (dropped at written + 4). */
static_assert(ARGUS_RING_DROPPED_OFFSET == ARGUS_RING_WRITTEN_OFFSET + 4, "ring header: dropped follows written");

/* One marker. Fast path: the whole warp (all 32 lanes active) at a ready cursor of the default clock.
 * The count is bumped with a plain shared store (with all 32 lanes here, no other lane group of the warp
 * can run at the same time) and the header's counts are written at every marker (no kernel epilogue).
 * The clock is read after the branch on the cursor load, which waits for that load, as the load waits for
 * a barrier just before the marker. Read first, right after a BAR.SYNC.DEFER_BLOCKING, it dated consumer
 * markers of tests/fixtures/ws_pipeline before their producer's (H200, 2026-12-02 00:20): taken, we
 * think, before the barrier released the warp (not yet confirmed on a GPU). Anything else goes to
 * emit_slow, which reads its own stamp. */
__device__ __forceinline__ void emit(argus_u32 kind, argus_u32 id, argus_u32 coord) {
  const argus_u32 active = __activemask();
  WarpCursor* cur = warp_cursors() + warp_in_cta();
  const argus_u32 cur_addr = shared_address(cur);
  const WarpCursor c = load_cursor(cur);
  if (c.grid != grid_id_lo() || c.cta != cta_linear() || active != 0xFFFFFFFFu) {
    emit_slow(kind, id, coord, active);
    return;
  }
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  const argus_u64 t = cycle_counter();
#else
  const argus_u64 t = global_timer();
#endif
  /* Every lane computes the same values (the cursor load is a broadcast) and stores them to the same
   * addresses (one transaction each): no predicate (ptxas turns predicated stores here into branches).
   * So, as with RegCursor, the lanes of a converged warp must agree on the coordinate. A marker outside
   * the coordinate window does not advance the count, so the next record overwrites its slot. */
  const argus_u32 take = (argus_u32)in_window(coord, c.coord_begin, c.coord_span);
  const argus_u32 n = c.count;
  const argus_u64 hdr = c.ring;
  const argus_u64 rec = hdr + ARGUS_RING_HEAD_BYTES_ + (argus_u64)(n & c.cap_mask) * sizeof(ArgusRecord);
  const argus_u32 next = n + take;
  const argus_u32 cap = c.cap_mask + 1u;
  const argus_u32 dropped = (next > cap ? next : cap) - cap;
  asm volatile(
      "st.shared.u32 [%0+4], %1;\n\t"
      "st.global.v4.b32 [%2], {%3, %4, %5, %6};\n\t"
      "st.global.b32 [%7], %1;\n\t"
      "st.global.b32 [%7+4], %8;"
      ::"r"(cur_addr), "r"(next), "l"(rec), "r"(id), "r"(coord), "r"((argus_u32)t), "r"(stamp_hi(t, kind)),
        "l"(hdr + ARGUS_RING_WRITTEN_OFFSET), "r"(dropped)
      : "memory");
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  if (lane_id() == 0u && take) store_anchor(hdr, n, c.cap_mask, t);
#endif
}
