// Megakernel instruction encoding. megakernel/instructions.py holds the same numbers;
// tests/test_megakernel_encoding.py parses this file and checks that both agree.
#pragma once

enum Opcode : int {
  OP_EMBED = 1,
  OP_QKV_HEAD = 2,
  OP_ATTN_PARTIAL = 3,
  OP_O_PROJ = 4,
  OP_GATE_UP = 5,
  OP_DOWN = 6,
  OP_LOGITS = 7,
  OP_SAMPLE = 8,
};

// Word indices of one instruction (INSTR_WORDS int32 words).
enum InstrWord : int {
  W_OPCODE = 0,
  W_LAYER = 1,
  W_WAIT = 2,
  W_WAIT_COUNT = 3,
  W_WAIT_DELTA = 4,
  W_SIGNAL = 5,
  W_A0 = 6,
  W_A1 = 7,
  W_A2 = 8,
  W_A3 = 9,
  // Prefetch plan, written by the host (megakernel/runtime.py: prefetch_plan), not by the op:
  W_PF_FLAGS = 10,  // bit 0: do not L2-prefetch this tile's own weights; bits PF_GATE_LEN_SHIFT..31: the gated range
  W_PF_A = 11,      // a weight range to L2-prefetch when this ticket is taken: segment << 20 | 16-byte units
  W_PF_A_OFF = 12,  // its start inside the segment, in 16-byte units
  W_PF_B = 13,      // a second range (a window that crosses a segment end)
  W_PF_B_OFF = 14,
  // Row 45 (builds with MK_PF_GATE on): the gate of this tile's gated L2 prefetch, counter << PF_GATE_COUNT_BITS | its signals
  // per step (0: none). Once the counter has them, the tile prefetches the (W_PF_FLAGS >> PF_GATE_LEN_SHIFT) x 16 bytes
  // of its own weights after the head the ticket-time prefetch covered, then waits on W_WAIT as ever.
  W_PF_GATE = 15,
};
#define PF_GATE_LEN_SHIFT 8
#define PF_GATE_COUNT_BITS 10

// Weight segments of the prefetch plan (segment = kind * 256 + layer).
enum PfSegment : int { SEG_WQKV = 0, SEG_WO = 1, SEG_WGU = 2, SEG_WD = 3, SEG_LM_HEAD = 4 };

#define INSTR_WORDS 16
#define NO_COUNTER (-1)
// AttnPartial's A3 in a one-split launch (row 40, MK_ONE_SPLIT): write the heads' normalised output to attn_out
#define ATTN_DIRECT (-2)

enum HeadKind : int { HEAD_Q = 0, HEAD_K = 1, HEAD_V = 2 };
