/* argus_markers.cuh: the marker macros (ARGUS_BEGIN / END / BEGIN_AT / END_AT / SCOPE / SCOPE_AT /
 * WARP_STATE) for the build mode (argus_host.h): nothing (0), PMTRIG immediates (1), or records
 * through the cursors of argus_cursors.cuh (2). Included by argus.cuh in device compilation only.
 *
 * Markers are warp-level: a converged warp records once. Put them where the warp is converged (or
 * accept that each divergent lane group records separately, labelled by its lanes). BEGIN and END of one
 * occurrence must carry the same coordinate. ARGUS_WARP_STATE(); as a function's first statement
 * keeps the ring cursor in registers of that function (cheapest markers; restrictions at
 * argus_detail::RegCursor); without it the cursor lives in shared memory (any function). A __device__ helper
 * takes the caller's register cursor with ARGUS_STATE_PARAM in its parameter list and ARGUS_STATE_ARG at the
 * call (both nothing in modes 0 and 1). Register-cursor markers must run on the whole warp: a warp whose marker ran
 * on part of its lanes marks its ring divergent, and the decoder refuses that ring (at decode time, not at compile
 * time). Opt-in -DARGUS_REG_APART=1 (argus_cursors.cuh): such markers are recorded per lane group instead, as the
 * shared cursor records them (only a cursor declared by part of the warp is still refused). Opt-in
 * -DARGUS_REG_LANES=1: per-lane sub-rings, each lane group's records in its lowest lane's (no shared memory or atomic;
 * restrictions at argus_detail::emit_with of that build and in docs/marker_cost_anatomy.md).
 *
 * Shared-cursor markers (argus_shared_cursor.cuh; the default since issue 20, before it the opt-in
 * -DARGUS_LEAN_MARKERS=1 build, which is now the only one): a straight-line fast path for a converged warp;
 * divergent lane groups record into the warp's ring with their own slots and a lane-group record
 * (ARGUS_KIND_LANES), and the decoder pairs each group's BEGIN/END, so lanes of a warp in different regions are
 * recorded correctly.
 */
#ifndef ARGUS_MARKERS_CUH_
#define ARGUS_MARKERS_CUH_

#include "argus_host.h"

#define ARGUS_CAT_INNER_(a, b) a##b
#define ARGUS_CAT_(a, b) ARGUS_CAT_INNER_(a, b)

#if ARGUS_MODE != 2
/* Without the trace build there is no cursor: the register-cursor declaration and the helper forms vanish, so the
 * trace-free and marker-only builds compile as if they were not written. */
#define ARGUS_WARP_STATE() ((void)0)
#define ARGUS_STATE_PARAM
#define ARGUS_STATE_ARG
#define ARGUS_STATE_VALUE_PARAM
#define ARGUS_RETURNS_STATE(type) type
#define ARGUS_RETURN_STATE(expr) return (expr)
#define ARGUS_TAKE_STATE(call) (call)
#endif

/* ------------------------------------------------------------------------------------------ */
#if ARGUS_MODE == 0

#define ARGUS_BEGIN(id) ((void)0)
#define ARGUS_END(id) ((void)0)
#define ARGUS_BEGIN_AT(id, coord) ((void)0)
#define ARGUS_END_AT(id, coord) ((void)0)
#define ARGUS_SCOPE(id) ((void)0)
#define ARGUS_SCOPE_AT(id, coord) ((void)0)

/* ------------------------------------------------------------------------------------------ */
#elif ARGUS_MODE == 1

/* No "memory" clobber: the marker must not change how the surrounding code touches memory. */
#define ARGUS_PMTRIG_(imm) asm volatile("pmevent.mask %0;" ::"n"((imm)&0xFFFFu))
#define ARGUS_MARK_(kind, id)                         \
  do {                                                \
    ARGUS_PMTRIG_(ARGUS_MARKER_TAG | (kind));         \
    ARGUS_PMTRIG_(((unsigned)(id)) & 0xFFFFu);        \
    ARGUS_PMTRIG_((((unsigned)(id)) >> 16) & 0xFFFFu); \
  } while (0)

