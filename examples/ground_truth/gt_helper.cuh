// The shared helper of the ground-truth kernel, in its own file so that plain -lineinfo
// source-file attribution puts its instructions here while region attribution splits them
// between the two regions that call it (3 calls from stage_a for each 1 from stage_b).
#pragma once

// __noinline__ keeps one copy of the code: every caller reaches the same PCs through CALL.
__device__ __noinline__ float gt_helper(float x, float y, int trips) {
#pragma unroll 1
    for (int i = 0; i < trips; ++i) {
        x = fmaf(x, y, 0.25f);  // dependent chain: the compiler cannot drop or merge trips
    }
    return x;
}
