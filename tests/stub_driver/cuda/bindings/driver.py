"""Stand-in CUDA driver API for CPU tests (``cuda.bindings.driver`` as :mod:`argus_rt.launch` calls it).

As the real driver, every call but cuInit fails before cuInit, and memory, module and launch calls
need a current context. "Device memory" is host memory (ctypes buffers); a launch runs a NumPy
version of the named kernel
(examples/ground_truth, examples/cuda) on it. ``$STUB_KERNEL_MODE=zeros`` makes every kernel write
zeros instead (a wrong kernel). At exit the process writes ``$STUB_DRIVER_LOG`` (JSON): the launches,
and whether torch or triton were ever imported in it.
"""
import atexit
import ctypes
import enum
import json
import os
import sys

import numpy as np


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_INVALID_CONTEXT = 201


class CUdevice_attribute(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class CUstream(int):
    pass


OK = CUresult.CUDA_SUCCESS
_current = [0]
_memory: dict[int, ctypes.Array] = {}
_modules: dict[int, bytes] = {}
_functions: dict[int, str] = {}
LOG = {"launches": [], "cuInit": 0}
NOT_INITIALIZED = (CUresult.CUDA_ERROR_NOT_INITIALIZED,)
NO_CONTEXT = (CUresult.CUDA_ERROR_INVALID_CONTEXT,)


def _needs(context: bool = False):
    """The error a call gets before cuInit (or, with ``context``, without a current context)."""
    if not LOG["cuInit"]:
        return NOT_INITIALIZED
    if context and not _current[0]:
        return NO_CONTEXT
    return None


def cuGetErrorName(err):
    return OK, CUresult(err).name.encode()


def cuInit(flags):
    LOG["cuInit"] += 1
    return (OK,)


def cuDeviceGet(ordinal):
    if _needs():
        return _needs()
    return OK, int(ordinal)


def cuDeviceGetAttribute(attr, dev):
    if _needs():
        return _needs()
    return OK, {CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0}[attr]


def cuCtxGetCurrent():
    if _needs():
        return _needs()
    return OK, _current[0]


def cuDevicePrimaryCtxRetain(dev):
    if _needs():
        return _needs()
    return OK, 0xC0DE


def cuCtxSetCurrent(ctx):
    if _needs():
        return _needs()
    _current[0] = int(ctx)
    return (OK,)


def cuCtxSynchronize():
    if _needs(context=True):
        return _needs(context=True)
    return (OK,)


def cuModuleLoadData(data):
    if _needs(context=True):
        return _needs(context=True)
    handle = 0x1000 + len(_modules)
    _modules[handle] = bytes(data)
    return OK, handle


def cuModuleGetFunction(module, name):
    if _needs(context=True):
        return _needs(context=True)
    handle = 0x2000 + len(_functions)
    _functions[handle] = name.decode()
    return OK, handle


def cuMemAlloc(size):
    if _needs(context=True):
        return _needs(context=True)
    buf = ctypes.create_string_buffer(int(size))
    _memory[ctypes.addressof(buf)] = buf
    return OK, ctypes.addressof(buf)


def cuMemFree(ptr):
    if _needs(context=True):
        return _needs(context=True)
    _memory.pop(int(ptr), None)
    return (OK,)


def cuMemcpyHtoD(dst, src, size):
    if _needs(context=True):
        return _needs(context=True)
    ctypes.memmove(int(dst), int(src), int(size))
    return (OK,)


def cuMemcpyDtoH(dst, src, size):
    if _needs(context=True):
        return _needs(context=True)
    ctypes.memmove(int(dst), int(src), int(size))
    return (OK,)


def _array(ptr, dtype):
    buf = _memory[ptr]
    return np.frombuffer(buf, dtype=dtype, count=len(buf) // np.dtype(dtype).itemsize)


def _ground_truth(ptrs, ints):
    xs, ys, out = (_array(p, np.float32) for p in ptrs[:3])
    trips_a, trips_b, trips_inner, trips_helper = ints
    x, y = xs.astype(np.float64), ys.astype(np.float64)
    for c, trips in ((0.5, trips_a), (0.25, 3 * trips_helper), (0.75, trips_b), (0.125, trips_inner),
                     (0.25, trips_helper)):
        for _ in range(trips):
            x = x * y + c
    return out, x.astype(np.float32)


def _nested_regions(ptrs, ints):
    out, inp = (_array(p, np.float32) for p in ptrs[:2])
    n, iters, rounds = ints

    def mix(acc, x):
        for _ in range(rounds):
            acc = acc * 0.75 + x
        return acc

    x = inp.astype(np.float64)
    for _ in range(rounds):
        x = x * 0.5 + 0.25
    acc = mix(np.zeros_like(x), x)
    for it in range(iters):
        acc = mix(acc, x + it)
        for _ in range(rounds):
            acc = acc * 0.5 + 1.0
    return out, acc.astype(np.float32)


KERNELS = {"ground_truth_kernel": (_ground_truth, 3, 4), "nested_regions": (_nested_regions, 2, 3)}


def cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    if _needs(context=True):
        return _needs(context=True)
    name = _functions[int(fn)]
    key = next(k for k in KERNELS if k in name)
    impl, n_ptrs, n_ints = KERNELS[key]
    slots = (ctypes.c_uint64 * (n_ptrs + n_ints)).from_address(int(params))
    ptrs = [ctypes.c_uint64.from_address(slots[i]).value for i in range(n_ptrs)]
    ints = [ctypes.c_int32.from_address(slots[n_ptrs + i]).value for i in range(n_ints)]
    out, values = impl(ptrs, ints)
    out[:] = 0 if os.environ.get("STUB_KERNEL_MODE") == "zeros" else values
    LOG["launches"].append({"kernel": name, "grid": [gx, gy, gz], "block": [bx, by, bz], "ints": ints})
    return (OK,)


@atexit.register
def _write_log():
    path = os.environ.get("STUB_DRIVER_LOG")
    if path:
        LOG.update(torch="torch" in sys.modules, triton="triton" in sys.modules)
        with open(path, "w") as f:
            json.dump(LOG, f)
