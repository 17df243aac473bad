/* argus_host.h: the part of argus.cuh a host translation unit sees (host compilers, nvcc's host pass,
 * NVRTC alike): the build options, the marker-only footprint, and the size of the trace buffer.
 *
 * Plain C++ (no CUDA, no standard headers). Included by argus.cuh after argus_layout.h.
 *
 * Build mode, by -DARGUS_MODE=<n>:
 *   0 (default) off: every marker macro expands to nothing; the SASS equals a build without markers.
 *   1 marker-only: each marker is three `pmevent.mask` immediates (SASS `PMTRIG`), no memory
 *     traffic: (ARGUS_MARKER_TAG | kind), (id & 0xffff), (id >> 16). IDs must be constants.
 *   2 trace: records {region_id, coord, time|kind} go to per-warp rings in global memory,
 *     controlled at run time by the `__device__ ArgusCtl argus_ctl` (argus_layout.h; argus_cursors.cuh).
 *
 * Timestamps, by -DARGUS_TIMESTAMP=<name> (mode 2 only; the default build is unchanged by it):
 *   ARGUS_TS_GLOBALTIMER (default) every record reads %globaltimer (ns), or clock64 when the
 *     host arms clock="clock64".
 *   ARGUS_TS_ANCHORED (opt-in) every record stores clock64 (SM cycles, the cheap read); the
 *     recording lane also reads %globaltimer when it claims its ring, at records n = 1, 2, 4, 8, 16
 *     and at every n % ARGUS_ANCHOR_PERIOD == 0 (so also where the ring wraps), and stores the
 *     (globaltimer, clock64) pair as the ring's first / latest anchor (ArgusRingAnchors, after
 *     the header: ring stride 64 + 16 * capacity). The decoder turns cycles into ns per ring
 *     (or per SM / per launch when a ring's anchors are too close; flagged when it cannot).
 *     Such a module must be armed with clock="anchored" (TraceConfig); any other clock makes
 *     its warps count as `unbuffered` instead of writing a layout the host would misread.
 *   Anchored shared-cursor markers all take the slow path (argus_shared_cursor.cuh): executed by a
 *   converged warp they record once per warp; executed by divergent paths, each lane group records
 *   separately (own slots and lane-group record, own anchor refreshes), as in the default build.
 */
#ifndef ARGUS_HOST_H_
#define ARGUS_HOST_H_

#include "argus_layout.h"

#ifndef ARGUS_MODE
#define ARGUS_MODE 0
#endif
#if ARGUS_MODE != 0 && ARGUS_MODE != 1 && ARGUS_MODE != 2
#error "ARGUS_MODE must be 0 (off), 1 (marker-only) or 2 (trace)"
#endif

#define ARGUS_TS_GLOBALTIMER 0
#define ARGUS_TS_ANCHORED 1
#ifndef ARGUS_TIMESTAMP
#define ARGUS_TIMESTAMP ARGUS_TS_GLOBALTIMER
#endif
#if ARGUS_TIMESTAMP != ARGUS_TS_GLOBALTIMER && ARGUS_TIMESTAMP != ARGUS_TS_ANCHORED
#error "ARGUS_TIMESTAMP must be ARGUS_TS_GLOBALTIMER (0, default) or ARGUS_TS_ANCHORED (1)"
#endif

/* Marker-only footprint; argus_rt/markers.py holds the same numbers (tests/test_markers_agree.py). */
#define ARGUS_MARKER_TAG 0xA500u
#define ARGUS_MARKER_BEGIN 0x01u
#define ARGUS_MARKER_END 0x02u

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ARGUS_HOST_DEVICE_ __host__ __device__
#else
#define ARGUS_HOST_DEVICE_
#endif

/* Bytes of one ring of `capacity` records, and of the buffer region of `num_rings` rings, for a module
 * built with the default timestamps (anchored = 0) or with ARGUS_TS_ANCHORED (anchored = 1): what a host
 * allocates before it arms argus_ctl. argus_rt.trace.layout.ring_stride / buffer_bytes give the same
 * numbers (tests/test_argus_header.py). */
static inline ARGUS_HOST_DEVICE_ argus_u64 argus_ring_stride_bytes(argus_u32 capacity, int anchored) {
  return (anchored ? (argus_u64)ARGUS_ANCHORED_HEADER_BYTES : (argus_u64)sizeof(ArgusRingHeader)) +
         (argus_u64)capacity * sizeof(ArgusRecord);
}

static inline ARGUS_HOST_DEVICE_ argus_u64 argus_buffer_bytes(argus_u32 num_rings, argus_u32 capacity, int anchored) {
  return (argus_u64)num_rings * argus_ring_stride_bytes(capacity, anchored);
}

#endif /* ARGUS_HOST_H_ */
