// nested_regions.cu: a small kernel with nested Argus regions and a shared __noinline__ helper.
//
// Region tree (IDs in regions.h, from argus_rt.regions; manifest regions.json):
//   example                  the whole kernel body
//   example/stage_a          `rounds` FMAs, then one call of mix()
//   example/stage_b          once per iteration it (coordinate = it): one call of mix(), then
//   example/stage_b/inner      `rounds` FMAs (coordinate = it)
// mix() is shared code: called once from stage_a and `iters` times from stage_b, so PC-to-region
// attribution must split its instructions 1 : iters between the two regions.
//
// Per warp, the trace build records exactly this sequence (B = begin, E = end):
//   B example, B stage_a, E stage_a, {B stage_b(it), B inner(it), E inner(it), E stage_b(it)} for
//   it = 0..iters-1, E example   ->   4 + 4 * iters records.
//
// Build: nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -I csrc -DARGUS_MODE={0,1,2} nested_regions.cu
// (or argus_rt.kinds.cuda.build.build; NVRTC works too). Reference: tests/test_trace_gpu.py.
#include "argus/argus.cuh"
#include "regions.h"

extern "C" __device__ __noinline__ float mix(float acc, float x, int rounds) {
  for (int r = 0; r < rounds; ++r) acc = fmaf(acc, 0.75f, x);
  return acc;
}

extern "C" __global__ void nested_regions(float* out, const float* in, int n, int iters, int rounds) {
  ARGUS_BEGIN(ARGUS_REGION_EXAMPLE);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float x = i < n ? in[i] : 0.0f;
  float acc = 0.0f;
  ARGUS_BEGIN(ARGUS_REGION_EXAMPLE_STAGE_A);
  for (int k = 0; k < rounds; ++k) x = fmaf(x, 0.5f, 0.25f);
  acc = mix(acc, x, rounds);
  ARGUS_END(ARGUS_REGION_EXAMPLE_STAGE_A);
  for (int it = 0; it < iters; ++it) {
    ARGUS_SCOPE_AT(ARGUS_REGION_EXAMPLE_STAGE_B, it);
    acc = mix(acc, x + (float)it, rounds);
    {
      ARGUS_SCOPE_AT(ARGUS_REGION_EXAMPLE_STAGE_B_INNER, it);
      for (int k = 0; k < rounds; ++k) acc = fmaf(acc, 0.5f, 1.0f);
    }
  }
  if (i < n) out[i] = acc;
  ARGUS_END(ARGUS_REGION_EXAMPLE);
}
