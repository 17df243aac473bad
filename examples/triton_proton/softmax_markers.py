"""The kernel of softmax_scopes.py with Argus markers in place of the Proton scopes, region for region.

Used by ``benchmarks/proton_interop.py`` to put Argus's own region trace of the same kernel beside
Proton's instrumentation mode (``argus_program.markers.json``, kind ``triton``); inputs, launch and
reference are softmax_scopes.py's.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import triton
import triton.language as tl

from argus_rt import triton_regions as argus

# The program protocol is softmax_scopes.py's (a program module is imported by path, not as a package).
_spec = importlib.util.spec_from_file_location("argus_softmax_scopes", Path(__file__).with_name("softmax_scopes.py"))
_scopes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_scopes)
grid, make_inputs, run, reference = _scopes.grid, _scopes.make_inputs, _scopes.run, _scopes.reference


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    argus.begin("row")
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    argus.begin("row/load")
    x = tl.load(x_ptr + row * stride + cols, mask=inside, other=-float("inf")).to(tl.float32)
    argus.end("row/load")
    argus.begin("row/normalize")
    argus.begin("row/normalize/max")
    shifted = x - tl.max(x, axis=0)
    argus.end("row/normalize/max")
    argus.begin("row/normalize/sum")
    e = tl.exp(shifted)
    total = tl.sum(e, axis=0)
    argus.end("row/normalize/sum")
    y = e / total
    argus.end("row/normalize")
    argus.begin("row/store")
    tl.store(y_ptr + row * stride + cols, y.to(tl.float16), mask=inside)
    argus.end("row/store")
    argus.end("row")
