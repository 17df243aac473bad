// Row 37 (opt-in: -DMK_LL_HANDOFF=1, benchmarks/decode.py mk_ll; megakernel/NOTES.md "Ready: row 37"): flag-in-data
// ("LL") hand-offs for the vectors every tile of a phase reads, x, x_mid and h. Producers store each fp32 element
// together with a 32-bit flag as one aligned 64-bit store (value bits low, flag high: single-copy atomic), so a
// consumer's data load is its poll: it re-loads only the 16-byte pairs whose flag is not this step's yet, with no
// counter round trip, fence or CTA barrier between the producer's store and the consumer's data.
//
// The flag of step s is p.ll_base + (s - p.step_begin). The host gives each launch a base above every flag of the
// earlier launches (megakernel/runtime.py: ll_launch_base; zero is never a flag, the buffer is zeroed at allocation),
// so a stale element (an earlier step, layer or launch, a re-used KV position) never holds the expected flag; when the
// 32-bit flags would run out (after 2^32 - 1 decoded steps) the host zeroes the buffer and starts again at 1.
//
// Memory model: the producers still write the plain buffers (interpreter, localisation, profiling) and still signal
// their counters (scheduler, Sample, the watchdog); the plain buffers are read by other consumers only after counter
// waits, and an LL reader reads only LL elements (its residual reads too), so no LL reader depends on a plain store
// that no acquire ordered. Relaxed .gpu accesses are morally strong: a load that sees this step's flag sees that
// store's value in the same 8 bytes.
//
// Watchdog: a pair that stays stale past p.timeout_ns stops the kernel with the stuck report of a counter wait
// (the error slot, the CTA's stuck row); its counter word is LL_COUNTER_BASE - element (the element's index in the
// whole LL buffer), which the host decodes (runtime.py: check_error) into the buffer, layer and element, and the
// instruction's own wait counter, the edge this copy replaces.
#pragma once
#include "megakernel_params.h"
#include "config.cuh"
#include "common.cuh"
#include "sync.cuh"
#include "opcodes.cuh"

#if MK_LL_HANDOFF
namespace mk {

constexpr int PF_LL_INPUT = 2;       // W_PF_FLAGS bit (megakernel/instructions.py PF_LL_INPUT): skip the counter wait
constexpr int LL_COUNTER_BASE = -2;  // a stuck LL wait reports counter = LL_COUNTER_BASE - element
constexpr int LL_SLOTS = 2 * VEC_SLOTS;  // load_vector_ll's 16-byte pairs per thread in flight (h: 11 of 12)

struct LlWait {  // this ticket's watchdog site (thread 0 fills it per ticket) and the CTA's give-up flag
  WaitSite site;
  int failed;
};
// The CTA's one LlWait, at a fixed shared address (no pointer argument to the helpers).
__shared__ LlWait ll_state;

// The LL buffer: x [n_layers + 1][hidden], x_mid [n_layers][hidden], h [n_layers][ffn] (runtime.py: ll_layout).
__device__ __forceinline__ unsigned long long* ll_x(const Params& p, int layer) {
  return p.ll + (size_t)layer * p.hidden;
}
__device__ __forceinline__ unsigned long long* ll_xmid(const Params& p, int layer) {
  return p.ll + (size_t)(p.n_layers + 1 + layer) * p.hidden;
}
__device__ __forceinline__ unsigned long long* ll_h(const Params& p, int layer) {
  return p.ll + (size_t)(2 * p.n_layers + 1) * p.hidden + (size_t)layer * p.ffn;
}
__device__ __forceinline__ unsigned ll_flag(const Params& p, int step) {
  return (unsigned)(p.ll_base + (step - p.step_begin));
}

__device__ __forceinline__ unsigned long long ll_pack(float v, unsigned flag) {
  return (unsigned long long)flag << 32 | __float_as_uint(v);
}
__device__ __forceinline__ float ll_value(unsigned long long e) { return __uint_as_float((unsigned)e); }
__device__ __forceinline__ unsigned ll_tag(unsigned long long e) { return (unsigned)(e >> 32); }
__device__ __forceinline__ bool ll_ready(ulonglong2 v, unsigned flag) {
  return ll_tag(v.x) == flag && ll_tag(v.y) == flag;
}

__device__ __forceinline__ void ll_store(unsigned long long* a, float v, unsigned flag) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(a), "l"(ll_pack(v, flag)) : "memory");
}
// Two elements, a 16-byte aligned: a vector of two 8-byte scalar accesses (each single-copy atomic).
__device__ __forceinline__ void ll_store2(unsigned long long* a, float v0, float v1, unsigned flag) {
  asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(a), "l"(ll_pack(v0, flag)), "l"(ll_pack(v1, flag))
               : "memory");
}
__device__ __forceinline__ ulonglong2 ll_load2(const unsigned long long* a) {
  ulonglong2 v;
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(a));
  return v;
}
__device__ __forceinline__ unsigned long long ll_load1(const unsigned long long* a) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(a));
  return v;
}

