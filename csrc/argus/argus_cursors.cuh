/* argus_cursors.cuh: the trace build's device side (ARGUS_MODE=2): the control block and scratch
 * globals, ring claim, and the two per-warp ring cursors (shared memory, or registers with
 * ARGUS_WARP_STATE). Included by argus.cuh in device compilation of mode 2 only; the marker macros
 * over it are in argus_markers.cuh.
 *
 * Mode 2 defines `argus_ctl` and `argus_scratch` (1 MiB of device memory, where warps that record
 * nothing write) and uses 1 KiB of static shared memory (per-warp ring cursors):
 * include argus.cuh in one translation unit per module, or define ARGUS_CTL_EXTERN in the others
 * (relocatable device code).
 *
 * Shared-cursor markers (any function without ARGUS_WARP_STATE()): argus_shared_cursor.cuh, a straight-line
 * fast path plus an out-of-line slow path with lane-group records (the default since issue 20; before, the opt-in
 * -DARGUS_LEAN_MARKERS=1 build). The register cursor (ARGUS_WARP_STATE) is below.
 */
#ifndef ARGUS_CURSORS_CUH_
#define ARGUS_CURSORS_CUH_

#include "argus_host.h"

/* The lean markers are the shared cursor now: -DARGUS_LEAN_MARKERS=1 (the old opt-in) changes nothing, and the
 * markers it replaced (a58e52b's, selected by leaving it out) are removed. */
#if defined(ARGUS_LEAN_MARKERS) && !ARGUS_LEAN_MARKERS
#error "ARGUS_LEAN_MARKERS=0: a58e52b's shared-cursor markers were removed (issue 20); drop the define"
#endif

/* Bytes in front of a ring's records: the default expression is kept verbatim (same SASS). */
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
#define ARGUS_RING_HEAD_BYTES_ ((argus_u64)ARGUS_ANCHORED_HEADER_BYTES)
#else
#define ARGUS_RING_HEAD_BYTES_ sizeof(ArgusRingHeader)
#endif

#ifdef ARGUS_CTL_EXTERN
extern __device__ ArgusCtl argus_ctl;
#else
/* Zero-initialised: tracing is off until the host arms it. */
__device__ ArgusCtl argus_ctl;
#endif

#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
/* Tells the host (TraceSession) that this module writes anchored rings (64-byte headers). */
#ifdef ARGUS_CTL_EXTERN
extern __device__ argus_u32 argus_ts_anchored;
#else
__device__ argus_u32 argus_ts_anchored = 1u;
#endif
#endif

/* Where markers of a warp that records nothing write (register cursor: every marker stores, see RegCursor; shared
 * cursor: its uncoordinated markers, claim_ring):
 * a 64-record slot per warp, indexed by the warp's place in the launch (CTA, then warp in the CTA; not by the
 * control block, which is all zeros in a module nobody armed) and written round like a ring, so up to 1024
 * warps of a launch write different sectors and no warp stores to one address again and again. Measured on H200 (memory
 * reference kernel, tracing disarmed, inner 8): a sector shared by warps of several SMs cost ~15%; one
 * 2-record sector per warp still cost +5 us, with every store going to the same address; a 64-record
 * slot costs +1.9 us, the same as recording. */
#define ARGUS_SCRATCH_SLOTS 1024u
#define ARGUS_SCRATCH_SLOT_RECORDS 64u
#define ARGUS_SCRATCH_RECORDS (ARGUS_SCRATCH_SLOT_RECORDS * ARGUS_SCRATCH_SLOTS)
#ifdef ARGUS_CTL_EXTERN
extern __device__ ArgusRecord argus_scratch[ARGUS_SCRATCH_RECORDS];
#else
__device__ ArgusRecord argus_scratch[ARGUS_SCRATCH_RECORDS];
#endif

