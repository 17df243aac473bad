/* Argus trace memory layout: the ONE definition of every byte the device writes and the host reads.
 *
 * Plain C++ (no CUDA, no standard headers) so that nvcc, NVRTC and a host C++ compiler all accept it.
 * Python mirrors it in argus_rt/trace/layout.py; tests/test_trace_layout.py compiles this file with
 * g++, prints every size and offset, and compares them with the numpy dtypes.
 *
 * Memory of one traced launch ("the buffer region", one torch uint8 tensor):
 *
 *   ring 0: ArgusRingHeader (32 B) | ArgusRecord[capacity] (16 B each)
 *   ring 1: ...                                          (ring stride = 32 + 16 * capacity bytes)
 *
 * Anchored-timestamp builds (-DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED, armed with ARGUS_CLOCK_ANCHORED)
 * put ArgusRingAnchors (32 B) right after each ring header, so there the ring stride is
 * 64 + 16 * capacity bytes; the default build never touches it.
 *
 * Ring index of a warp = (linear CTA index - cta_begin) * warps_per_cta + warp index in the CTA.
 * The control block ArgusCtl lives in the `__device__` global `argus_ctl` of each traced module;
 * the host writes it between launches (argus_rt.trace.TraceSession.arm).
 */
#ifndef ARGUS_LAYOUT_H_
#define ARGUS_LAYOUT_H_

typedef unsigned int argus_u32;
typedef unsigned long long argus_u64;
typedef long long argus_i64; /* the int64 words of the Triton buffers (argus_region_trace.h, ...) */

#define ARGUS_LAYOUT_VERSION 1u

/* Record kinds, stored in the top two bits of ArgusRecord.stamp. 0 means "never written". */
#define ARGUS_KIND_BEGIN 1u
#define ARGUS_KIND_END 2u
/* Lane-group record, right after the BEGIN/END it describes, written (by ARGUS_LEAN_MARKERS builds only) when
 * a divergent (or partial) group of the warp's lanes ran that marker: region_id = the group's active-lane mask,
 * coord = its lowest lane, stamp = the marker's time | kind. Records without one were made by all the warp's lanes. */
#define ARGUS_KIND_LANES 3u
#define ARGUS_KIND_SHIFT 62
#define ARGUS_TIME_MASK 0x3FFFFFFFFFFFFFFFull

/* Coordinate of a plain ARGUS_BEGIN/ARGUS_END: "no coordinate"; the iteration window ignores it. */
#define ARGUS_COORD_NONE 0xFFFFFFFFu

/* ArgusCtl.clock_mode values. */
#define ARGUS_CLOCK_GLOBALTIMER 0u /* %globaltimer, ns, common to all SMs (32 ns steps on H200) */
#define ARGUS_CLOCK_CLOCK64 1u     /* clock64(), SM cycles, per-SM counter */
#define ARGUS_CLOCK_ANCHORED 2u    /* anchored build only: clock64 records + globaltimer anchor pairs */

/* Anchored build: the latest anchor is refreshed at records n = 1, 2, 4, 8, 16 and at every n with
 * n % period == 0 (and so at every wrap, since capacity and period are powers of two). */
#define ARGUS_ANCHOR_PERIOD 32u

/* "ARGR" little endian: a ring header the device claimed. */
#define ARGUS_RING_MAGIC 0x52475241u

#define ARGUS_MAX_SMS 256
#define ARGUS_SM_MASK_WORDS (ARGUS_MAX_SMS / 32)
#define ARGUS_MAX_WARPS_PER_CTA 32

/* One marker event, written by one lane of the warp with a single 16-byte store. */
struct ArgusRecord {
  argus_u32 region_id; /* 32-bit region ID (argus_rt.regions.region_id) */
  argus_u32 coord;     /* scope coordinate (iteration, layer, role) or ARGUS_COORD_NONE */
  argus_u64 stamp;     /* bits 0..61: time (ns or cycles, see clock_mode); bits 62..63: kind */
};

/* Header in front of each per-warp ring. Zero (or an older seq) means "not written this arm". */
struct ArgusRingHeader {
  argus_u32 magic;   /* ARGUS_RING_MAGIC once claimed */
  argus_u32 seq;     /* ArgusCtl.seq of the arm that claimed it */
  argus_u32 sm;      /* %smid of the warp at claim */
  argus_u32 cta;     /* linear CTA index */
  argus_u32 warp;    /* warp index within the CTA (linear thread index / 32) | ARGUS_RING_WARP_DIVERGENT */
  argus_u32 written; /* records produced since the arm, lost ones included */
  argus_u32 dropped; /* records lost: overwritten by the wrapping ring (= written - capacity) */
  argus_u32 claims;  /* CTA instances that wrote here under this arm (launches under one arm) */
};

