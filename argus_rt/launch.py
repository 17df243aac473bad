"""A small kernel launcher for cubins over cuda-python's driver API (``cuda.bindings.driver``).

    mod = CubinModule.load("kernel.cubin")            # in the device's primary context (torch's)
    mod.write_global("argus_ctl", ctl_bytes)          # set a __device__ global
    mod.launch("my_kernel", grid=(128,), block=(256,), args=[x_tensor, np.int32(n)])

Arguments: torch tensors (CUDA) and :class:`DeviceArray` buffers pass their data pointer; numpy
scalars keep their type (np.int32, np.uint64, np.float32, ...); a Python int is an int32 (rejected
when it does not fit) and a Python float a float32. cuda-python is optional for the rest of
argus_rt; only this module needs it, and it says so when it is missing.

torch is never imported here: where the process has imported it, the module is loaded in torch's
context and launches go to torch's current stream; otherwise the driver's primary context (the one
torch would use) and the legacy default stream. So a process that launches a cubin on
:class:`DeviceArray` buffers (the profiled run of a CUDA program, :mod:`argus_rt.kinds.cuda.run`)
pays neither torch's import nor its CUDA initialisation.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import Sequence

import numpy as np


class LaunchError(RuntimeError):
    """A driver call failed, or the launcher was given something it cannot pass to a kernel."""


def _driver():
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python
        except ImportError as exc:
            raise LaunchError(
                "argus_rt.launch needs cuda-python (pip install cuda-python); it is not installed"
            ) from exc
    return driver


def _check(result, what: str):
    """Unpack a cuda-python (err, *values) tuple, raising LaunchError with the driver's error name."""
    drv = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != int(drv.CUresult.CUDA_SUCCESS):
        name = drv.cuGetErrorName(err)
        label = name[1].decode() if name[0] == drv.CUresult.CUDA_SUCCESS else str(err)
        raise LaunchError(f"{what} failed: {label}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


_SCALARS = {
    np.int8: ctypes.c_int8, np.uint8: ctypes.c_uint8, np.int16: ctypes.c_int16, np.uint16: ctypes.c_uint16,
    np.int32: ctypes.c_int32, np.uint32: ctypes.c_uint32, np.int64: ctypes.c_int64, np.uint64: ctypes.c_uint64,
    np.float32: ctypes.c_float, np.float64: ctypes.c_double,
}


def pack_argument(arg, index: int = 0):
    """A ctypes object holding one kernel argument (see the module docstring for the rules)."""
    if hasattr(arg, "data_ptr") and hasattr(arg, "is_cuda"):
        if not arg.is_cuda:
            raise LaunchError(f"kernel argument {index} is a CPU tensor; move it to the GPU (.cuda()) first")
        return ctypes.c_uint64(arg.data_ptr())
    if isinstance(arg, np.generic):
        ctype = _SCALARS.get(type(arg))
        if ctype is None:
            raise LaunchError(f"kernel argument {index}: numpy type {type(arg).__name__} unsupported; "
                              f"valid: {', '.join(t.__name__ for t in _SCALARS)}")
        return ctype(arg.item())
    if isinstance(arg, bool):
        raise LaunchError(f"kernel argument {index} is a bool; pass np.int32(0/1) or np.uint8 explicitly")
    if isinstance(arg, int):
        if not -(2**31) <= arg < 2**31:
            raise LaunchError(f"kernel argument {index} = {arg} does not fit an int32; pass np.int64/np.uint64")
        return ctypes.c_int32(arg)
    if isinstance(arg, float):
        return ctypes.c_float(arg)
    if isinstance(arg, ctypes._SimpleCData):
        return arg
    raise LaunchError(f"kernel argument {index} has unsupported type {type(arg).__name__}; valid: CUDA tensor, "
                      "numpy scalar, int (int32), float (float32), ctypes scalar")


def _dim3(dims, what: str) -> tuple[int, int, int]:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if not 1 <= len(dims) <= 3 or any((not isinstance(d, int)) or d < 1 for d in dims):
        raise LaunchError(f"{what} must be 1 to 3 positive ints, got {dims!r}")
    return dims + (1,) * (3 - len(dims))


def _torch():
    """torch, if this process has imported it (never imported here: it costs seconds)."""
    return sys.modules.get("torch")


def _ensure_context(device: int):
    """Make ``device``'s primary context current on this thread (torch's, when torch is loaded),
    creating it if needed."""
    drv = _driver()
    torch = _torch()
    if torch is not None:
        torch.cuda.set_device(device)
        torch.zeros(1, device=f"cuda:{device}")  # forces the runtime to create and bind the primary context
    _check(drv.cuInit(0), "cuInit")  # no-op once initialised; without torch nothing else initialises the driver
    ctx = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is None or int(ctx) == 0:
        dev = _check(drv.cuDeviceGet(device), "cuDeviceGet")
        ctx = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def _stream_handle(stream) -> int:
    if stream is None:
        torch = _torch()
        return int(torch.cuda.current_stream().cuda_stream) if torch is not None else 0
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    return int(stream)


def device_capability(device: int = 0) -> tuple[int, int]:
    """(major, minor) compute capability of ``device`` from the driver (no context, no torch)."""
    drv = _driver()
    _check(drv.cuInit(0), "cuInit")
    dev = _check(drv.cuDeviceGet(device), "cuDeviceGet")
    attr = drv.CUdevice_attribute
    major = _check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                   "cuDeviceGetAttribute")
    minor = _check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                   "cuDeviceGetAttribute")
    return int(major), int(minor)