namespace argus_detail {

__device__ __forceinline__ argus_u32 grid_id_lo() {
  argus_u64 g;
  asm("mov.u64 %0, %%gridid;" : "=l"(g));
  return (argus_u32)g;
}

__device__ __forceinline__ argus_u32 lane_id() {
  argus_u32 l;
  asm("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

__device__ __forceinline__ argus_u32 sm_id() {
  argus_u32 s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

__device__ __forceinline__ argus_u64 global_timer() {
  argus_u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ argus_u64 cycle_counter() {
  argus_u64 t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}

__device__ __forceinline__ argus_u32 cta_linear() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

__device__ __forceinline__ argus_u32 warps_in_block() {
  return (blockDim.x * blockDim.y * blockDim.z + 31u) >> 5;
}

__device__ __forceinline__ argus_u32 warp_in_cta() {
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) >> 5;
}

/* Lanes warp `warp` has at launch (fewer than 32 in the last warp of a block not a multiple of 32). */
__device__ __forceinline__ argus_u32 warp_lanes(argus_u32 warp) {
  const argus_u32 left = blockDim.x * blockDim.y * blockDim.z - 32u * warp;
  return left >= 32u ? 0xFFFFFFFFu : (1u << left) - 1u;
}

/* The control block as a claiming warp sees it. Read with plain (L1-cached) loads, all issued before
 * any test: every warp of the grid reads the same line here, and uncached loads of one line from ~1000
 * warps queue at one L2 slice (measured on H200: ~3.5 us added to a 128-CTA launch). Plain loads are
 * safe because the host rewrites the block only between launches, and L1 keeps no global data across
 * a launch boundary. `pass`: tracing is on and the SM, CTA and warp filters select this warp;
 * `buffered`: it also has a ring under this geometry. */
struct CtlView {
  argus_u64 buffers, ring_index;
  argus_u32 seq, capacity, clock_mode, coord_begin, coord_end;
  bool pass, buffered;
};

__device__ __forceinline__ CtlView read_ctl(argus_u32 sm, argus_u32 cta, argus_u32 warp) {
  const ArgusCtl* ctl = &argus_ctl;
  CtlView v;
  v.buffers = ctl->buffers;
  const argus_u32 enabled = ctl->enabled, num_rings = ctl->num_rings, wpc = ctl->warps_per_cta;
  v.seq = ctl->seq;
  v.capacity = ctl->capacity;
  v.clock_mode = ctl->clock_mode;
  const argus_u32 cta_begin = ctl->cta_begin, cta_end = ctl->cta_end, warp_mask = ctl->warp_mask;
  v.coord_begin = ctl->coord_begin;
  v.coord_end = ctl->coord_end;
  const argus_u32 sm_bits = ctl->sm_mask[(sm >> 5) & (ARGUS_SM_MASK_WORDS - 1)];
  bool pass = enabled != 0 && v.buffers != 0 && v.capacity != 0 && (v.capacity & (v.capacity - 1)) == 0;
  pass = pass && sm < ARGUS_MAX_SMS && ((sm_bits >> (sm & 31)) & 1u);
  pass = pass && cta >= cta_begin && cta < cta_end;
  v.pass = pass && warp < 32 && ((warp_mask >> warp) & 1u);
  v.ring_index = (argus_u64)(cta - cta_begin) * wpc + warp;
  v.buffered = warp < wpc && v.ring_index < num_rings;
  return v;
}

/* Address of this warp's ring header (valid when the view is `pass && buffered`): generic, and global. */
__device__ __forceinline__ argus_u64 ring_header_generic(const CtlView& v) {
  return v.buffers + v.ring_index * (ARGUS_RING_HEAD_BYTES_ + (argus_u64)v.capacity * sizeof(ArgusRecord));
}

__device__ __forceinline__ argus_u64 ring_header(const CtlView& v) {
  argus_u64 gaddr;
  asm("cvta.to.global.u64 %0, %1;" : "=l"(gaddr) : "l"(ring_header_generic(v)));
  return gaddr;
}

#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
/* Anchored build: records 1, 2, 4, ... (so short rings get a span too; record 0 too) and every
 * ARGUS_ANCHOR_PERIOD-th record (and so every wrap: capacity and period are powers of two) pair
 * their clock64 stamp with a %globaltimer read as the latest anchor, one 16-byte store. */
__device__ __forceinline__ void store_anchor(argus_u64 hdr, argus_u32 n, argus_u32 cap_mask, argus_u64 clk,
                                             bool first_at_zero = false) {
  if ((n & (cap_mask & (ARGUS_ANCHOR_PERIOD - 1u))) == 0u || (n & (n - 1u)) == 0u) {
    const argus_u64 now = global_timer();
    asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(hdr + ARGUS_ANCHOR_LAST_OFFSET), "l"(now), "l"(clk));
    /* The register cursor writes nothing at claim: record 0 of its fresh ring sets the first anchor too. */
    if (first_at_zero && n == 0u) asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(hdr + ARGUS_ANCHOR_FIRST_OFFSET), "l"(now), "l"(clk));
  }
}
#endif

/* High word of a record's stamp: time bits 32..61 and the kind in bits 62..63. No mask: %globaltimer
 * (ns since 1970) and clock64 stay below 2^62 for decades, so one OR keeps the clock read two
 * instructions away from the store. */
__device__ __forceinline__ argus_u32 stamp_hi(argus_u64 t, argus_u32 kind) {
  return (argus_u32)(t >> 32) | (kind << (ARGUS_KIND_SHIFT - 32));
}

/* Is a marker's coordinate recorded? Uncoordinated markers always are; others when
 * coord - begin < span (one unsigned compare; span 0 records none). */
__device__ __forceinline__ bool in_window(argus_u32 coord, argus_u32 begin, argus_u32 span) {
  return coord == ARGUS_COORD_NONE || coord - begin < span;
}

#include "argus_shared_cursor.cuh"

/* Opt-in register cursor (ARGUS_WARP_STATE): the warp's ring cursor lives in registers of the
 * declaring function (every lane holds the same cursor) and a marker is straight-line code with no
 * predicate: a %globaltimer read and one 16-byte store that every lane makes to the same slot with
 * the same bytes (one transaction). A record outside the coordinate window is written and then
 * overwritten (the count does not advance); a warp that records nothing writes round its own 64-record
 * scratch slot (`argus_scratch`) the same way. So nothing on the marker's path waits for memory, and no predicate register is
 * held across the caller's loops (which kept ptxas from hoisting their loop-control tests).
 * The declaration only loads (the control block, then the ring header, to continue a ring that an
 * earlier launch under the same arm wrote): no store, atomic or branch follows those loads, so the
 * compiler can issue the kernel's own first loads alongside and the warp's first marker is the first
 * thing to wait for them. The ring header is written once, by one lane, when the cursor goes out of
 * scope (the function returns): magic, seq, SM, CTA, warp, written, dropped, claims (a ring
 * continued under the same arm gets its counts and one more claim). Seven live registers, plus 4 bytes
 * of shared memory.
 * Timestamps: %globaltimer (ns) in the default build, clock64 in the anchored build, each read after a
 * __syncwarp on the marker's lanes: a read right after bar.sync is otherwise issued before the barrier
 * releases the warp (H200, 2026-12-02, scripts/timer_after_barrier.py: 2000 of 2000 stamps early; with
 * __syncwarp first, 0 of 2000). A module armed
 * with clock="clock64" gets no records from register-cursor warps: they count as `unbuffered`
 * (reported by the decoder) rather than writing stamps the host would misread; build with
 * -DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED for cycle stamps.
 * Restrictions: every marker executed while it is alive must be in that function's own body or in a helper
 * given the cursor (ARGUS_STATE_PARAM / ARGUS_STATE_ARG, or the by-value form for __noinline__ helpers:
 * argus_markers.cuh), with the same coordinate on every lane (lanes that disagree would write different
 * bytes to one slot); the lane that was lowest-active at the declaration must reach the end of the
 * function. Every marker must be executed by all of the warp's launch lanes together: a divergent marker
 * leaves the lanes' counts disagreeing, and records overwrite each other. That is refused, never silent: each
 * lane ANDs the marker's __activemask() into `lanes` (beside the timer-to-store chain, no branch), the lanes vote
 * at scope exit, and the lead lane sets ARGUS_RING_WARP_DIVERGENT in the ring header, which the decoder refuses
 * (at decode time, not at compile time). A lane group that runs markers without the lead lane and returns before
 * meeting it again is not in that vote; its records then lie past the header's count, which the decoder reports
 * (an unwrapped ring). Markers in called functions that were not given the cursor use the shared cursor;
 * mixing the two overwrites records (the decoder then reports the ring as corrupt: its timestamps go
 * backwards). A kernel that traps before returning leaves its ring unclaimed. */
__device__ __forceinline__ argus_u32* reg_cursor_seq() {
  __shared__ argus_u32 seq;
  return &seq;
}
#ifndef ARGUS_REG_APART
#define ARGUS_REG_APART 0
#endif
#if ARGUS_REG_APART
/* Apart build (-DARGUS_REG_APART=1): divergent markers are recorded per lane group (see emit_with below). Bits 0..27
 * of mask_flags: capacity - 1 (the host caps capacity at 2^26); bit 28 (ARGUS_REG_DIRTY_): this lane ran a lane-group
 * marker since the whole warp last folded `extra` into its count; bit 29 (ARGUS_REG_BAD_): the cursor was declared by
 * part of the warp's lanes (the per-warp shared words below could not be set up), so the ring is flagged divergent at
 * scope exit. */
#define ARGUS_REG_CAP_BITS_ 0x0FFFFFFFu
#define ARGUS_REG_DIRTY_ (1u << 28)
#define ARGUS_REG_BAD_ (1u << 29)
/* Per warp of the CTA, in shared memory, zeroed at the declaration by the whole warp: [0] `extra`, the slots lane
 * groups took (two per lane-group marker) since the whole warp last folded them into its count (emit_with); [1] the
 * launch lanes that have left the cursor's scope (the last group to leave writes the ring header). */
__device__ __forceinline__ argus_u32* reg_apart_words(argus_u32 warp) {
  __shared__ __align__(8) argus_u32 words[2 * ARGUS_MAX_WARPS_PER_CTA];  // 8-aligned: zeroed by one st.shared.v2
  return words + 2u * warp;
}
__device__ __forceinline__ argus_u32 reg_apart_address(argus_u32 warp) {
  return (argus_u32)__cvta_generic_to_shared(reg_apart_words(warp));
}
#else
/* Bits 0..29 of mask_flags: capacity - 1 (the host caps capacity at 2^26). */
#define ARGUS_REG_CAP_BITS_ 0x3FFFFFFFu
#endif
#ifndef ARGUS_REG_LANES
#define ARGUS_REG_LANES 0
#endif
#if ARGUS_REG_LANES
#if ARGUS_REG_APART
#error "ARGUS_REG_LANES=1 and ARGUS_REG_APART=1 are two ways to record lane groups: define one"
#endif
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
#error "ARGUS_REG_LANES=1 records %globaltimer only (its records keep 32 time bits); drop ARGUS_TS_ANCHORED"
#endif
/* Lanes build (-DARGUS_REG_LANES=1): per-lane sub-rings, no shared memory, no atomic (see emit_with below). The ring
 * of `capacity` records is 32 sub-rings of capacity / 32 records, sub-ring L written only by lane L, when L is the
 * lowest active lane of a marker's lane group. Bits 0..29 of mask_flags: capacity / 32 - 1 (a recording warp), or the
 * scratch slot's 63 (every lane of a warp that records nothing writes the slot's 64 records: scratch may collide).
 * Bit 30 / 31 as below (31 on every lane of a recording warp: each lane writes its sub-ring's end record). */
#define ARGUS_REG_LANES_MIN_CAPACITY 64u
/* Bit of ArgusRingHeader.warp in the lanes build: the ring is 32 per-lane sub-rings, each closed by an end record
 * (argus_rt/trace/decode.py, _decode_lanes_ring). */
#define ARGUS_RING_WARP_LANES 0x40000000u
/* The end record of a lane's sub-ring (scope exit): region_id 0, coord = the lane's count of records, the full
 * 64-bit %globaltimer in words 2..3 with ARGUS_LANES_END_KIND in the top two bits (the other records keep only the
 * time's low 32 bits; the decoder dates them from this stamp). */
#define ARGUS_LANES_END_KIND 3u
#endif
/* Bit 30 of mask_flags: on a recording warp, "appending" (the ring was claimed earlier under this arm);
 * on a warp that records nothing, "count me as unbuffered" (set on one lane). */
#define ARGUS_REG_FLAG30_ (1u << 30)
#define ARGUS_REG_LEAD_ (1u << 31)
/* The cursor's registers, trivially copyable (a helper may take it by value: ARGUS_STATE_VALUE_PARAM). */
struct RegState {
  argus_u64 records; /* global address of the ring's record 0, or of a scratch slot when not recording */
  argus_u32 count;   /* records produced, with those of earlier launches under this arm */
  argus_u32 mask_flags; /* bits 0..29: capacity - 1, or the scratch slot's 63 when not recording;
                           30: see ARGUS_REG_FLAG30_ above; 31: this lane writes the header at scope exit
                           (apart build: bits 0..27, 28 ARGUS_REG_DIRTY_, 29 ARGUS_REG_BAD_, 31 on every lane of a
                           recording warp) */
  argus_u32 coord_begin, coord_span; /* window [begin, begin + span) */
#if ARGUS_REG_APART
  argus_u32 lanes; /* the warp's launch lanes (0: declared by part of the warp) */
  argus_u32 words; /* 32-bit shared address of the warp's apart words (reg_apart_words) */
#elif ARGUS_REG_LANES
  argus_u32 lanes; /* %lanemask_lt: a marker's writer is the lane with no active lane below it */
#else
  argus_u32 lanes; /* AND of every marker's __activemask() on this lane: below the launch lanes = a divergent marker */
#endif
};

/* The ring header at scope exit, by one lane: `n` records in all; an appending ring (bit 30) gets its counts and one
 * more claim, a new one the whole header; `divergent` (ARGUS_RING_WARP_DIVERGENT or 0) marks a ring the decoder
 * refuses. */
__device__ __forceinline__ void write_reg_header(const RegState& rs, argus_u32 warp, argus_u32 n, argus_u32 divergent) {
  const argus_u64 hdr = rs.records - ARGUS_RING_HEAD_BYTES_;
  const argus_u32 capacity = (rs.mask_flags & ARGUS_REG_CAP_BITS_) + 1u;
  const argus_u32 dropped = n > capacity ? n - capacity : 0u;
  if (rs.mask_flags & ARGUS_REG_FLAG30_) {  // appending: the header is this arm's already: counts and one more claim
    asm volatile(
        "st.global.u32 [%0+20], %1;\n\t"
        "st.global.u32 [%0+24], %2;\n\t"
        "red.global.add.u32 [%0+28], 1;"
        ::"l"(hdr), "r"(n), "r"(dropped)
        : "memory");
    if (divergent) asm volatile("red.global.or.b32 [%0+16], %1;" ::"l"(hdr), "r"(divergent) : "memory");
  } else {
    asm volatile(
        "st.global.v4.u32 [%0], {%1, %2, %3, %4};\n\t"
        "st.global.v4.u32 [%0+16], {%5, %6, %7, %8};"
        ::"l"(hdr), "r"(ARGUS_RING_MAGIC), "r"(*reg_cursor_seq()), "r"(sm_id()), "r"(cta_linear()),
          "r"(warp | divergent), "r"(n), "r"(dropped), "r"(1u)
        : "memory");
  }
}

struct RegCursor : RegState {
  __device__ __forceinline__ RegCursor() {
    const argus_u32 warp = warp_in_cta();
    const argus_u32 cta = cta_linear();
    const argus_u32 sm = sm_id();
    const argus_u32 is_lead = (argus_u32)(lane_id() == (argus_u32)(__ffs(__activemask()) - 1));
    /* Every lane reads the same control-block line (one request). */
    const CtlView v = read_ctl(sm, cta, warp);
    /* Needed again only at scope exit: kept in shared memory, not in a register across the caller's
     * loops (every warp of the CTA writes the same value). */
    *reg_cursor_seq() = v.seq;
    coord_begin = v.coord_begin;
    coord_span = v.coord_end - v.coord_begin;
    lanes = 0xFFFFFFFFu;
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
    const bool clock_ok = v.clock_mode == ARGUS_CLOCK_ANCHORED;
#else
    const bool clock_ok = v.clock_mode == ARGUS_CLOCK_GLOBALTIMER;
#endif
    const bool rec = v.pass && v.buffered && clock_ok;
    const argus_u64 hdr = ring_header_generic(v);
    /* The header is read whether or not the warp records (no branch): a warp that does not record
     * reads the control block instead, and ignores what it got. */
    argus_u64 at;
    asm("cvta.to.global.u64 %0, %1;" : "=l"(at) : "l"(rec ? hdr : (argus_u64)&argus_ctl));
    argus_u32 magic, hseq, written;
    asm("{\n\t.reg .u32 x;\n\t"
        "ld.global.v2.u32 {%0, %1}, [%3];\n\t"
        "ld.global.u32 %2, [%3+20];\n\t}"
        : "=r"(magic), "=r"(hseq), "=r"(written)
        : "l"(at));
    const bool append = rec && magic == ARGUS_RING_MAGIC && hseq == v.seq;
    count = append ? written : 0u;
    records = rec ? hdr + ARGUS_RING_HEAD_BYTES_
                  : (argus_u64)&argus_scratch[ARGUS_SCRATCH_SLOT_RECORDS * ((cta * warps_in_block() + warp) % ARGUS_SCRATCH_SLOTS)];
    /* Bit 30: appending (a recording warp) or count this warp as unbuffered (one lane of a warp that
     * passed the filters but has no ring). */
    const bool flag30 = rec ? append : (v.pass && is_lead);
#if ARGUS_REG_APART
    /* `lanes`: the warp's launch lanes (a marker run by all of them is a whole-warp marker). Bit 31 of mask_flags on
     * every lane of a recording warp: whichever lane group leaves the scope last writes the header. A declaration by
     * part of the warp cannot zero the warp's shared words (another group may be using them): such a cursor has
     * lanes = 0 (no marker is a whole-warp one; its lane-group records take slots from words it did not zero, so they
     * mean nothing) and flags its ring divergent at scope exit: the decoder refuses it. */
    const argus_u32 launch = warp_lanes(warp);
    const bool bad = __activemask() != launch;
    words = reg_apart_address(warp);
    if (!bad) asm volatile("st.shared.v2.u32 [%0], {%1, %1};" ::"r"(words), "r"(0u) : "memory");
    lanes = bad ? 0u : launch;
    mask_flags = (rec ? (v.capacity - 1u) & ARGUS_REG_CAP_BITS_ : ARGUS_SCRATCH_SLOT_RECORDS - 1u) | (flag30 ? ARGUS_REG_FLAG30_ : 0u) |
                 (rec ? ARGUS_REG_LEAD_ : 0u) | (bad ? ARGUS_REG_BAD_ : 0u);
#elif ARGUS_REG_LANES
    /* Lane L's sub-ring: records [L * sub, (L + 1) * sub) of the ring, sub = capacity / 32 (a ring under
     * ARGUS_REG_LANES_MIN_CAPACITY records nothing: the warp counts as unbuffered). Each lane starts it at 0: the
     * counts of an earlier launch under this arm are not kept (no header field holds 32 of them), so an appending
     * launch marks the header's claims 2 and the decoder refuses the ring (re-arm before each launch). A warp that
     * records nothing: every lane writes round the warp's scratch slot. */
    const bool rec_l = rec && v.capacity >= ARGUS_REG_LANES_MIN_CAPACITY;
    const argus_u32 sub = v.capacity >> 5;
    count = 0u;
    records = rec_l ? hdr + ARGUS_RING_HEAD_BYTES_ + (argus_u64)(lane_id() * sub) * sizeof(ArgusRecord)
                    : (argus_u64)&argus_scratch[ARGUS_SCRATCH_SLOT_RECORDS * ((cta * warps_in_block() + warp) % ARGUS_SCRATCH_SLOTS)];
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(lanes));
    mask_flags = (rec_l ? (sub - 1u) & ARGUS_REG_CAP_BITS_ : ARGUS_SCRATCH_SLOT_RECORDS - 1u) |
                 ((rec_l ? append : (v.pass && is_lead)) ? ARGUS_REG_FLAG30_ : 0u) | (rec_l ? ARGUS_REG_LEAD_ : 0u);
    (void)flag30;  // the default's bit 30 (its `rec` has no capacity floor)
#else
    mask_flags = (rec ? (v.capacity - 1u) & ARGUS_REG_CAP_BITS_ : ARGUS_SCRATCH_SLOT_RECORDS - 1u) | (flag30 ? ARGUS_REG_FLAG30_ : 0u) |
                 (rec && is_lead ? ARGUS_REG_LEAD_ : 0u);
#endif
  }
#if ARGUS_REG_APART
  /* Scope exit of the apart build (no vote): each lane group that leaves adds its lanes to the warp's `left` word; the
   * group that completes the launch lanes is the last (every other lane is gone and runs no more markers), and its
   * lowest lane writes the header with the final count (`count` in registers, with the slots folded into it, plus
   * the lane groups' slots since the last fold, `extra`), unflagged. So lane groups may leave in any order, apart or
   * together. A cursor declared by part of the warp (ARGUS_REG_BAD_) flags its ring divergent instead (each group's
   * lowest lane writes the flag). A lane that never runs the scope exit (PTX `exit` in the body) leaves the header
   * unwritten: the ring is unclaimed (the default build has the same hole for its lead lane). */
  __device__ __forceinline__ ~RegCursor() {
    const argus_u32 warp = warp_in_cta();
    const argus_u32 active = __activemask();
    if (mask_flags & ARGUS_REG_LEAD_) {
      if (lane_id() != (argus_u32)(__ffs(active) - 1)) return;
      argus_u32 n = count, divergent = 0u;
      if (mask_flags & ARGUS_REG_BAD_) {
        divergent = ARGUS_RING_WARP_DIVERGENT;
      } else {
        const argus_u32 addr = words;
        argus_u32 left, extra;
        /* this group's slot claims before its exit; the other groups' claims before the count */
        asm volatile("membar.cta;\n\tatom.shared.or.b32 %0, [%1+4], %2;\n\tmembar.cta;"
                     : "=r"(left) : "r"(addr), "r"(active) : "memory");
        if ((left | active) != lanes) return;  // lanes still in scope: the last group to leave writes the header
        asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(extra) : "r"(addr) : "memory");
        n += extra;
      }
      write_reg_header(*this, warp, n, divergent);
    } else if (mask_flags & ARGUS_REG_FLAG30_) {
      atomicAdd(&argus_ctl.unbuffered, 1u);  // passed the filters but had no ring: counted, never silent
    }
  }
#elif ARGUS_REG_LANES
  /* Scope exit of the lanes build (no vote, no shared memory): every lane of a recording warp closes its own sub-ring
   * with its end record (at its next slot: {0, count, full %globaltimer | ARGUS_LANES_END_KIND << 62}) and writes the
   * ring header, the same 32 bytes from every lane (magic, seq, SM, CTA, warp | ARGUS_RING_WARP_LANES, written 0,
   * dropped 0: the end records hold the counts; claims 2 when this launch appended). So lane groups may leave in any
   * order. A lane that never runs the scope exit (PTX `exit`) leaves its sub-ring without an end record: the decoder
   * reports that sub-ring's records as lost. */
  __device__ __forceinline__ ~RegCursor() {
    if (mask_flags & ARGUS_REG_LEAD_) {
      const argus_u32 sub = (mask_flags & ARGUS_REG_CAP_BITS_) + 1u;
      const argus_u64 t = global_timer();
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                   ::"l"(records + (argus_u64)(count & (sub - 1u)) * sizeof(ArgusRecord)), "r"(0u), "r"(count),
                     "r"((argus_u32)t), "r"(stamp_hi(t, ARGUS_LANES_END_KIND))
                   : "memory");
      const argus_u64 hdr = records - (argus_u64)(lane_id() * sub) * sizeof(ArgusRecord) - ARGUS_RING_HEAD_BYTES_;
      asm volatile(
          "st.global.v4.u32 [%0], {%1, %2, %3, %4};\n\t"
          "st.global.v4.u32 [%0+16], {%5, %6, %6, %7};"
          ::"l"(hdr), "r"(ARGUS_RING_MAGIC), "r"(*reg_cursor_seq()), "r"(sm_id()), "r"(cta_linear()),
            "r"(warp_in_cta() | ARGUS_RING_WARP_LANES), "r"(0u), "r"((mask_flags & ARGUS_REG_FLAG30_) ? 2u : 1u)
          : "memory");
    } else if (mask_flags & ARGUS_REG_FLAG30_) {
      atomicAdd(&argus_ctl.unbuffered, 1u);  // passed the filters but had no ring: counted, never silent
    }
  }
