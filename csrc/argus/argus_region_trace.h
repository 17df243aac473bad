/* Triton region trace: the buffer a region-traced Triton kernel writes (extra kernel argument
 * `argus_region_out`, int64). The ONE definition of its layout.
 *
 * Plain C++ (no CUDA, no standard headers): nvcc, NVRTC and host compilers accept it. Python mirrors it
 * in argus_rt/kinds/triton/layout.py, which the TTGIR transform that writes the buffer and the
 * decoder that reads it both use (argus_rt/kinds/triton/region_trace.py);
 * tests/test_triton_layouts.py compiles this file, prints every size, offset and constant, and
 * compares them with the mirror.
 *
 * Per CTA (CTA index linearised as x + nx * (y + ny * z)), words_per_cta int64 words:
 *
 *   ArgusRegionTraceHeader (1 word) | ArgusRegionTraceSlot[n_slots] (2 words each)
 *
 * Slots are static: each marker site outside a loop owns one slot, each site inside an scf.for owns
 * one slot per traced trip. One thread of the CTA writes every word (per-CTA granularity).
 */
#ifndef ARGUS_REGION_TRACE_H_
#define ARGUS_REGION_TRACE_H_

#include "argus_layout.h"

/* Kind codes in the top half of a slot's tag: tag = kind << ARGUS_REGION_TRACE_KIND_SHIFT | region_id. */
#define ARGUS_REGION_TRACE_KIND_BEGIN 1
#define ARGUS_REGION_TRACE_KIND_END 2
#define ARGUS_REGION_TRACE_KIND_SHIFT 32

#define ARGUS_REGION_TRACE_HEADER_WORDS 1 /* int64 words of ArgusRegionTraceHeader */
#define ARGUS_REGION_TRACE_SLOT_WORDS 2   /* int64 words of ArgusRegionTraceSlot */

struct ArgusRegionTraceHeader {
  argus_i64 sm_plus_one; /* %smid + 1 of the CTA; 0 means the CTA recorded nothing */
};

struct ArgusRegionTraceSlot {
  argus_i64 tag; /* kind << 32 | 32-bit region ID; 0 means the slot was not reached */
  argus_i64 ns;  /* %globaltimer right after the marker, ns */
};

static_assert(sizeof(ArgusRegionTraceHeader) == 8 * ARGUS_REGION_TRACE_HEADER_WORDS, "region trace header words");
static_assert(sizeof(ArgusRegionTraceSlot) == 8 * ARGUS_REGION_TRACE_SLOT_WORDS, "region trace slot words");

#endif /* ARGUS_REGION_TRACE_H_ */
