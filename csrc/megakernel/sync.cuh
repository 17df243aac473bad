// Monotonic dependency counters and the watchdog.
//
// A producer adds 1 to its counter with release semantics after the whole CTA finished writing;
// a consumer's thread 0 spins with acquire loads until the counter reaches the expected value
// (which grows with the step, so counters are never reset). The spin is bounded by a
// %globaltimer deadline: on expiry the stuck instruction goes to the error slot, every other
// waiter sees the error code and leaves, and the host raises with it.
#pragma once
#include "megakernel_params.h"
#include "config.cuh"
#include "common.cuh"  // globaltimer_ns, ld_acquire, red_release_add

namespace mk {

// MK_RELAXED_POLL (build flag): poll with relaxed loads (no acquire per poll) and make the one poll
// that sees the value an acquire with a fence (ld.relaxed + fence.acq_rel is an acquire pattern).
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

#ifdef MK_RELAXED_POLL
#define MK_POLL(p) ld_relaxed(p)
#define MK_POLL_DONE() fence_acq_rel_gpu()
#else
#define MK_POLL(p) ld_acquire(p)
#define MK_POLL_DONE() ((void)0)
#endif

// Arrival count with acquire and release (MK_LAST_COMBINE: the tile that reads the last count sees every earlier
// arrival's writes; its own writes are released to the later ones): returns the value before the add.
__device__ __forceinline__ unsigned atom_acq_rel_add(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

__device__ __forceinline__ int error_code(const int* err) {
  return *(volatile const int*)err;
}

struct WaitSite {  // what to write to the error slot if this wait never ends
  int ticket, step, index, opcode, layer, counter;
};

// Where a waiter gave up (deadline, or another CTA's error): one row of STUCK_WORDS per CTA. The
// host reports the lowest stuck ticket: every lower ticket had finished or was running, so that
// one's dependency is the one that can never be met.
__device__ __forceinline__ void record_stuck(const Params& p, const WaitSite& site, unsigned expected, unsigned seen) {
  int* row = p.stuck + (size_t)blockIdx.x * STUCK_WORDS;
  row[STUCK_STEP] = site.step;
  row[STUCK_INDEX] = site.index;
  row[STUCK_OPCODE] = site.opcode;
  row[STUCK_LAYER] = site.layer;
  row[STUCK_COUNTER] = site.counter;
  row[STUCK_EXPECTED] = (int)expected;
  row[STUCK_OBSERVED] = (int)seen;
  row[STUCK_TICKET] = site.ticket;
}

// The wait loop. kPair (MK_POLL2 builds only): a second poller (poll_helper, another warp) may see the
// value first and set *seen = 1; this loop then returns too, and on return sets *seen = 2 so the
// helper stops. Without kPair `seen` is unused and the loop is the one measured since 2026-12-01.
template <bool kPair>
__device__ __forceinline__ bool wait_counter_impl(const Params& p, const unsigned* ctr, unsigned expected,
                                                  const WaitSite& site, unsigned long long timeout_ns,
                                                  volatile int* seen) {
  if ((int)(MK_POLL(ctr) - expected) >= 0) {
    MK_POLL_DONE();
    return true;
  }
  const unsigned long long start = globaltimer_ns();
  unsigned spins = 0;
  for (;;) {
    if constexpr (kPair) {
      if (*seen == 1) return true;  // the helper's acquire load saw it (it and this thread meet at a barrier next)
    }
    const unsigned v = MK_POLL(ctr);
    if ((int)(v - expected) >= 0) {
      MK_POLL_DONE();
      return true;
    }
#if MK_SPIN_NS > 0
    __nanosleep(MK_SPIN_NS);  // back off: fewer polls of the hot counter lines in L2
#endif
    if ((++spins & 63u) == 0) {
      if (error_code(p.error) != ERROR_NONE) {
        record_stuck(p, site, expected, v);
        return false;
      }
      if (globaltimer_ns() - start > timeout_ns) {
        if (atomicCAS(p.error, ERROR_NONE, -1) == ERROR_NONE) {  // first to time out reports
          int* e = p.error;
          e[ERR_TICKET] = site.ticket;
          e[ERR_STEP] = site.step;
          e[ERR_INDEX] = site.index;
          e[ERR_OPCODE] = site.opcode;
          e[ERR_LAYER] = site.layer;
          e[ERR_COUNTER] = site.counter;
          e[ERR_EXPECTED] = (int)expected;
          e[ERR_OBSERVED] = (int)v;
          e[ERR_BLOCK] = blockIdx.x;
          __threadfence();
          atomicExch(p.error, ERROR_DEADLOCK);
        }
        record_stuck(p, site, expected, v);
        return false;
      }
    }
  }
}

// Called by thread 0 only. Returns false when the kernel must stop (deadline or another error).
__device__ __noinline__ bool wait_counter(const Params& p, const unsigned* ctr, unsigned expected, const WaitSite& site,
                                          unsigned long long timeout_ns) {
  return wait_counter_impl<false>(p, ctr, expected, site, timeout_ns, nullptr);
}

#if MK_POLL2
// MK_POLL2 (opt-in build flag, benchmarks/decode.py mk_poll2): the dependency is polled by two threads of
// different warps, the second half a poll period behind the first, so a counter update is seen on
// average after a quarter of a poll period instead of half of one. Thread 0 keeps the deadline and the
// error reporting (wait_counter_pair); the helper (thread 32) only polls.
__device__ __noinline__ bool wait_counter_pair(const Params& p, const unsigned* ctr, unsigned expected,
                                               const WaitSite& site, unsigned long long timeout_ns, volatile int* seen) {
  const bool ok = wait_counter_impl<true>(p, ctr, expected, site, timeout_ns, seen);
  *seen = 2;  // the helper stops at its next check
  return ok;
}

// The helper: one timed poll gives the poll period P (an acquire round trip, issued together with thread
// 0's first poll), then it waits P/2 and polls until it sees the value (*seen = 1) or thread 0 is done.
__device__ __noinline__ void poll_helper(const unsigned* ctr, unsigned expected, volatile int* seen) {
  const long long t0 = clock64();
  unsigned v = ld_acquire(ctr);
  if ((int)(v - expected) >= 0) {
    *seen = 1;
    return;
  }
  const long long t1 = clock64(), half = (t1 - t0) / 2;  // clock64 after the load's use: its latency
  while (clock64() - t1 < half && *seen == 0) {
  }
  while (*seen == 0) {
    v = ld_acquire(ctr);
    if ((int)(v - expected) >= 0) {
      *seen = 1;
      return;
    }
  }
}
#endif

__device__ __forceinline__ void raise_error(const Params& p, int code, int ticket, int step, int index, int opcode) {
  if (atomicCAS(p.error, ERROR_NONE, -1) == ERROR_NONE) {
    p.error[ERR_TICKET] = ticket;
    p.error[ERR_STEP] = step;
    p.error[ERR_INDEX] = index;
    p.error[ERR_OPCODE] = opcode;
    p.error[ERR_BLOCK] = blockIdx.x;
    __threadfence();
    atomicExch(p.error, code);
  }
}

}  // namespace mk