#else
  __device__ __forceinline__ ~RegCursor() {
    const argus_u32 warp = warp_in_cta();
    /* Did any lane here run a marker without all the warp's lanes? (Every lane votes; only the lead's group's vote is used.) */
    const argus_u32 divergent = __any_sync(__activemask(), lanes != warp_lanes(warp)) ? ARGUS_RING_WARP_DIVERGENT : 0u;
    if (mask_flags & ARGUS_REG_LEAD_) {
      write_reg_header(*this, warp, count, divergent);
    } else if (mask_flags & ARGUS_REG_FLAG30_) {
      atomicAdd(&argus_ctl.unbuffered, 1u);  // passed the filters but had no ring: counted, never silent
    }
  }
#endif
};

struct NoRegCursor {};

/* A __noinline__ helper's cheapest form (ARGUS_STATE_VALUE_PARAM, ARGUS_RETURNS_STATE, ARGUS_RETURN_STATE,
 * ARGUS_TAKE_STATE): the cursor goes in by value and what its markers change (count, flags, lanes) comes back with
 * the helper's result, all in registers (a reference would put the caller's cursor in local memory). */
template <class T>
struct WithState {
  T value;
  argus_u32 count, mask_flags, lanes;
};

template <class T>
__device__ __forceinline__ WithState<T> with_state(const T& value, const RegState& s) {
  return {value, s.count, s.mask_flags, s.lanes};
}