/* Bit of ArgusRingHeader.warp (warp indices are < 32): a register-cursor marker (ARGUS_WARP_STATE) of this warp ran
 * without all of the warp's launch lanes, so the warp's lanes kept different counts and their records overwrote each
 * other. Set by the warp at scope exit; the decoder refuses the ring (DivergentMarkersError). */
#define ARGUS_RING_WARP_DIVERGENT 0x80000000u

/* Anchored build only: (globaltimer ns, clock64 cycles) pairs read back to back by the warp's
 * recording lane. `first` is taken when the ring is claimed, `last` at the latest anchor record. */
struct ArgusRingAnchors {
  argus_u64 first_timer; /* %globaltimer, ns */
  argus_u64 first_clock; /* %clock64 of the same SM, cycles */
  argus_u64 last_timer;
  argus_u64 last_clock;
};

/* The control block `argus_ctl`: read by the device once per warp per launch (at its first marker). */
struct ArgusCtl {
  argus_u64 buffers;       /* device address of the buffer region; 0 = tracing off */
  argus_u32 enabled;       /* 0 = off, 1 = on */
  argus_u32 seq;           /* arm sequence number, changed by the host at every arm */
  argus_u32 capacity;      /* records per ring; a power of two */
  argus_u32 num_rings;     /* rings in the buffer region */
  argus_u32 warps_per_cta; /* ring slots per CTA (ceil(threads per CTA / 32)) */
  argus_u32 clock_mode;    /* ARGUS_CLOCK_GLOBALTIMER or ARGUS_CLOCK_CLOCK64 */
  argus_u32 cta_begin;     /* CTA filter: linear CTA index in [cta_begin, cta_end) */
  argus_u32 cta_end;
  argus_u32 warp_mask;     /* warp filter: bit w = trace warp w of each CTA */
  argus_u32 coord_begin;   /* iteration window: coordinates in [coord_begin, coord_end) */
  argus_u32 coord_end;
  argus_u32 version;       /* ARGUS_LAYOUT_VERSION, for the host's own checks */
  argus_u32 unbuffered;    /* device-incremented: warps that passed the filters but had no ring */
  argus_u32 reserved;
  argus_u32 sm_mask[ARGUS_SM_MASK_WORDS]; /* SM filter: bit s = trace warps running on SM s */
};

/* Byte offsets the device stores to directly (checked below wherever offsetof is available). */
#define ARGUS_RING_WRITTEN_OFFSET 20
#define ARGUS_RING_DROPPED_OFFSET 24
#define ARGUS_RING_CLAIMS_OFFSET 28
#define ARGUS_ANCHORED_HEADER_BYTES 64   /* ArgusRingHeader + ArgusRingAnchors */
#define ARGUS_ANCHOR_FIRST_OFFSET 32     /* from the ring header start */
#define ARGUS_ANCHOR_LAST_OFFSET 48

static_assert(sizeof(argus_u32) == 4 && sizeof(argus_u64) == 8 && sizeof(argus_i64) == 8,
              "argus: unexpected integer sizes");
static_assert(sizeof(ArgusRecord) == 16, "ArgusRecord must be one 16-byte store");
static_assert(sizeof(ArgusRingHeader) == 32, "ArgusRingHeader is 32 bytes (keeps records 16-byte aligned)");
static_assert(sizeof(ArgusCtl) == 64 + 4 * ARGUS_SM_MASK_WORDS, "ArgusCtl size");
static_assert(sizeof(ArgusRingHeader) + sizeof(ArgusRingAnchors) == ARGUS_ANCHORED_HEADER_BYTES, "anchored header size");
static_assert((ARGUS_MAX_SMS % 32) == 0, "SM mask is whole 32-bit words");

/* NVRTC has no offsetof builtin; nvcc and host compilers check the offsets here. */
#if !defined(__CUDACC_RTC__)
#define ARGUS_OFFSETOF(type, member) __builtin_offsetof(type, member)
static_assert(ARGUS_OFFSETOF(ArgusRecord, stamp) == 8, "ArgusRecord.stamp offset");
static_assert(ARGUS_OFFSETOF(ArgusRingHeader, written) == ARGUS_RING_WRITTEN_OFFSET, "ArgusRingHeader.written offset");
static_assert(ARGUS_OFFSETOF(ArgusRingHeader, dropped) == ARGUS_RING_DROPPED_OFFSET, "ArgusRingHeader.dropped offset");
static_assert(ARGUS_OFFSETOF(ArgusRingHeader, claims) == ARGUS_RING_CLAIMS_OFFSET, "ArgusRingHeader.claims offset");
static_assert(ARGUS_OFFSETOF(ArgusRingAnchors, last_timer) == ARGUS_ANCHOR_LAST_OFFSET - ARGUS_ANCHOR_FIRST_OFFSET,
              "ArgusRingAnchors.last_timer offset");
static_assert(ARGUS_OFFSETOF(ArgusCtl, sm_mask) == 64, "ArgusCtl.sm_mask offset");
#endif

#endif /* ARGUS_LAYOUT_H_ */
