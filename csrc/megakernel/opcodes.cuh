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
};

#define INSTR_WORDS 16
#define NO_COUNTER (-1)

enum HeadKind : int { HEAD_Q = 0, HEAD_K = 1, HEAD_V = 2 };