template <class T>
__device__ __forceinline__ T take_state(const WithState<T>& r, RegState& s) {
  s.count = r.count;
  s.mask_flags = r.mask_flags;
  s.lanes = r.lanes;
  return r.value;
}

__device__ __forceinline__ void emit_with(NoRegCursor&, argus_u32 kind, argus_u32 id, argus_u32 coord) {
  emit(kind, id, coord);
}

#if ARGUS_REG_APART
/* Apart build. The slot of a record is count + extra: `count` (registers, the same on every lane) counts the
 * whole-warp records and the lane groups' slots folded into it, `extra` (the warp's shared word) the lane groups' slots
 * taken since the last fold. */
__device__ __forceinline__ argus_u64 reg_slot(const RegState& rc, argus_u32 n) {
  return rc.records + (argus_u64)(n & rc.mask_flags & ARGUS_REG_CAP_BITS_) * sizeof(ArgusRecord);
}

/* One marker of the apart build. The fast path is a marker run by all 32 lanes when no lane has run a lane-group
 * marker since the last fold: it is the default build's marker (record at slot `count`, no shared load: `extra` is 0
 * then; every lane adds `take` to its count, so no lane's count goes stale and nothing has to reconverge) plus one
 * vote and one branch. The vote is on the lanes' ARGUS_REG_DIRTY_ bits (a lane group's lanes set theirs; the other
 * lanes cannot know) among the marker's own lanes (ptxas then emits a plain VOTE, no mask check). The branch tests
 * `__activemask() != 0xFFFFFFFF` or the vote, both the same on every lane that runs it, so ptxas branches without
 * BSSY/BSYNC on that path (on `active != lanes` it sets the barrier up on every marker: SASS read, nvcc 13.0). Every
 * other marker takes the branch into a block
 * before the record store (inline, not a call, with no shuffle or mask operation: ptxas then keeps the warp's
 * convergence, so the __syncwarp stays a NOP; inside, ptxas puts BSSY/BSYNC, which also makes a group wait for its
 * lowest lane's slots):
 * - whole warp (mask == the launch lanes), dirty: the fold. Every launch lane is here, so no lane group can be using
 *   `extra`: each lane adds it to its count, the word is zeroed and the bits cleared, all the same on every lane; then
 *   the record goes to slot `count` as on the fast path. A partial last warp (launch lanes < 32) takes this block on
 *   every marker, folding only when dirty.
 * - lane group (part of the launch lanes): stores nothing at `count`; its lanes set ARGUS_REG_DIRTY_ and, in the
 *   window, the group's lowest lane takes two slots with a shared atomic on `extra` and writes the marker's record and a
 *   lane-group record (ARGUS_KIND_LANES: the group's mask and lowest lane, the shared cursor's format) in them, so the
 *   decoder pairs each group's BEGIN/END.
 * Every record lands in the slot it had before the fold was added (whole-warp records plus lane-group slots before it),
 * so the decoder sees the same ring layout. A cursor declared by part of the warp (lanes = 0) records no whole-warp
 * marker, and its ring is refused. */