def synchronize() -> None:
    """Wait for all work of the current context (every stream, torch's included)."""
    _check(_driver().cuCtxSynchronize(), "cuCtxSynchronize")


def host_copy_source(data) -> tuple[np.ndarray, bool]:
    """The contiguous host array a copy of ``data`` reads, and whether it is the caller's own memory
    (an array, or a view of one). False: a temporary made here (from bytes, or to make ``data``
    contiguous), which an asynchronous copy must not outlive."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(data), dtype=np.uint8), False
    buf = np.ascontiguousarray(data)
    return buf, isinstance(data, np.ndarray) and np.may_share_memory(buf, data)


class DeviceArray:
    """A device allocation holding one numpy array's bytes (``cuMemAlloc``), passed to a kernel as its
    pointer like a CUDA tensor: ``DeviceArray.from_host(a)``, launch, ``.to_host()``. Needs a current
    context (:meth:`CubinModule.load` makes one)."""

    is_cuda = True

    def __init__(self, shape, dtype) -> None:
        self.shape, self.dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._ptr = int(_check(_driver().cuMemAlloc(max(self.nbytes, 1)), f"cuMemAlloc({self.nbytes})"))

    @classmethod
    def from_host(cls, array: np.ndarray) -> "DeviceArray":
        host = np.ascontiguousarray(array)
        out = cls(host.shape, host.dtype)
        if out.nbytes:
            _check(_driver().cuMemcpyHtoD(out._ptr, host.ctypes.data, out.nbytes), "cuMemcpyHtoD")
        return out

    def data_ptr(self) -> int:
        if self._ptr is None:
            raise LaunchError("DeviceArray used after free()")
        return self._ptr

    def to_host(self) -> np.ndarray:
        """A host copy (synchronous: after the work queued before it on the legacy default stream)."""
        out = np.empty(self.shape, dtype=self.dtype)
        if self.nbytes:
            _check(_driver().cuMemcpyDtoH(out.ctypes.data, self.data_ptr(), self.nbytes), "cuMemcpyDtoH")
        return out

    def free(self) -> None:
        if self._ptr is not None:
            _check(_driver().cuMemFree(self._ptr), "cuMemFree")
            self._ptr = None


class CubinModule:
    """A loaded cubin: functions by name, ``__device__`` globals by name, launches."""

    def __init__(self, handle, image_name: str = "<memory>") -> None:
        self._handle = handle
        self.name = image_name
        self._functions: dict[str, object] = {}
        self._globals: dict[str, tuple[int, int]] = {}

    @classmethod
    def load(cls, image: str | os.PathLike | bytes, device: int = 0) -> "CubinModule":
        """Load a cubin (path or bytes) into ``device``'s primary context (torch's, when torch is loaded)."""
        drv = _driver()
        _ensure_context(device)
        if isinstance(image, (str, os.PathLike)):
            path = Path(image)
            if not path.is_file():
                raise LaunchError(f"cubin {str(path)!r} does not exist")
            data, label = path.read_bytes(), str(path)
        else:
            data, label = bytes(image), "<memory>"
        handle = _check(drv.cuModuleLoadData(data), f"cuModuleLoadData({label})")
        return cls(handle, label)

    def function(self, name: str):
        fn = self._functions.get(name)
        if fn is None:
            fn = _check(_driver().cuModuleGetFunction(self._handle, name.encode()), f"cuModuleGetFunction({name!r})")
            self._functions[name] = fn
        return fn

    def global_address(self, name: str) -> tuple[int, int]:
        """(device address, size in bytes) of a ``__device__`` global."""
        found = self._globals.get(name)
        if found is None:
            ptr, size = _check(_driver().cuModuleGetGlobal(self._handle, name.encode()), f"cuModuleGetGlobal({name!r})")
            found = (int(ptr), int(size))
            self._globals[name] = found
        return found

    def write_global(self, name: str, data: bytes | np.ndarray, stream=None, blocking: bool = True) -> None:
        """Copy ``data`` into global ``name`` (its whole size). ``blocking=False`` enqueues the copy on
        ``stream`` (torch's current stream by default, when torch is loaded) from host memory the caller keeps unchanged
        until the stream reaches it. Bytes, or an array that must be copied to be contiguous, are copied
        through a temporary this function owns: that copy is enqueued on ``stream`` and waited for
        before returning, so the driver never reads the temporary after it is freed."""
        drv = _driver()
        ptr, size = self.global_address(name)
        buf, callers = host_copy_source(data)
        if buf.nbytes != size:
            raise LaunchError(f"global {name!r} is {size} bytes, got {buf.nbytes} bytes to write")
        if blocking:
            _check(drv.cuMemcpyHtoD(ptr, buf.ctypes.data, size), f"cuMemcpyHtoD({name!r})")
            return
        handle = drv.CUstream(_stream_handle(stream))
        _check(drv.cuMemcpyHtoDAsync(ptr, buf.ctypes.data, size, handle), f"cuMemcpyHtoDAsync({name!r})")
        if not callers:  # ``buf`` dies with this call: the stream must be past the copy first
            _check(drv.cuStreamSynchronize(handle), f"cuStreamSynchronize (write of {name!r})")

    def read_global(self, name: str) -> np.ndarray:
        """The bytes of global ``name`` (synchronous)."""
        ptr, size = self.global_address(name)
        out = np.zeros(size, dtype=np.uint8)
        _check(_driver().cuMemcpyDtoH(out.ctypes.data, ptr, size), f"cuMemcpyDtoH({name!r})")
        return out

    def set_max_dynamic_shared(self, name: str, nbytes: int) -> None:
        drv = _driver()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(drv.cuFuncSetAttribute(self.function(name), attr, nbytes), "cuFuncSetAttribute")

    def set_preferred_carveout(self, name: str, percent: int) -> None:
        """Hint the shared-memory share of the SM's L1/shared storage for kernel ``name`` (0-100 % of the most; the
        rest is L1). The driver still gives a launch the shared memory it needs."""
        if not (isinstance(percent, int) and 0 <= percent <= 100):
            raise ValueError(f"shared-memory carve-out must be an int percent in [0, 100], got {percent!r}")
        drv = _driver()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
        _check(drv.cuFuncSetAttribute(self.function(name), attr, percent), "cuFuncSetAttribute")

    def launch(self, name: str, grid, block, args: Sequence = (), shared_mem: int = 0, stream=None,
               cooperative: bool = False) -> None:
        """Launch kernel ``name`` asynchronously on ``stream`` (default: torch's current stream when torch
        is loaded, else the legacy default stream)."""
        drv = _driver()
        gx, gy, gz = _dim3(grid, "grid")
        bx, by, bz = _dim3(block, "block")
        packed = [pack_argument(a, i) for i, a in enumerate(args)]
        pointers = np.array([ctypes.addressof(p) for p in packed] or [0], dtype=np.uint64)
        params = pointers.ctypes.data if packed else 0
        handle = drv.CUstream(_stream_handle(stream))
        fn = self.function(name)
        if cooperative:
            _check(drv.cuLaunchCooperativeKernel(fn, gx, gy, gz, bx, by, bz, shared_mem, handle, params),
                   f"cuLaunchCooperativeKernel({name!r})")
        else:
            _check(drv.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared_mem, handle, params, 0),
                   f"cuLaunchKernel({name!r})")
        del packed  # the driver copied the arguments at the call

    def unload(self) -> None:
        if self._handle is not None:
            _check(_driver().cuModuleUnload(self._handle), "cuModuleUnload")
            self._handle = None
