"""A MegakernelDecoder without a GPU, for tests of what the host computes per launch: the instruction words per
launch key (_instruction_words) and the parameter block (_param_values). Nothing is compiled or launched."""
from __future__ import annotations

import torch

from megakernel.dag import build_decode_program
from megakernel.interpreter import SamplingParams
from megakernel.runtime import MegakernelDecoder
from megakernel.state import DecodeState


def cpu_decoder(c, w, tiles) -> MegakernelDecoder:
    """The decoder of model config ``c``, weights ``w`` and ``tiles`` on CPU tensors, with only the fields those two
    methods read."""
    dec = object.__new__(MegakernelDecoder)
    prog = build_decode_program(c, tiles)
    dec.config, dec.tiles, dec.program, dec.launched, dec.device = c, tiles, prog, prog, torch.device("cpu")
    dec.prefetch_window, dec.prefetch_own, dec.prefetch_gate = None, True, ()
    dec.state = DecodeState.create(prog, w)
    dec.forms = dec._instruction_words(prog)
    dec.ticket = dec.error = dec.stuck = torch.zeros(4, dtype=torch.int32)
    dec.step_ns = torch.zeros(4, dtype=torch.int64)
    dec.n_forced, dec.timeout_ns, dec.prefetch_ahead, dec.stage_bytes = 1, 1, 0, 0
    dec.sampling = SamplingParams()
    return dec