__device__ __forceinline__ void emit_with(RegState& rc, argus_u32 kind, argus_u32 id, argus_u32 coord) {
  const argus_u32 take = (argus_u32)in_window(coord, rc.coord_begin, rc.coord_span);
  const argus_u32 active = __activemask();
  const argus_u32 addr = rc.words;
  const bool whole = active == rc.lanes;
  /* Did any of the marker's lanes run a lane-group marker since the last fold? (inline asm: __any_sync on the bit
   * costs two more instructions, a shift and a compare) */
  argus_u32 dirty;
  asm volatile("{\n\t.reg .pred p, q;\n\t.reg .b32 d;\n\tand.b32 d, %1, %2;\n\tsetp.ne.u32 p, d, 0;\n\t"
               "vote.sync.any.pred q, p, %3;\n\tselp.u32 %0, 1, 0, q;\n\t}"
               : "=r"(dirty) : "r"(rc.mask_flags), "n"(ARGUS_REG_DIRTY_), "r"(active));
  __syncwarp(active);
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  const argus_u64 t = cycle_counter();
#else
  const argus_u64 t = global_timer();
#endif
  if (__builtin_expect((active != 0xFFFFFFFFu) | (dirty != 0u), 0)) {
    if (whole) {
      if (dirty) {
        argus_u32 extra;
        asm volatile("ld.volatile.shared.u32 %0, [%1];\n\tst.volatile.shared.u32 [%1], 0;"
                     : "=r"(extra) : "r"(addr) : "memory");
        rc.count += extra;
        rc.mask_flags &= ~ARGUS_REG_DIRTY_;
      }
    } else {
      rc.mask_flags |= ARGUS_REG_DIRTY_;
      const argus_u32 lead = (argus_u32)(__ffs(active) - 1);
      if (take && lane_id() == lead) {
        argus_u32 k;
        asm volatile("atom.shared.add.u32 %0, [%1], 2;" : "=r"(k) : "r"(addr) : "memory");
        const argus_u32 n = rc.count + k;
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
        if (rc.mask_flags >> 31) {
          store_anchor(rc.records - ARGUS_RING_HEAD_BYTES_, n, rc.mask_flags & ARGUS_REG_CAP_BITS_, t, true);
          store_anchor(rc.records - ARGUS_RING_HEAD_BYTES_, n + 1u, rc.mask_flags & ARGUS_REG_CAP_BITS_, t);
        }
#endif
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n\tst.global.v4.b32 [%5], {%6, %7, %3, %8};"
                     ::"l"(reg_slot(rc, n)), "r"(id), "r"(coord), "r"((argus_u32)t), "r"(stamp_hi(t, kind)),
                       "l"(reg_slot(rc, n + 1u)), "r"(active), "r"(lead), "r"(stamp_hi(t, ARGUS_KIND_LANES))
                     : "memory");
      }
    }
  }
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  if ((rc.mask_flags >> 31) & take & (argus_u32)whole)
    store_anchor(rc.records - ARGUS_RING_HEAD_BYTES_, rc.count, rc.mask_flags & ARGUS_REG_CAP_BITS_, t, true);
