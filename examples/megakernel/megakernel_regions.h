#define ARGUS_REGION_DECODE 0xf97fb19cu  /* decode */
#define ARGUS_REGION_DECODE_ATTENTION 0xeaae7798u  /* decode/attention */
#define ARGUS_REGION_DECODE_CORE_LOOP 0x9e8a1fafu  /* decode/core_loop */
#define ARGUS_REGION_DECODE_GEMM 0xc0cfbdc7u  /* decode/gemm */
#define ARGUS_REGION_DECODE_KV_UPDATE 0xce9d97aeu  /* decode/kv_update */
#define ARGUS_REGION_DECODE_LOGITS 0x5dfe5db1u  /* decode/logits */
#define ARGUS_REGION_DECODE_NORM 0x5b4e3e4bu  /* decode/norm */
#define ARGUS_REGION_DECODE_SAMPLING 0x2eb79a8bu  /* decode/sampling */
