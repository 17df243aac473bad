// reference_execution.cu: the reference execution of the tracing-overhead study.
//
// 128 CTAs x 256 threads; every thread runs OCCURRENCES sequential occurrences of the region
// refexec/occurrence (coordinate = occurrence index), each `inner` iterations of either
//   compute: 8 dependent FP32 FMAs                      a = fma(a, b, c)
//   memory:  one indexed load (LCG index into a table), then 4 dependent FMAs on the loaded value.
// Build with -DARGUS_MODE=0 (trace-free), 1 (marker-only) or 2 (trace); with -DREFEXEC_WARP_STATE=1
// the trace build keeps the ring cursor in registers (ARGUS_WARP_STATE) in every kernel: the helpers take it
// with ARGUS_STATE_PARAM. The divergent kernel's half-warps then overwrite each other's records: the warp marks its
// ring divergent and the decoder refuses it (benchmarks/marker_cost.py's register_divergent row expects that).
// With -DREFEXEC_INNER=<n> the
// inner loop's trip count is the compile-time constant n (the `inner` argument is then ignored; callers
// pass n): ptxas unrolls it and drops the run-time trip-count tests that sit next to the markers.
// Outputs are checked against NumPy references in benchmarks/trace_overhead.py before timing. The
// marker-path variants at the end (helper, divergent) are timed by benchmarks/marker_cost.py.
#include "argus/argus.cuh"
#include "reference_execution_regions.h"

#ifndef OCCURRENCES
#define OCCURRENCES 64
#endif
#ifndef REFEXEC_WARP_STATE
#define REFEXEC_WARP_STATE 0
#endif

#ifdef REFEXEC_INNER
#define REFEXEC_TRIPS (REFEXEC_INNER)
#else
#define REFEXEC_TRIPS inner
#endif

#if REFEXEC_WARP_STATE
#define REFEXEC_STATE_DECL() ARGUS_WARP_STATE()
#define REFEXEC_STATE_PARAM ARGUS_STATE_PARAM
#define REFEXEC_STATE_ARG ARGUS_STATE_ARG
#define REFEXEC_STATE_VALUE_PARAM ARGUS_STATE_VALUE_PARAM
#define REFEXEC_RETURNS_STATE(type) ARGUS_RETURNS_STATE(type)
#define REFEXEC_RETURN_STATE(expr) ARGUS_RETURN_STATE(expr)
#define REFEXEC_TAKE_STATE(call) ARGUS_TAKE_STATE(call)
#else
#define REFEXEC_STATE_DECL() ((void)0)
#define REFEXEC_STATE_PARAM
#define REFEXEC_STATE_ARG
#define REFEXEC_STATE_VALUE_PARAM
#define REFEXEC_RETURNS_STATE(type) type
#define REFEXEC_RETURN_STATE(expr) return (expr)
#define REFEXEC_TAKE_STATE(call) (call)
#endif

#define LCG_MUL 1664525u
#define LCG_ADD 1013904223u

extern "C" __global__ void __launch_bounds__(256) refexec_compute(float* out, const float* a0, const float* bs,
                                                                  const float* cs, int inner) {
#if REFEXEC_WARP_STATE
  ARGUS_WARP_STATE();
#endif
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float a = a0[t];
  const float b = bs[t], c = cs[t];
  for (int occ = 0; occ < OCCURRENCES; ++occ) {
    ARGUS_BEGIN_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
    for (int j = 0; j < REFEXEC_TRIPS; ++j) {
#pragma unroll
      for (int f = 0; f < 8; ++f) a = fmaf(a, b, c);
    }
    ARGUS_END_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
  }
  out[t] = a;
}

extern "C" __global__ void __launch_bounds__(256) refexec_memory(float* out, const float* a0, const float* table,
                                                                 unsigned table_mask, const float* cs, int inner) {
#if REFEXEC_WARP_STATE
  ARGUS_WARP_STATE();
#endif
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float a = a0[t];
  const float c = cs[t];
  unsigned idx = t;
  for (int occ = 0; occ < OCCURRENCES; ++occ) {
    ARGUS_BEGIN_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
    for (int j = 0; j < REFEXEC_TRIPS; ++j) {
      idx = idx * LCG_MUL + LCG_ADD;
      const float v = __ldg(table + (idx & table_mask));
#pragma unroll
      for (int f = 0; f < 4; ++f) a = fmaf(a, v, c);
    }
    ARGUS_END_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
  }
  out[t] = a;
}