// The give-up: the first thread of the CTA to give up reports (error slot if it timed out and no one else did, then
// its stuck row), as wait_counter_impl does for a counter. `seen`: the stale flag it held.
__device__ __noinline__ void ll_give_up(const Params& p, int element, unsigned expected, unsigned seen,
                                        bool timed_out) {
  if (atomicExch(&ll_state.failed, 1) != 0) return;  // one report per CTA
  WaitSite site = ll_state.site;
  site.counter = LL_COUNTER_BASE - element;
  if (timed_out && atomicCAS(p.error, ERROR_NONE, -1) == ERROR_NONE) {
    int* e = p.error;
    e[ERR_TICKET] = site.ticket;
    e[ERR_STEP] = site.step;
    e[ERR_INDEX] = site.index;
    e[ERR_OPCODE] = site.opcode;
    e[ERR_LAYER] = site.layer;
    e[ERR_COUNTER] = site.counter;
    e[ERR_EXPECTED] = (int)expected;
    e[ERR_OBSERVED] = (int)seen;
    e[ERR_BLOCK] = blockIdx.x;
    __threadfence();
    atomicExch(p.error, ERROR_DEADLOCK);
  }
  record_stuck(p, site, expected, seen);
}

// The slow path: re-load one element (two = false) or a 16-byte pair until its flags are `flag`, with the counter
// wait's deadline and error-slot checks. Returns the pair (one element: twice) by value (an address of the caller's
// registers would put them in local memory); on give-up it is garbage and ll_state.failed is set (the worker stops
// after the op's closing barrier, before it signals).
__device__ __noinline__ ulonglong2 ll_wait(const Params& p, const unsigned long long* a, bool two, unsigned flag) {
  const unsigned long long start = globaltimer_ns();
  unsigned spins = 0;
  for (;;) {
    ulonglong2 r;
    if (two) {
      r = ll_load2(a);
    } else {
      r.x = ll_load1(a);
      r.y = r.x;
    }
    if (ll_ready(r, flag)) return r;
#if MK_LL_SPIN_NS > 0
    __nanosleep(MK_LL_SPIN_NS);  // row 37b (mk_ll_sleep): between a thread's re-polls of a stale pair only
#endif
    if ((++spins & 63u) == 0) {
      const bool other = error_code(p.error) != ERROR_NONE;
      if (other || globaltimer_ns() - start > (unsigned long long)p.timeout_ns) {
        const bool first_stale = ll_tag(r.x) != flag;
        ll_give_up(p, (int)(a - p.ll) + (first_stale ? 0 : 1), flag, first_stale ? ll_tag(r.x) : ll_tag(r.y), !other);
        return r;
      }
    }
  }
}

#if MK_LL_HANDOFF == 2
// Row 37c (mk_ll_gate): the one element thread 0 polls before the CTA meets at the barrier: the last element of the
// tile's input vector (x[layer] for QKV, x[n_layers] for Logits, x_mid[layer] for gate/up, h[layer] for Down). The
// host lays a phase's producer tiles out in ascending row order (megakernel/dag.py), so that element is the last
// tile's in ticket order; with static tickets that tile is the phase's last ticket, the likeliest to be written last.
// The kernel knows only the vector; which element is written last is not promised (another CTA may be slower), so
// the sweep still re-polls every stale pair. On give-up ll_state.failed is set, as in the sweep.
__device__ __forceinline__ const unsigned long long* ll_gate_element(const Params& p, int op, int layer) {
  switch (op) {
    case OP_QKV_HEAD: return ll_x(p, layer) + (p.hidden - 1);
    case OP_LOGITS: return ll_x(p, (int)p.n_layers) + (p.hidden - 1);
    case OP_GATE_UP: return ll_xmid(p, layer) + (p.hidden - 1);
    case OP_DOWN: return ll_h(p, layer) + (p.ffn - 1);
    default: return nullptr;  // no other op has PF_LL_INPUT (runtime.py: LL_INPUT_OPS)
  }
}
#endif

// ll_wait_converged, the trace fix (row 37's first GPU run, 18:26: mk_ll's trace did not decode, a decode/gemm END
// with no open region; megakernel/NOTES.md "Row 37 measured"): a lane that found a stale pair runs ll_wait while the
// others go on, and Volta+ does not promise that a warp split by a divergent branch runs together again afterwards,
// nor does bar.sync reconverge it, so a caller's next Argus marker could be recorded by a lane group (an
// ARGUS_KIND_LANES record) and pair with the whole warp's. Every helper below that calls ll_wait ends its divergent
// part with a full-mask __syncwarp() (MK_LL_CONVERGE, trace builds) at a point every thread of the CTA reaches (after its loops: a tile's row loop
// may leave lanes of a warp out, and __syncwarp(mask) with an absent lane of mask is undefined), so its callers'
// markers (MK_REGION's own __syncwarp included) see a converged warp. tests/test_megakernel_ll.py checks the SASS
// (a WARPSYNC after the last ll_wait call of each helper); that the hardware then runs the warp as one group is
// what only the GPU's trace decode shows.
// Trace builds only (ARGUS_MODE != 0): the timed build (mode 0) of mk_ll stays the cubin measured at 18:26, and no
// marker reads a lane mask there.
#if ARGUS_MODE != 0
#define MK_LL_CONVERGE() __syncwarp()
#else
#define MK_LL_CONVERGE() ((void)0)
#endif
// One element (the residual reads of O-proj and Down).
__device__ __forceinline__ float ll_read(const Params& p, const unsigned long long* a, unsigned flag) {
  ulonglong2 v;
  v.x = ll_load1(a);
  v.y = v.x;
  if (ll_tag(v.x) != flag) v = ll_wait(p, a, false, flag);
  return ll_value(v.x);
}

