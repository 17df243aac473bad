"""The numba example of docs/programs.md: the sum of each row of x, one block of BLOCK threads per row.

Three regions inside ``row_reduce``: each thread's strided partial sum (``load``), the shared-memory
tree that combines the block's partials (``tree``, one barrier per level) and the store of the row's
sum (``store``). The module imports without a GPU; Argus compiles the kernel for sm_90 itself.
"""
from numba import cuda, float32

from argus_rt.kinds.numba import markers as argus

ROWS, COLS, BLOCK = 512, 2048, 256


@cuda.jit
def row_reduce(x, out, n_cols):
    argus.begin("row_reduce")
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    partial = cuda.shared.array(BLOCK, float32)
    argus.begin("row_reduce/load")
    acc = float32(0.0)
    for c in range(tid, n_cols, BLOCK):
        acc += x[row, c]
    partial[tid] = acc
    argus.end("row_reduce/load")
    argus.begin("row_reduce/tree")
    cuda.syncthreads()
    stride = BLOCK // 2
    while stride > 0:
        if tid < stride:
            partial[tid] += partial[tid + stride]
        cuda.syncthreads()
        stride //= 2
    argus.end("row_reduce/tree")
    argus.begin("row_reduce/store")
    if tid == 0:
        out[row] = partial[0]
    argus.end("row_reduce/store")
    argus.end("row_reduce")


def reference(x):
    """Plain NumPy: {output parameter: expected array}."""
    return {"out": x.astype("float64").sum(axis=1)}
