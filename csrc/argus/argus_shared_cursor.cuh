/* argus_shared_cursor.cuh: the shared-memory cursor, the markers of every function without
 * ARGUS_WARP_STATE() in the trace build (ARGUS_MODE=2). Default since issue 20 (it was the opt-in
 * -DARGUS_LEAN_MARKERS=1 build, file argus_lean_markers.cuh; the markers of a58e52b it replaced recorded divergent
 * lane groups without labelling them, so two lane groups in different regions could mis-nest silently).
 * Measured on H200 (2026-12-02, as the lean build): ~70 ns per marker in a kernel body, ~99 ns in a __noinline__
 * helper. Built from the SASS anatomy of docs/marker_cost_anatomy.md: on a58e52b's path the record store waited on a
 * serial chain (warp-index S2R -> cursor LDS -> compares -> branch -> timer read -> store) that the register cursor
 * does not have.
 * The steady-state marker (whole warp, ready cursor, default clock) is straight-line up to one branch
 * (tests/test_shared_cursor.py):
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
 * Timestamp: read after a branch on the cursor load (which waits for the load). A read before the load is issued
 * before a bar.sync right ahead of the marker releases the warp (H200, 2026-12-02: tests/fixtures/ws_pipeline's
 * consumers were dated ~0.8 us before the producer's load; the after-the-load order was correct and cost the same,
 * 69.65 vs 70.98 ns per marker, so it is the only order).
 * Slow path (emit_slow, out of line): claim, divergent or partial lane groups, clock64 stamps and the
 * anchored build: each lane group's lowest lane takes its slot(s) with a shared atomic and writes an
 * ARGUS_KIND_LANES record after a marker not run by the whole warp, and the decoder pairs each group's BEGIN/END.
 * So every marker of a partial last warp (block size not a multiple of 32), of a clock64 arm and of the anchored
 * build is a slow-path marker, and a marker run by one lane takes two slots.
 * Included by argus_cursors.cuh inside namespace argus_detail, after the helpers it uses. */
#ifndef ARGUS_CURSORS_CUH_
#error "argus_shared_cursor.cuh is included by argus_cursors.cuh only"
#endif

/* State bits of the cursor's grid word: a clock64 cursor takes the slow path (SLOW); a claim in progress
 * makes other lane groups of the warp wait (CLAIMING). */
#define ARGUS_CURSOR_SLOW_ 0x80000000u
#define ARGUS_CURSOR_CLAIMING_ 0x40000000u

/* First half: what the readiness and window tests read; second half: what the slot needs. */
struct __align__(16) WarpCursor {
  argus_u32 grid;        /* low 32 bits of %gridid of the owning launch, ^ state bits */
  argus_u32 cta;         /* linear CTA index of the owner */
  argus_u32 coord_begin; /* coordinate window [begin, begin + span) */
  argus_u32 coord_span;
  argus_u32 count;       /* records produced (the next slot is count & cap_mask) */
  argus_u32 cap_mask;    /* capacity - 1 */
  argus_u64 ring;        /* global address of the ring header, or of the warp's scratch slot */
};
static_assert(sizeof(WarpCursor) == 32, "WarpCursor is two 16-byte shared loads");
#ifndef __CUDACC_RTC__ /* NVRTC has no __builtin_offsetof (H200 run 2026-12-02 14:3x: nested.nvrtc failed on it) */
static_assert(__builtin_offsetof(WarpCursor, count) == 16, "emit stores the count at [cursor+16]");
#endif

__device__ __forceinline__ WarpCursor* warp_cursors() {
  __shared__ WarpCursor cursors[ARGUS_MAX_WARPS_PER_CTA];
  return cursors;
}

/* 32-bit shared address of warp `warp`'s cursor: the array's own address, folded by the compiler. */
__device__ __forceinline__ argus_u32 cursor_address(argus_u32 warp) {
  return (argus_u32)__cvta_generic_to_shared(warp_cursors() + warp);
}

