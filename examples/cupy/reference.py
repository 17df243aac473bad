"""Plain NumPy reference of examples/cupy/row_softmax.cu (float64 on the host).

Argus calls ``row_softmax(x, n_cols)`` with host copies of the launch's inputs (the parameters it
names) and compares the kernel's ``y`` with what it returns, within the launch's rtol / atol.
"""
import numpy as np


def row_softmax(x, n_cols):
    if x.shape[-1] != n_cols:
        raise ValueError(f"this reference expects rows of n_cols = {n_cols} elements, got shape {x.shape}")
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return {"y": e / e.sum(axis=-1, keepdims=True)}
