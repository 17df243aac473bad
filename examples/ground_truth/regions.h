// Generated from argus_rt.regions (RegionTree.cuda_defines); tests/test_ground_truth.py checks it.
#pragma once
#define ARGUS_REGION_GROUND_TRUTH 0x23453758u  /* ground_truth */
#define ARGUS_REGION_GROUND_TRUTH_STAGE_A 0x5394f9afu  /* ground_truth/stage_a */
#define ARGUS_REGION_GROUND_TRUTH_STAGE_B 0x3c0be0f2u  /* ground_truth/stage_b */
#define ARGUS_REGION_GROUND_TRUTH_STAGE_B_INNER 0xc06cb491u  /* ground_truth/stage_b/inner */