// The residual of O-proj and Down: plain[r] = LL src[r] + out[r], and the sum to the LL copy dst, for r < rows. Not
// inlined: a call to ll_wait inside op_oproj / op_down made ptxas reload the kernel's live values after it (300 B of
// spill loads in the kernel instead of 44; nvcc 13.0, 2026-12-02).
__device__ __noinline__ void ll_residual(const Params& p, const unsigned long long* src, const float* out, int rows,
                                         float* plain, unsigned long long* dst, unsigned flag) {
  for (int r = threadIdx.x; r < rows; r += THREADS) {
    const float v = ll_read(p, src + r, flag) + out[r];
    plain[r] = v;
    ll_store(dst + r, v, flag);
  }
  MK_LL_CONVERGE();  // the trace fix (see "ll_wait_converged" above)
}

// load_rmsnorm (gemv.cuh) from an LL vector: the same arithmetic in the same order on the same values, so xs and
// rstd are bit for bit load_rmsnorm's. A thread's 4 pairs of a chunk are loaded before any flag is tested.
__device__ __noinline__ float load_rmsnorm_ll(const Params& p, const unsigned long long* x, const __nv_bfloat16* __restrict__ g,
                                              int n, float eps, float* xs, float* scratch, unsigned flag) {
  float ss = 0.f;
  const uint4* g8 = reinterpret_cast<const uint4*>(g);
  float4* xs4 = reinterpret_cast<float4*>(xs);
#pragma unroll 4
  for (int c = threadIdx.x; c < (n >> 3); c += THREADS) {
    ulonglong2 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = ll_load2(x + 8 * c + 2 * k);
    const uint4 gw = __ldg(g8 + c);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (!ll_ready(v[k], flag)) v[k] = ll_wait(p, x + 8 * c + 2 * k, true, flag);
    const float4 a = make_float4(ll_value(v[0].x), ll_value(v[0].y), ll_value(v[1].x), ll_value(v[1].y));
    const float4 b = make_float4(ll_value(v[2].x), ll_value(v[2].y), ll_value(v[3].x), ll_value(v[3].y));
    ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
    xs4[2 * c] = make_float4(a.x * bf_lo(gw.x), a.y * bf_hi(gw.x), a.z * bf_lo(gw.y), a.w * bf_hi(gw.y));
    xs4[2 * c + 1] = make_float4(b.x * bf_lo(gw.z), b.y * bf_hi(gw.z), b.z * bf_lo(gw.w), b.w * bf_hi(gw.w));
  }
  MK_LL_CONVERGE();  // the trace fix (see "ll_wait_converged" above)
  const float total = block_sum(ss, scratch);  // its barriers also publish xs
  return rsqrtf(total / (float)n + eps);
}

// load_vector (gemv.cuh) from an LL vector (n even, n <= SMEM_FLOATS): a thread's first LL_SLOTS pairs are loaded
// before any is tested (indices clamped to the last pair: branch-free), then each is waited for and stored; the rest
// (n > LL_SLOTS * 2 * THREADS = 6144) one pair at a time. Ends at a CTA barrier.
__device__ __noinline__ void load_vector_ll(const Params& p, const unsigned long long* x, int n, float* xs, unsigned flag) {
  float2* xs2 = reinterpret_cast<float2*>(xs);
  const int n2 = n >> 1;
  ulonglong2 v[LL_SLOTS];
#pragma unroll
  for (int i = 0; i < LL_SLOTS; ++i) v[i] = ll_load2(x + 2 * min((int)threadIdx.x + i * THREADS, n2 - 1));
#pragma unroll
  for (int i = 0; i < LL_SLOTS; ++i) {
    const int c = threadIdx.x + i * THREADS;
    if (c < n2) {
      if (!ll_ready(v[i], flag)) v[i] = ll_wait(p, x + 2 * c, true, flag);
      xs2[c] = make_float2(ll_value(v[i].x), ll_value(v[i].y));
    }
  }
  MK_LL_CONVERGE();  // the trace fix (see "ll_wait_converged" above)
#pragma unroll 1
  for (int c = threadIdx.x + LL_SLOTS * THREADS; c < n2; c += THREADS) {
    ulonglong2 r = ll_load2(x + 2 * c);
    if (!ll_ready(r, flag)) r = ll_wait(p, x + 2 * c, true, flag);
    xs2[c] = make_float2(ll_value(r.x), ll_value(r.y));
  }
  MK_LL_CONVERGE();
  __syncthreads();
}

}  // namespace mk
#endif
