// Compile-time shape of a worker CTA and the shared-memory budget; the host checks a model fits
// (megakernel/runtime.py: check_fits) before launching.
#pragma once

namespace mk {
constexpr int THREADS = 256;             // threads per CTA (scheduler and workers)
constexpr int NWARPS = THREADS / 32;
constexpr int SMEM_FLOATS = 8192;        // activation vector (K <= 8192) or attention scores
constexpr int MAX_TILE_ROWS = 256;       // GEMV tile outputs kept in shared memory
// Tuning knobs a build may override (-DMK_GEMV_ROWS=..., megakernel.build extra flags).
#ifndef MK_GEMV_ROWS
#define MK_GEMV_ROWS 2
#endif
#ifndef MK_GEMV_UNROLL
#define MK_GEMV_UNROLL 8
#endif
#ifndef MK_GEMV_BATCH
#define MK_GEMV_BATCH 0  // 1: all 16 loads of a block in flight per warp; measured 11% slower (NOTES.md, 12:54)
#endif
// The batched GEMV only in the ops alone on the latency chain, the plain loop in gate/up, down and
// logits (opt-in, not yet GPU-measured: NOTES.md "Ready for the next device run"). Off: the default
// build's SASS is the same as without these flags.
#ifndef MK_BATCH_QKV
#define MK_BATCH_QKV 0  // 1: QKV head tiles use gemv_tile_batch (benchmarks/decode.py mk_batch_qkv)
#endif
#ifndef MK_BATCH_O
#define MK_BATCH_O 0  // 1: O-proj tiles use gemv_tile_batch (mk_batch_o; both: mk_batch_chain)
#endif
#ifndef MK_BATCH_PLAIN
#define MK_BATCH_PLAIN 0  // 1 (control, with MK_BATCH_QKV/O): gemv_tile_batch runs the plain loop (mk_chain_ctl)
#endif
#ifndef MK_VEC_BATCH
#define MK_VEC_BATCH 1  // load_vector issues all of a thread's loads before any store (gemv.cuh; default since row 25; 0: mk_vecserial)
#endif
#ifndef MK_RING
#define MK_RING 0  // N > 0: GEMV weights as N bulk-copied 16 KiB pages per CTA (ring.cuh; mk_ringN, opt-in)
#endif
#ifndef MK_POLL2
#define MK_POLL2 0  // 1: two pollers per dependency wait, staggered by half a poll period (sync.cuh; mk_poll2)
#endif
#ifndef MK_SPIN_NS
#define MK_SPIN_NS 0  // nanosleep between dependency polls (0: spin)
#endif
#ifndef MK_THREADFENCE
#define MK_THREADFENCE 0  // 1: __threadfence() before each counter's release add (the old hand-off)
#endif
#ifndef MK_LAST_COMBINE
// 1: the attention combine once per KV-head group, by its last-arriving AttnPartial tile, into a buffer O-proj
// loads (attention.cuh: combine_group; TileShape(last_combine=True) sets it: benchmarks/decode.py mk_lastcombine).
// 0: every O-proj tile combines all heads' splits itself (load_attention_combined), the default. 2 (row 27,
// TileShape(last_combine="auto")): both, chosen per instruction (megakernel.cu), so per launch by the host; with
// MK_ONE_SPLIT and MK_EARLY_REGS (row 57, TileShape(last_combine="long")) the long-split launches combine by last
// arrival and their O-proj tiles take the early path.
#define MK_LAST_COMBINE 0
#endif
#if MK_LAST_COMBINE < 0 || MK_LAST_COMBINE > 2
#error "MK_LAST_COMBINE is 0 (O-proj combine), 1 (last arrival) or 2 (both, per instruction)"
#endif
#ifndef MK_PF_OWN_CAP
// Row 34 (the default since its H200 run, 2026-12-02 14:41: kv 128 unchanged, kv 1024 -2.0%; with the decoder's
// prefetch_own=True): a ticket's L2 prefetch of its own tile before the dependency wait covers at most this many
// leading bytes of the tile (0: the whole tile, mk_pfown, rows 10-11, which measured slower). The head is what the
// tile's first loads read when the wait ends, so their DRAM latency can pass during the wait while the extra traffic
// stays small (263 x cap per phase). Control: benchmarks/decode.py mk_nopfhead (no own prefetch).
#define MK_PF_OWN_CAP 32768
#endif
#if MK_PF_OWN_CAP < 0 || MK_PF_OWN_CAP % 16
#error "MK_PF_OWN_CAP is a byte count, a multiple of 16 (0: the whole tile)"
#endif
#ifndef MK_ATTN_V2
// 1 (row 32, the default since its H200 run: -5.2% at kv 128, -3.9% at kv 1024): AttnPartial tiles of 1 or 2
// query heads run attention_partial_v2_t (attention.cuh): q, K and V in one round trip, softmax and PV per lane in
// registers, one CTA barrier; 4- and 8-head tiles keep the three-pass tile. 0 (benchmarks/decode.py mk_attn_v1, the
// control): every tile runs the three-pass attention_partial_t.
#define MK_ATTN_V2 1
#endif
#ifndef MK_DOWN_PIECES
// Row 36 (the default since its H200 run, 2026-12-02 17:54: 0.929 -> 0.906 ms/token at kv 128, 0.986 -> 0.962 at kv
// 1024; NOTES.md "Row 36 measured"): 1: Down tiles run gemv_tile_pieces (gemv.cuh), each warp one row's two K-halves
// at a time, so every warp of an 8-row tile (DEFAULT_TILES: down_rows=8) streams. 2: the control mk_down8_ctl, the
// same code with only warps 0-3 taking rows (mk_down8's 4 streaming warps per CTA). 0: gemv_tile (benchmarks/decode.py
// mk_down16 with 16-row tiles: the default before row 36); the staged (stage_bytes) and ring (MK_RING) paths need 0.
#define MK_DOWN_PIECES 1
#endif
#if MK_DOWN_PIECES < 0 || MK_DOWN_PIECES > 2
#error "MK_DOWN_PIECES is 0 (off), 1 (every warp streams Down pieces) or 2 (the control: 4 warps per CTA)"
#endif
#if MK_DOWN_PIECES && MK_RING
#error "MK_DOWN_PIECES has no page-ring path: build MK_RING with -DMK_DOWN_PIECES=0"
#endif
#ifndef MK_O_PIECES
// Row 38 (opt-in, not yet GPU-run; NOTES.md "Ready: rows 38-39"): 1: O-proj tiles stream through gemv_batches
// (gemv.cuh), each warp one row (benchmarks/decode.py mk_o_pieces, with TileShape(o_rows=8): every warp of both
// CTAs per SM streams) in batches of MK_O_TRIPS trips, all of a batch's loads before its first FFMA (K 2048: the
// whole row, 8 loads per lane, in one batch). A staged tile (stage_bytes) keeps tile_gemv. 0: the default build.
#define MK_O_PIECES 0
#endif
#ifndef MK_O_TRIPS
#define MK_O_TRIPS 8  // loads per lane per O-proj batch (one piece per row): 2048 / 8 / 32 = 8, one batch per row
#endif
#if MK_O_PIECES < 0 || MK_O_PIECES > 1
#error "MK_O_PIECES is 0 (off) or 1 (on)"
#endif
#if MK_O_TRIPS < 1
#error "MK_O_TRIPS is a trip count >= 1"
#endif
#if MK_O_PIECES && (MK_RING || MK_BATCH_O)
#error "MK_O_PIECES has no page-ring path and replaces MK_BATCH_O's loop: build it with MK_RING=0 and MK_BATCH_O=0"
#endif
#ifndef MK_ONE_SPLIT
// Row 40 (opt-in, not yet GPU-run; NOTES.md "Ready: row 40"; TileShape(single_split=N) sets it): 1: an AttnPartial
// tile whose A3 is ATTN_DIRECT (the host's one-split launches: one non-empty split per head) writes its heads'
// normalised output o / l straight to attn_out[layer], and an O-proj tile whose A2 is set loads that vector instead of
// combining the splits (megakernel.cu: oproj_input). 0: the default build unchanged.
#define MK_ONE_SPLIT 0
#endif
#if MK_ONE_SPLIT < 0 || MK_ONE_SPLIT > 1
#error "MK_ONE_SPLIT is 0 (off) or 1 (one-split launches write attn_out, O-proj loads it)"
#endif
#if MK_ONE_SPLIT && MK_LAST_COMBINE == 1
#error "MK_ONE_SPLIT and MK_LAST_COMBINE=1 both write attn_out in every launch: build MK_LAST_COMBINE=2 with it"
#endif
// Removed experiments (NOTES.md "Rows 37, 37b-c and 39 removed", "Row 43 removed"): refused rather than silently built
// without them.
#if defined(MK_LL_HANDOFF) || defined(MK_LL_SPIN_NS) || defined(MK_DOWN_BODY) || defined(MK_DOWN_TRIPS) || \
    defined(MK_KV_STAGE) || defined(MK_KV_STAGE_BYTES)
#error "MK_LL_HANDOFF, MK_LL_SPIN_NS, MK_DOWN_BODY and MK_DOWN_TRIPS were removed in session 15 (rows 37 and 39), MK_KV_STAGE and MK_KV_STAGE_BYTES in session 16 (row 43): drop the flag"
#endif
#if defined(MK_ATTN_U) || defined(MK_ATTN_O) || defined(MK_ATTN_O_LINES) || defined(MK_EARLY_KSPLIT)
#error "MK_ATTN_U (row 50), MK_ATTN_O and MK_ATTN_O_LINES (rows 51-51c) and MK_EARLY_KSPLIT (row 52) were removed in session 18 (NOTES.md \"Rows 50-51 removed\", \"Row 52 measured\"): drop the flag"
#endif
#if defined(MK_LL) || defined(MK_LL_TAIL) || defined(MK_INS_AHEAD)
#error "MK_LL and MK_LL_TAIL (rows 53-53e, flag-in-data residual words on the early tiles) and MK_INS_AHEAD (row 56, the next ticket's words by cp.async) were removed in session 21 (NOTES.md \"Row 53 measured\", \"Row 56 measured\"): drop the flag"
#endif
#ifndef MK_KV_PREFETCH
// Row 44 (opt-in, not yet GPU-run; NOTES.md "Ready: row 44"): 1: an AttnPartial tile's warp 0 bulk-prefetches its
// split's K and V rows (up to this step's position) into L2 before the tile's dependency wait, as the weight tiles
// prefetch their weights (attention.cuh: kv_prefetch_l2). Row 43 without its shared buffer: nothing else changes. 0: off.
#define MK_KV_PREFETCH 0
#endif
#if MK_KV_PREFETCH < 0 || MK_KV_PREFETCH > 1
#error "MK_KV_PREFETCH is 0 (off) or 1 (an attention tile's K/V rows prefetched into L2 before its wait)"
#endif
#ifndef MK_PF_GATE
// Row 45 (opt-in, not yet GPU-run; NOTES.md "Ready: row 45"): 1: a tile whose W_PF_GATE word names a gate (the host's
// prefetch plan, runtime.prefetch_plan's ``gate``: an earlier phase of the same layer) waits for that counter first,
// then L2-prefetches the part of its own weights after the ticket-time head, then waits on its dependency as ever:
// the bytes move while the phases between (attention, the hand-offs) leave DRAM idle. 2 (row 46): the gated bytes go
// to shared memory instead (the stage buffer, p.stage_bytes: the gated tiles' alone, no ticket-time staging), read by
// tile_gemv as a staged prefix. 0: the word is ignored.
#define MK_PF_GATE 0
#endif
#if MK_PF_GATE < 0 || MK_PF_GATE > 2
#error "MK_PF_GATE is 0 (off), 1 (a tile's W_PF_GATE-gated L2 prefetch of its own weights) or 2 (the same into shared memory)"
#endif
#if MK_PF_GATE == 2 && MK_RING
#error "MK_PF_GATE=2 stages into the stage buffer: no MK_RING with it"
#endif
#ifndef MK_EARLY_REGS
// Rows 48 + 48b (the decoder's default through TileShape.early_regs=7; NOTES.md "Row 48 measured"; early.cuh); the
// plain build (no flag) is 0. Bit 1: QKV tiles, bit 2: one-split O-proj tiles of 16 rows x
// K = 2048 load their whole weight tile into registers before their dependency wait; bit 4 (row 48b): gate/up tiles
// their first 16 rows; bit 8 (row 48c, opt-in): Down tiles their rows' first GEMV_UNROLL trips. 0: off.
#define MK_EARLY_REGS 0
#endif
#if MK_EARLY_REGS < 0 || MK_EARLY_REGS > 15
#error "MK_EARLY_REGS is a mask of 1 (QKV tiles), 2 (one-split O-proj tiles), 4 (gate/up tiles' first rows) and 8 (Down tiles' first trips); 0 is off"
#endif
#if MK_EARLY_REGS && (MK_RING || MK_PF_GATE || MK_POLL2 || MK_GEMV_BATCH || MK_LAST_COMBINE == 1)
#error "MK_EARLY_REGS replaces the wait and the GEMV of its tiles: build it without MK_RING, MK_PF_GATE, MK_POLL2, MK_GEMV_BATCH and MK_LAST_COMBINE=1"
#endif
#if (MK_EARLY_REGS & 1) && MK_BATCH_QKV
#error "MK_EARLY_REGS=1 or 3 replaces QKV's GEMV loop: build it without MK_BATCH_QKV"
#endif
#if (MK_EARLY_REGS & 2) && (MK_BATCH_O || MK_O_PIECES || !MK_ONE_SPLIT)
#error "MK_EARLY_REGS=2 or 3 replaces one-split O-proj tiles' GEMV loop: build it with MK_ONE_SPLIT=1, without MK_BATCH_O and MK_O_PIECES"
#endif
#ifndef MK_COMBINE_AHEAD
// Row 58 (the default since its H200 run, 2026-12-04 20:56: kv 1024 0.889 vs 0.916 ms/token): the O-proj combine
// (load_attention_combined) loads C = MK_COMBINE_AHEAD splits' outputs per chunk, the first chunk during the weights
// pass. 0: the loop of 2 splits after the weights (the control, mk_comb_loop).
#define MK_COMBINE_AHEAD 5
#endif
#if MK_COMBINE_AHEAD < 0 || MK_COMBINE_AHEAD > 8
#error "MK_COMBINE_AHEAD is 0 (off) or the splits per chunk, 1 to 8"
#endif
#ifndef MK_COMBINE_LANES
// Row 59 (the default with row 58's combine since its H200 run, 2026-12-04 21:29: kv 1024 0.876 vs 0.891 ms/token):
// row 58's combine weights with each head's (max, sum) loads spread over 8 lanes (one 8-byte load each, then
// shuffles) instead of 16 loads on one lane (attention.cuh: combine_weights_lanes). 0: the control, mk_comb_heads.
#define MK_COMBINE_LANES (MK_COMBINE_AHEAD != 0)
#endif
#if MK_COMBINE_LANES < 0 || MK_COMBINE_LANES > 1 || (MK_COMBINE_LANES && !MK_COMBINE_AHEAD)
#error "MK_COMBINE_LANES is 0 (off) or 1 (row 58's combine weights by 8 lanes per head: needs MK_COMBINE_AHEAD)"
#endif
#ifndef MK_TAIL_LOADS
// Row 55 (the default since its H200 run; 0 = the control, mk_tail_late): the last loads of a tile issued early, off
// its critical path: Down's and the early O-proj's residual input, the early QKV tile's RoPE angle.
#define MK_TAIL_LOADS 1
#endif
#ifndef MK_TMA_INPUT
// Row 60 (opt-in, NOTES.md "Ready: row 60"; tma_input.cuh, early.cuh): an early tile's input vector comes by bulk
// copies, issued by thread 0 the moment its poll sees the counter, instead of by every thread's loads after the
// barrier: bit 1 the QKV and gate/up norms' x and norm weights, bit 2 the early O-proj's attn_out, bit 4 Down's h
// (issued in op_down, after the worker's barrier). 0: off (the loads).
#define MK_TMA_INPUT 0
#endif
#if MK_TMA_INPUT < 0 || MK_TMA_INPUT > 7 || (MK_TMA_INPUT && !MK_EARLY_REGS)
#error "MK_TMA_INPUT is a mask of 1 (the early QKV / gate/up norms' inputs), 2 (the early O-proj's attn_out) and 4 (Down's h), with MK_EARLY_REGS; 0 is off"
#endif
#ifndef MK_SAMPLE_BATCH
#define MK_SAMPLE_BATCH 16  // logit loads per thread in flight in the unfused Sample op (MK_FUSED_SAMPLE=0)
#endif
#ifndef MK_BLOCKS_PER_SM
#define MK_BLOCKS_PER_SM 2  // CTAs co-resident per SM (__launch_bounds__ min blocks: caps registers at 128)
#endif
constexpr int GEMV_ROWS = MK_GEMV_ROWS;      // rows a warp streams at once (loads in flight = rows x unroll)
constexpr int GEMV_UNROLL = MK_GEMV_UNROLL;  // 16-byte chunks per row per loop trip
constexpr int COMBINE_PER_THREAD = 8;    // attention outputs per thread in the O-proj combine (hidden <= 8 * THREADS)
constexpr int MAX_SPLITS = 32;           // attention splits per head (O-proj combine weights in shared memory)
constexpr int MAX_GROUP = 8;             // query heads per KV head (GQA) kept in registers
constexpr int VEC_SLOTS = 6;             // MK_VEC_BATCH's float4 loads per thread in flight (TinyLlama's 5632: 5-6)
constexpr int SPREAD_SMS = 256;          // per-SM slot counters of MK_SM_SPREAD's registration (megakernel.cu: spread_rank)
static_assert(THREADS % 32 == 0, "whole warps");
static_assert(SMEM_FLOATS * 4 + MAX_TILE_ROWS * 4 <= 48 * 1024, "static shared memory stays under 48 KiB");
}  // namespace mk
