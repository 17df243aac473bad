/* Iteration-wait record: what the traced reference of a Triton TMA pipeline writes (extra kernel
 * argument `argus_probe_out`, int64): the consumer's wait of each loop trip. The ONE definition of
 * its layout.
 *
 * Plain C++ (no CUDA, no standard headers): nvcc, NVRTC and host compilers accept it. Python mirrors it
 * in argus_rt/kinds/triton/layout.py, which the transform (make_iteration_trace) and the decoders
 * (iteration_waits, iteration_waits_document) in argus_rt/kinds/triton/probes.py use;
 * tests/test_triton_layouts.py compiles this file and compares.
 *
 * Buffer: ArgusIterationWait[n_ctas][loops][iterations] (CTA index linearised as x + nx * (y + ny * z);
 * one block per traced loop, in the order of their consumer waits); trips at or past `iterations` are
 * not recorded. A record whose begin_ns is 0 was not written: a CTA whose loop ran t trips writes
 * iterations 0..t-1 only (causal loops run a different count per CTA).
 */
#ifndef ARGUS_ITERATION_WAIT_H_
#define ARGUS_ITERATION_WAIT_H_

#include "argus_layout.h"

#define ARGUS_ITERATION_WAIT_WORDS 2 /* int64 words of ArgusIterationWait */

struct ArgusIterationWait {
  argus_i64 begin_ns; /* %globaltimer just before the consumer's wait_barrier, ns */
  argus_i64 end_ns;   /* %globaltimer just after it returns, ns */
};

static_assert(sizeof(ArgusIterationWait) == 8 * ARGUS_ITERATION_WAIT_WORDS, "iteration wait words");

#endif /* ARGUS_ITERATION_WAIT_H_ */