#endif
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %0, 0;\n\t@p st.global.v4.b32 [%1], {%2, %3, %4, %5};\n\t}"
               ::"r"((argus_u32)whole), "l"(reg_slot(rc, rc.count)), "r"(id), "r"(coord), "r"((argus_u32)t),
                 "r"(stamp_hi(t, kind)));
  rc.count += take & (argus_u32)whole;
}
#elif ARGUS_REG_LANES
/* One marker of the lanes build. Its writer is the lowest active lane of its lane group (`lanes` = %lanemask_lt: no
 * active lane below it), lane 0 in a converged warp; only the writer stores, into its own sub-ring at its own count,
 * and only the writer's count advances. Two lane groups of one warp never share a lowest lane, so they never share a
 * slot: no atomic, no shared memory, no branch, and no lane needs another lane's count. The record is
 * {region, coord, time bits 0..31, lane mask with bit 0 replaced by the kind (0 BEGIN, 1 END)}: the writer's lane
 * gives the mask's lowest set bit, so bit 0 is known to the decoder; the time's high bits come from the sub-ring's end
 * record. Per marker this is the default marker with the `lanes &= active` AND replaced by the writer test (one
 * LOP3 to a predicate), the kind OR applied to the mask instead of the time's high word (off the timer-to-store
 * chain), and the store and count update predicated on the writer.
 * The coordinate window is not in the store's predicate: as in the default build, a writer's record outside the
 * window is stored at its slot and the count does not advance, so its next record (or its sub-ring's end record at
 * scope exit, which every lane writes at its own count) overwrites it; the decoder never sees it. A predicate costs
 * ~13 cycles from the instruction that sets it to the first instruction it guards (ptxas's stall counts, nvcc 13.0
 * sm_90a), against ~4 as an operand: with the window folded into the writer test (session 18's build), the window's
 * ISETP/SEL came before that test on every BEGIN and the store waited for both (docs/marker_cost_anatomy.md, "Lanes
 * build, session 19 anatomy"). The window now only gates the count update (`@p add count, take`, p the writer test). */
