// Region markers of the megakernel: MK_REGION for a converged warp, MK_DETAIL / MK_DETAIL_LANE for the
// detail regions (the dependency wait, attention's phases, Down's vector load and weight loop), compiled in
// only with -DMK_DETAIL_REGIONS=1 so the default trace and marker-only builds record exactly the
// REGION_LEAVES of megakernel/regions.py.
#pragma once
#include "argus/argus.cuh"
#include "megakernel_regions.h"

#ifndef MK_DETAIL_REGIONS
#define MK_DETAIL_REGIONS 0
#endif

namespace mk {

#if ARGUS_MODE != 0
// Argus markers are warp-level: a warp still diverged after a loop would record END once per
// path. These force reconvergence around a region (not used where only one lane runs).
struct WarpSyncOnEntry {
  __device__ __forceinline__ WarpSyncOnEntry() { __syncwarp(); }
};
struct WarpSyncOnExit {
  __device__ __forceinline__ ~WarpSyncOnExit() { __syncwarp(); }
};
#define MK_REGION(id, c)                                                \
  mk::WarpSyncOnEntry ARGUS_CAT_(mk_sync_in_, __LINE__);                \
  ARGUS_SCOPE_AT(id, c);                                                \
  mk::WarpSyncOnExit ARGUS_CAT_(mk_sync_out_, __LINE__)
#else
#define MK_REGION(id, c) ((void)0)
#endif

// Region coordinate: step in the high bits, layer in the low 8 (Argus iteration windows select steps).
__device__ __forceinline__ unsigned coord(int step, int layer) { return ((unsigned)step << 8) | (unsigned)(layer & 0xff); }

#if MK_DETAIL_REGIONS && ARGUS_MODE != 0
#define MK_DETAIL_BEGIN(id, c) \
  do {                         \
    __syncwarp();              \
    ARGUS_BEGIN_AT(id, c);     \
  } while (0)
#define MK_DETAIL_END(id, c) \
  do {                       \
    __syncwarp();            \
    ARGUS_END_AT(id, c);     \
  } while (0)
#define MK_DETAIL_LANE(id, c) ARGUS_SCOPE_AT(id, c)  // one lane runs (thread 0's wait): no warp sync
#else
#define MK_DETAIL_BEGIN(id, c) ((void)0)
#define MK_DETAIL_END(id, c) ((void)0)
#define MK_DETAIL_LANE(id, c) ((void)0)
#endif

}  // namespace mk
