// Generated from regions.json by RegionTree.cuda_defines() (argus_rt.regions); tests/test_kind_cupy.py checks it.
#pragma once
#define ARGUS_REGION_SOFTMAX 0xfbf922cdu  /* softmax */
#define ARGUS_REGION_SOFTMAX_MAX 0x99ffd195u  /* softmax/max */
#define ARGUS_REGION_SOFTMAX_MAX_REDUCE 0x93f1cdd2u  /* softmax/max/reduce */
#define ARGUS_REGION_SOFTMAX_NORMALIZE 0xbd0cc9dau  /* softmax/normalize */
#define ARGUS_REGION_SOFTMAX_SUM 0xc7c34ea1u  /* softmax/sum */
#define ARGUS_REGION_SOFTMAX_SUM_REDUCE 0x08fac2c7u  /* softmax/sum/reduce */