__device__ __forceinline__ void emit_with(RegState& rc, argus_u32 kind, argus_u32 id, argus_u32 coord) {
  const argus_u32 take = (argus_u32)in_window(coord, rc.coord_begin, rc.coord_span);
  const argus_u32 active = __activemask();
  const argus_u32 writer = (argus_u32)((active & rc.lanes) == 0u);
  __syncwarp(active);
  const argus_u64 t = global_timer();
  const argus_u64 at = rc.records + (argus_u64)(rc.count & rc.mask_flags & ARGUS_REG_CAP_BITS_) * sizeof(ArgusRecord);
  const argus_u32 hi = (active & ~1u) | (kind == ARGUS_KIND_END ? 1u : 0u);
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %0, 0;\n\t@p st.global.v4.b32 [%1], {%2, %3, %4, %5};\n\t}"
               ::"r"(writer), "l"(at), "r"(id), "r"(coord), "r"((argus_u32)t), "r"(hi));
  /* count += take on the writer (written as `count += writer & take` or `if (writer) count += take`, ptxas adds a SEL
   * and a second add per pair and schedules them in front of the BEGIN's store: 105 stall cycles per loop iteration
   * against 99 for this form, refexec_compute at 256 occurrences) */
  asm("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %1, 0;\n\t@p add.u32 %0, %0, %2;\n\t}" : "+r"(rc.count) : "r"(writer), "r"(take));
}
#else
/* One marker. The lanes' mask is folded into `lanes` beside the chain (no branch); the __syncwarp on those lanes
 * makes the stamp wait for a barrier right before it (and never waits for lanes that are elsewhere). */
