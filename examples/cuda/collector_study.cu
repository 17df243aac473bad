// collector_study.cu: the kernel of the isolated-collector study (benchmarks/collector_overhead.py).
//
// 128 CTAs x 256 threads; every thread runs OCCURRENCES (8) sequential occurrences of the region
// collector/occurrence (coordinate = occurrence index), each FMAS_PER_OCCURRENCE (256) dependent FP32
// FMAs a = fma(a, b, c): 2,048 dependent FMAs per thread. The dependence chain keeps the kernel
// latency bound, so a collector's cost shows up as added time rather than hiding behind throughput.
// Build with -DARGUS_MODE=0 (trace-free), 1 (marker-only: what PC-to-region mapping reads) or 2 (trace).
// Outputs are checked against collector_study_reference.py (float64 NumPy) before anything is timed.
#include "argus/argus.cuh"
#include "collector_study_regions.h"

#ifndef OCCURRENCES
#define OCCURRENCES 8
#endif
#ifndef FMAS_PER_OCCURRENCE
#define FMAS_PER_OCCURRENCE 256
#endif

extern "C" __global__ void __launch_bounds__(256) collector_study(float* out, const float* a0, const float* bs,
                                                                  const float* cs) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float a = a0[t];
  const float b = bs[t], c = cs[t];
  // Keep the occurrence loop rolled: one begin and one end marker site, run 8 times, as in the study.
#pragma unroll 1
  for (int occ = 0; occ < OCCURRENCES; ++occ) {
    ARGUS_BEGIN_AT(ARGUS_REGION_COLLECTOR_OCCURRENCE, occ);
#pragma unroll
    for (int f = 0; f < FMAS_PER_OCCURRENCE; ++f) a = fmaf(a, b, c);
    ARGUS_END_AT(ARGUS_REGION_COLLECTOR_OCCURRENCE, occ);
  }
  out[t] = a;
}