__device__ __forceinline__ WarpCursor load_cursor(argus_u32 addr) {
  WarpCursor c;
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

/* The cursor of a warp that records, after claim_ring_header found its ring. */
__device__ __forceinline__ void take_ring(WarpCursor& c, const CtlView& v, argus_u32 count, argus_u64 gaddr) {
  c.count = count;
  c.cap_mask = v.capacity - 1;
  c.ring = gaddr;
#if ARGUS_TIMESTAMP != ARGUS_TS_ANCHORED
  if (v.clock_mode == ARGUS_CLOCK_CLOCK64) c.grid ^= ARGUS_CURSOR_SLOW_;  // cycle stamps: the slow path
#endif
  c.coord_begin = v.coord_begin;
  c.coord_span = v.coord_end - v.coord_begin;
}

/* The ring-header part of claim_ring: with this warp's control-block view `v`, count a warp the filters pass
 * but no ring holds, or read its ring header and append to the ring (same arm) or start it afresh (anchored
 * build: with its first anchors); a warp that records then gets its cursor `c` set up by take_ring. The cursor
 * is filled inside the branch (a returned flag tested after it moved code), and the view's tested fields are
 * copied to locals first (testing them through the reference moved the anchored build's branches).
 * The ring header is this warp's alone: read as two 16-byte loads, written as two 16-byte stores. */
__device__ __forceinline__ void claim_ring_header(WarpCursor& c, const CtlView& v, argus_u32 sm, argus_u32 cta, argus_u32 warp) {
  const argus_u32 seq = v.seq;
  const bool pass = v.pass, buffered = v.buffered;
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  const argus_u32 clock_mode = v.clock_mode;
#endif
  if (pass) {
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
    /* Another clock means the host expects 32-byte headers: count the warp, write nothing. */
    if (!buffered || clock_mode != ARGUS_CLOCK_ANCHORED) {
#else
    if (!buffered) {
#endif
      atomicAdd(&argus_ctl.unbuffered, 1u);  // counted, never silent
    } else {
      const argus_u64 gaddr = ring_header(v);
      argus_u32 magic, hseq, written, claims;  // the header's other fields are only written here
      asm volatile(
          "{\n\t.reg .u32 x;\n\t"
          "ld.volatile.global.v4.u32 {%0, %1, x, x}, [%4];\n\t"
          "ld.volatile.global.v4.u32 {x, %2, x, %3}, [%4+16];\n\t}"
          : "=r"(magic), "=r"(hseq), "=r"(written), "=r"(claims)
          : "l"(gaddr)
          : "memory");
      argus_u32 count = 0;
      if (magic == ARGUS_RING_MAGIC && hseq == seq) {
        count = written;  // a later launch under the same arm appends
        asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(gaddr + ARGUS_RING_CLAIMS_OFFSET),
                     "r"(claims + 1) : "memory");
      } else {
        asm volatile(
            "st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};\n\t"
            "st.volatile.global.v4.u32 [%0+16], {%5, %6, %7, %8};"
            ::"l"(gaddr), "r"(ARGUS_RING_MAGIC), "r"(seq), "r"(sm), "r"(cta), "r"(warp), "r"(0u), "r"(0u), "r"(1u)
            : "memory");
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
        {
          const argus_u64 clk = cycle_counter();  // clock first, then timer: same order as emit
          const argus_u64 now = global_timer();
          volatile ArgusRingAnchors* anc =
              (volatile ArgusRingAnchors*)(ring_header_generic(v) + ARGUS_ANCHOR_FIRST_OFFSET);
          anc->first_timer = now;
          anc->first_clock = clk;
          anc->last_timer = now;
          anc->last_clock = clk;
        }
#endif
      }
      take_ring(c, v, count, gaddr);
    }
  }
}

/* Body first, then (after a CTA fence) the grid word that makes the cursor ready. */
__device__ __forceinline__ void publish_cursor(argus_u32 addr, const WarpCursor& c) {
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

/* First marker of a warp in a CTA instance (one lane; acquire_cursor serialises lane groups). A warp that
 * records nothing gets a cursor on its scratch slot with an empty window: coordinated markers then store
 * nothing, uncoordinated ones write round 32 records of the 64-record slot. */
__device__ __forceinline__ WarpCursor claim_ring(argus_u32 addr, argus_u32 grid, argus_u32 cta, argus_u32 warp) {
  WarpCursor c;
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
  publish_cursor(addr, c);
  return c;
}

/* The warp's ready cursor; a stale one is claimed by the first lane group to win the CAS on its grid word. */
__device__ __forceinline__ WarpCursor acquire_cursor(argus_u32 addr, argus_u32 grid, argus_u32 cta, argus_u32 warp) {
  for (;;) {
    const WarpCursor c = load_cursor(addr);
    if (c.cta == cta && ((c.grid ^ grid) & ~ARGUS_CURSOR_SLOW_) == 0u) {
      asm volatile("membar.cta;" ::: "memory");  // the body was published before the tag
      return load_cursor(addr);
    }
    if (c.grid == (grid ^ ARGUS_CURSOR_CLAIMING_)) continue;  // another lane group of this warp is claiming
    argus_u32 old;
    asm volatile("atom.shared.cas.b32 %0, [%1], %2, %3;"
                 : "=r"(old) : "r"(addr), "r"(c.grid), "r"(grid ^ ARGUS_CURSOR_CLAIMING_) : "memory");
    if (old == c.grid) return claim_ring(addr, grid, cta, warp);
  }
}

/* One 16-byte record at slot `n` of the ring at `hdr`. */
__device__ __forceinline__ void store_record(argus_u64 hdr, argus_u32 n, argus_u32 cap_mask, argus_u32 a,
                                                  argus_u32 b, argus_u64 t, argus_u32 kind) {
  const argus_u64 rec = hdr + ARGUS_RING_HEAD_BYTES_ + (argus_u64)(n & cap_mask) * sizeof(ArgusRecord);
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(rec), "r"(a), "r"(b), "r"((argus_u32)t),
               "r"(stamp_hi(t, kind)) : "memory");
}

/* One lane group's marker on the slow path (run by its lowest lane): the slot(s) by a shared atomic, a
 * lane-group record after the marker when the group is not the whole warp, the header counts by red.max
 * (groups may store them out of order). */
__device__ __forceinline__ void record_slow(argus_u32 kind, argus_u32 id, argus_u32 coord, argus_u32 active,
                                                 argus_u32 lane) {
  const argus_u32 warp = warp_in_cta();
  const argus_u32 addr = cursor_address(warp);
  const WarpCursor c = acquire_cursor(addr, grid_id_lo(), cta_linear(), warp);
  if (!in_window(coord, c.coord_begin, c.coord_span)) return;
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  const argus_u64 t = cycle_counter();
#else
  const argus_u64 t = (c.grid & ARGUS_CURSOR_SLOW_) ? cycle_counter() : global_timer();
#endif
  const argus_u32 k = active == warp_lanes(warp) ? 1u : 2u;
  const argus_u32 n = atomicAdd(&warp_cursors()[warp].count, k);
  store_record(c.ring, n, c.cap_mask, id, coord, t, kind);
  if (k == 2u) store_record(c.ring, n + 1u, c.cap_mask, active, lane, t, ARGUS_KIND_LANES);
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
__device__ __noinline__ void emit_slow(argus_u32 kind, argus_u32 id, argus_u32 coord, argus_u32 active) {
  const argus_u32 lane = lane_id();
  if (lane == (argus_u32)(__ffs(active) - 1)) record_slow(kind, id, coord, active, lane);
  __syncwarp(active);
}

/* The fast path's stores, predicated on `take` (ready and in the window): the new count, the record, the
 * ring's written count, and its dropped count once the ring has wrapped. */
__device__ __forceinline__ void store_marker(argus_u32 take, argus_u32 addr, const WarpCursor& c, argus_u32 id,
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

#ifndef ARGUS_SHARED_STRAIGHT
#define ARGUS_SHARED_STRAIGHT 0
#endif

#if ARGUS_SHARED_STRAIGHT && ARGUS_TIMESTAMP != ARGUS_TS_ANCHORED
/* The stamp: %clock64 under a clock64 arm (`slow`, the SLOW bit of the loaded grid word), else %globaltimer. Called
 * after the readiness test in program order; ptxas issues both reads after the first instruction that uses the
 * cursor load (tests/test_shared_cursor.py checks it), so in-order issue makes the read wait for the load, and so for
 * a barrier right before the marker, as the default's branch on the load does. */
__device__ __forceinline__ argus_u64 ready_stamp(argus_u32 slow) {
  const argus_u64 clk = cycle_counter();
  const argus_u64 now = global_timer();
  return slow ? clk : now;
}

/* Opt-in straight-line fast path (-DARGUS_SHARED_STRAIGHT=1, or =2 for the vote tail below; issue 20, docs/marker_cost_anatomy.md, "Anatomy of
 * the fa09bba shared markers"; NOT RUN ON A GPU). The default emit below runs LDS -> LOP3 -> LOP3 -> (R2UR, BRA.DIV)
 * -> VOTE.ALL -> taken BRA -> timer read -> LOP3 -> STG in series. Here:
 *   - no vote: `ready` is already the same on every lane that runs the marker. It is false unless the marker's
 *     __activemask() is all 32 lanes (read by the whole warp together); then no other lane group of the warp exists
 *     to change the cursor, so every lane loads the same words and computes the same test;
 *   - no branch between the cursor load and the record store: the stores are predicated on ready & window and come
 *     first, the branch to emit_slow after them (taken over the call on the steady path, inside BSSY/BSYNC: ptxas
 *     cannot prove it uniform);
 *   - a clock64 arm stays on the fast path: the readiness test ignores the grid word's SLOW bit and the stamp is a
 *     select between the two counters (ready_stamp);
 *   - the slow path (claim, lane groups, anchored build) is emit_slow, unchanged, so helpers and divergent lane
 *     groups are recorded as in the default build. */
__device__ __forceinline__ void emit(argus_u32 kind, argus_u32 id, argus_u32 coord) {
  const argus_u32 active = __activemask();
  const argus_u32 addr = cursor_address(warp_in_cta());
  const WarpCursor c = load_cursor(addr);
  /* One test, no short-circuit; the SLOW bit (a clock64 arm) selects the stamp instead of the slow path. */
  const bool ready = ((((c.grid ^ grid_id_lo()) & ~ARGUS_CURSOR_SLOW_) | (c.cta ^ cta_linear()) | ~active) == 0u);
  const argus_u32 take = (argus_u32)ready & (argus_u32)in_window(coord, c.coord_begin, c.coord_span);
  store_marker(take, addr, c, id, coord, ready_stamp(c.grid & ARGUS_CURSOR_SLOW_), kind);
#if ARGUS_SHARED_STRAIGHT == 2
  /* The vote tail: the same test made warp-uniform by a vote after the stores, so ptxas needs no BSSY/BSYNC and the
   * steady path falls through the taken branch's R2UR/BRA.DIV/VOTE.ALL instead (which of the two tails costs less is
   * for the GPU to say: marker_cost row straight_vote). */
  if (__builtin_expect(!__all_sync(active, ready), 0)) emit_slow(kind, id, coord, active);
#else
  if (__builtin_expect(!ready, 0)) emit_slow(kind, id, coord, active);
#endif
}
#else
/* One marker. Every lane loads the cursor (a broadcast), computes the same values and makes the same
 * stores (one transaction each), so the lanes of a converged warp must agree on the coordinate, as with
 * the register cursor. A marker that is not ready (stale cursor, partial warp, clock64, anchored build)
 * stores nothing here and goes to emit_slow. */
__device__ __forceinline__ void emit(argus_u32 kind, argus_u32 id, argus_u32 coord) {
  const argus_u32 active = __activemask();
  const argus_u32 addr = cursor_address(warp_in_cta());
  const WarpCursor c = load_cursor(addr);
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  const bool ready = false;  // cycle stamps and anchors: the slow path
#else
  /* One test, no short-circuit: the CTA index and gridid are read whatever the load returns. */
  const bool ready = __all_sync(active, ((c.grid ^ grid_id_lo()) | (c.cta ^ cta_linear()) | ~active) == 0u);
#endif
  const argus_u32 take = (argus_u32)ready & (argus_u32)in_window(coord, c.coord_begin, c.coord_span);
  /* The stamp is read after the branch on the cursor load, which waits for the load (and so for a barrier before it). */
  if (__builtin_expect(ready, 1)) {
    store_marker(take, addr, c, id, coord, global_timer(), kind);
    return;
  }
  emit_slow(kind, id, coord, active);
}
#endif /* ARGUS_SHARED_STRAIGHT */