__device__ __forceinline__ void emit_with(RegState& rc, argus_u32 kind, argus_u32 id, argus_u32 coord) {
  const argus_u32 take = (argus_u32)in_window(coord, rc.coord_begin, rc.coord_span);
  const argus_u32 active = __activemask();
  rc.lanes &= active;
  __syncwarp(active);
#if ARGUS_TIMESTAMP == ARGUS_TS_ANCHORED
  const argus_u64 t = cycle_counter();
  if ((rc.mask_flags >> 31) & take) store_anchor(rc.records - ARGUS_RING_HEAD_BYTES_, rc.count, rc.mask_flags & ARGUS_REG_CAP_BITS_, t, true);
#else
  const argus_u64 t = global_timer();
#endif
  /* Every lane stores the same 16 bytes to the same slot (one transaction): no predicate. A record outside the
   * window is overwritten by the next one (the count does not advance). */
  const argus_u64 at = rc.records + (argus_u64)(rc.count & rc.mask_flags & ARGUS_REG_CAP_BITS_) * sizeof(ArgusRecord);
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(at), "r"(id), "r"(coord), "r"((argus_u32)t),
               "r"(stamp_hi(t, kind)));
  rc.count += take;
}
#endif /* ARGUS_REG_APART */

template <class Cursor>
struct TraceScope {
  Cursor& cursor;
  argus_u32 id, coord;
  __device__ __forceinline__ TraceScope(Cursor& cur, argus_u32 i, argus_u32 c) : cursor(cur), id(i), coord(c) {
    emit_with(cursor, ARGUS_KIND_BEGIN, id, coord);
  }
  __device__ __forceinline__ ~TraceScope() { emit_with(cursor, ARGUS_KIND_END, id, coord); }
};


}  // namespace argus_detail

/* Found by name lookup wherever no ARGUS_WARP_STATE() is in scope: selects the shared cursor. */
static __device__ argus_detail::NoRegCursor argus_warp_state_;

#endif /* ARGUS_CURSORS_CUH_ */
