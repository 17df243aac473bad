/* argus.cuh: mark semantic regions in CUDA kernels (header-only; nvcc and NVRTC).
 *
 * 1. Device code: give each region a 32-bit ID (RegionTree.cuda_defines() writes the `#define`s;
 *    argus_rt.regions.region_id("load") is the ID) and mark it. Compiled by tests/test_argus_header.py:
 *
 *      ---- example: device ----
 *      #include "argus/argus.cuh"   // include dir: csrc/
 *      #define ARGUS_REGION_LOAD 0x37471e1eu
 *      #define ARGUS_REGION_STEP 0x0db438a3u
 *      extern "C" __global__ void k(float* x, int n) {
 *        ARGUS_BEGIN(ARGUS_REGION_LOAD);
 *        float v = x[threadIdx.x];
 *        ARGUS_END(ARGUS_REGION_LOAD);
 *        for (int it = 0; it < n; ++it) {
 *          ARGUS_SCOPE_AT(ARGUS_REGION_STEP, it);  // ends at the closing brace
 *          v = v * 0.5f + 1.0f;
 *        }
 *        x[threadIdx.x] = v;
 *      }
 *      ---- end ----
 *
 * 2. Build: -DARGUS_MODE=0 (off, the default: markers vanish), 1 (marker-only: PMTRIG immediates the
 *    PC-to-region map reads) or 2 (trace: per-warp rings in global memory); -DARGUS_TIMESTAMP picks
 *    the trace's clock reads. Both are described in argus_host.h. With ARGUS_MODE=2, include this
 *    header in one translation unit per module, or define ARGUS_CTL_EXTERN in the others.
 *
 * 3. Host (Python): allocate the rings, arm argus_ctl before a launch, decode after it:
 *
 *      ---- example: host ----
 *      from argus_rt.launch import CubinModule
 *      from argus_rt.trace import TraceConfig, TraceSession, pair_intervals, region_stats
 *      mod = CubinModule.load("k.cubin")  # built with -DARGUS_MODE=2
 *      sess = TraceSession(mod, TraceConfig(ctas=128, threads_per_cta=256, capacity=256))
 *      sess.arm()
 *      mod.launch("k", grid=(128,), block=(256,), args=[x, n])
 *      trace = sess.decode()
 *      stats = region_stats(pair_intervals(trace))
 *      ---- end ----
 *
 * Parts: argus_layout.h (every byte the device writes and the host reads), argus_host.h (build
 * options, marker footprint, buffer sizes: what host code sees), argus_cursors.cuh (mode 2's control
 * block, ring claim and cursors), argus_markers.cuh (the marker macros of each mode).
 */
#ifndef ARGUS_ARGUS_CUH_
#define ARGUS_ARGUS_CUH_

#include "argus_layout.h"
#include "argus_host.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#if ARGUS_MODE == 2
#include "argus_cursors.cuh"
#endif
#include "argus_markers.cuh"
#endif /* __CUDACC__ || __CUDACC_RTC__ */

#endif /* ARGUS_ARGUS_CUH_ */