// Marker-path variants of refexec_compute (benchmarks/marker_cost.py, tests/test_marker_paths*.py); same
// arithmetic and arguments, so the same float64 reference checks them.
// refexec_compute_helper: each occurrence runs in a __noinline__ helper that holds the markers.
__device__ __noinline__ float refexec_occurrence(float a, float b, float c, int occ, int inner REFEXEC_STATE_PARAM) {
  ARGUS_BEGIN_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
  for (int j = 0; j < REFEXEC_TRIPS; ++j) {
#pragma unroll
    for (int f = 0; f < 8; ++f) a = fmaf(a, b, c);
  }
  ARGUS_END_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
  return a;
}

extern "C" __global__ void __launch_bounds__(256) refexec_compute_helper(float* out, const float* a0, const float* bs,
                                                                         const float* cs, int inner) {
  REFEXEC_STATE_DECL();
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float a = a0[t];
  const float b = bs[t], c = cs[t];
  for (int occ = 0; occ < OCCURRENCES; ++occ) a = refexec_occurrence(a, b, c, occ, inner REFEXEC_STATE_ARG);
  out[t] = a;
}

// refexec_compute_helper_value: the same __noinline__ helper taking the register cursor by value and returning its
// count with the result (ARGUS_STATE_VALUE_PARAM: registers only; the reference form passes through local memory).
__device__ __noinline__ REFEXEC_RETURNS_STATE(float) refexec_occurrence_value(float a, float b, float c, int occ,
                                                                            int inner REFEXEC_STATE_VALUE_PARAM) {
  ARGUS_BEGIN_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
  for (int j = 0; j < REFEXEC_TRIPS; ++j) {
#pragma unroll
    for (int f = 0; f < 8; ++f) a = fmaf(a, b, c);
  }
  ARGUS_END_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
  REFEXEC_RETURN_STATE(a);
}

extern "C" __global__ void __launch_bounds__(256) refexec_compute_helper_value(float* out, const float* a0,
                                                                               const float* bs, const float* cs,
                                                                               int inner) {
  REFEXEC_STATE_DECL();
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float a = a0[t];
  const float b = bs[t], c = cs[t];
  for (int occ = 0; occ < OCCURRENCES; ++occ)
    a = REFEXEC_TAKE_STATE(refexec_occurrence_value(a, b, c, occ, inner REFEXEC_STATE_ARG));
  out[t] = a;
}

// refexec_compute_helper_inline: the same with a __forceinline__ helper (its markers cost what the body's do).
__device__ __forceinline__ float refexec_occurrence_inline(float a, float b, float c, int occ,
                                                           int inner REFEXEC_STATE_PARAM) {
  ARGUS_BEGIN_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
  for (int j = 0; j < REFEXEC_TRIPS; ++j) {
#pragma unroll
    for (int f = 0; f < 8; ++f) a = fmaf(a, b, c);
  }
  ARGUS_END_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
  return a;
}

extern "C" __global__ void __launch_bounds__(256) refexec_compute_helper_inline(float* out, const float* a0,
                                                                                const float* bs, const float* cs,
                                                                                int inner) {
  REFEXEC_STATE_DECL();
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float a = a0[t];
  const float b = bs[t], c = cs[t];
  for (int occ = 0; occ < OCCURRENCES; ++occ) a = refexec_occurrence_inline(a, b, c, occ, inner REFEXEC_STATE_ARG);
  out[t] = a;
}

// refexec_compute_divergent: lanes 0-15 of each warp run occurrence `occ` as region refexec/occurrence
// (inner x 8 FMAs), lanes 16-31 as region refexec (2 inner x 4 FMAs: the same chain, in a loop the
// compiler cannot merge with the other), so each half-warp records its own BEGIN/END pairs (shared cursor; the
// register cursor refuses the ring instead).
extern "C" __global__ void __launch_bounds__(256) refexec_compute_divergent(float* out, const float* a0,
                                                                            const float* bs, const float* cs,
                                                                            int inner) {
  REFEXEC_STATE_DECL();
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float a = a0[t];
  const float b = bs[t], c = cs[t];
  const bool low = (threadIdx.x & 31u) < 16u;
  const int trips = low ? REFEXEC_TRIPS : 2 * REFEXEC_TRIPS;
  for (int occ = 0; occ < OCCURRENCES; ++occ) {
    if (low) {
      ARGUS_BEGIN_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
      for (int j = 0; j < trips; ++j) {
#pragma unroll
        for (int f = 0; f < 8; ++f) a = fmaf(a, b, c);
      }
      ARGUS_END_AT(ARGUS_REGION_REFEXEC_OCCURRENCE, occ);
    } else {
      ARGUS_BEGIN_AT(ARGUS_REGION_REFEXEC, occ);
      for (int j = 0; j < trips; ++j) {
#pragma unroll
        for (int f = 0; f < 4; ++f) a = fmaf(a, b, c);
      }
      ARGUS_END_AT(ARGUS_REGION_REFEXEC, occ);
    }
  }
  out[t] = a;
}