namespace argus_detail {
template <argus_u32 ID>
struct MarkerScope {
  __device__ __forceinline__ MarkerScope() { ARGUS_MARK_(ARGUS_MARKER_BEGIN, ID); }
  __device__ __forceinline__ ~MarkerScope() { ARGUS_MARK_(ARGUS_MARKER_END, ID); }
};
}  // namespace argus_detail

#define ARGUS_BEGIN(id) ARGUS_MARK_(ARGUS_MARKER_BEGIN, id)
#define ARGUS_END(id) ARGUS_MARK_(ARGUS_MARKER_END, id)
/* The marker footprint carries no coordinate: scopes are told apart in the trace build. */
#define ARGUS_BEGIN_AT(id, coord) ARGUS_MARK_(ARGUS_MARKER_BEGIN, id)
#define ARGUS_END_AT(id, coord) ARGUS_MARK_(ARGUS_MARKER_END, id)
#define ARGUS_SCOPE(id) argus_detail::MarkerScope<(id)> ARGUS_CAT_(argus_scope_, __LINE__)
#define ARGUS_SCOPE_AT(id, coord) argus_detail::MarkerScope<(id)> ARGUS_CAT_(argus_scope_, __LINE__)

/* ------------------------------------------------------------------------------------------ */
#else /* ARGUS_MODE == 2: trace */

#define ARGUS_WARP_STATE() argus_detail::RegCursor argus_warp_state_
/* A helper's markers on its caller's register cursor: `float f(float a ARGUS_STATE_PARAM)`, called as
 * `f(a ARGUS_STATE_ARG)` from a function with ARGUS_WARP_STATE() (or from another such helper). A caller without
 * one passes the shared cursor's placeholder, which does not convert: refused at compile time. */
#define ARGUS_STATE_PARAM , argus_detail::RegState& argus_warp_state_
#define ARGUS_STATE_ARG , argus_warp_state_
/* The same for a __noinline__ helper, in registers (by reference the caller's cursor would live in local memory):
 *   __device__ __noinline__ ARGUS_RETURNS_STATE(float) f(float a ARGUS_STATE_VALUE_PARAM) { ...; ARGUS_RETURN_STATE(a); }
 *   a = ARGUS_TAKE_STATE(f(a ARGUS_STATE_ARG));
 * The cursor goes in by value; its count and flags come back with the result. */
#define ARGUS_STATE_VALUE_PARAM , argus_detail::RegState argus_warp_state_
#define ARGUS_RETURNS_STATE(type) argus_detail::WithState<type>
#define ARGUS_RETURN_STATE(expr) return argus_detail::with_state((expr), argus_warp_state_)
#define ARGUS_TAKE_STATE(call) argus_detail::take_state((call), argus_warp_state_)
#define ARGUS_BEGIN(id) argus_detail::emit_with(argus_warp_state_, ARGUS_KIND_BEGIN, (id), ARGUS_COORD_NONE)
#define ARGUS_END(id) argus_detail::emit_with(argus_warp_state_, ARGUS_KIND_END, (id), ARGUS_COORD_NONE)
#define ARGUS_BEGIN_AT(id, coord) argus_detail::emit_with(argus_warp_state_, ARGUS_KIND_BEGIN, (id), (coord))
#define ARGUS_END_AT(id, coord) argus_detail::emit_with(argus_warp_state_, ARGUS_KIND_END, (id), (coord))
#define ARGUS_SCOPE(id) \
  argus_detail::TraceScope<decltype(argus_warp_state_)> ARGUS_CAT_(argus_scope_, __LINE__)(argus_warp_state_, (id), ARGUS_COORD_NONE)
#define ARGUS_SCOPE_AT(id, coord) \
  argus_detail::TraceScope<decltype(argus_warp_state_)> ARGUS_CAT_(argus_scope_, __LINE__)(argus_warp_state_, (id), (coord))

#endif /* ARGUS_MODE */

#endif /* ARGUS_MARKERS_CUH_ */
