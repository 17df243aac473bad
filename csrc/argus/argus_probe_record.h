/* Forced-wait probe record: what a Triton forced-wait probe variant writes (extra kernel argument
 * `argus_probe_out`, int64), one record per CTA. The ONE definition of its layout.
 *
 * Plain C++ (no CUDA, no standard headers): nvcc, NVRTC and host compilers accept it. Python mirrors it
 * in argus_rt/kinds/triton/layout.py, which the probe transform and its decoders use
 * (argus_rt/kinds/triton/probes.py); tests/test_triton_layouts.py compiles this file and compares.
 *
 * Buffer: ArgusProbeRecord[n_ctas] (CTA index linearised as x + nx * (y + ny * z)). The probe reads
 * both clocks just before it issues the selected op and just after its forced wait returns: a TMA
 * load's private mbarrier wait; for cp.async (ttg.async_wait num = 0 after its commit group) and WGMMA
 * (warp_group_dot_wait pendings = 0 after the dot) a CTA barrier before the issue clocks and after the
 * wait. A CTA that never ran the selected instance leaves its record 0.
 */
#ifndef ARGUS_PROBE_RECORD_H_
#define ARGUS_PROBE_RECORD_H_

#include "argus_layout.h"

#define ARGUS_PROBE_RECORD_WORDS 5 /* int64 words of ArgusProbeRecord */

struct ArgusProbeRecord {
  argus_i64 issue_ns;        /* %globaltimer before the issue, ns */
  argus_i64 complete_ns;     /* %globaltimer after the wait, ns */
  argus_i64 issue_cycles;    /* %clock64 before the issue, SM cycles */
  argus_i64 complete_cycles; /* %clock64 after the wait, SM cycles */
  argus_i64 sm;              /* %smid */
};

static_assert(sizeof(ArgusProbeRecord) == 8 * ARGUS_PROBE_RECORD_WORDS, "probe record words");

#endif /* ARGUS_PROBE_RECORD_H_ */
