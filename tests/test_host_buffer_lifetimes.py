"""Host buffers handed to asynchronous copies outlive the copies (CPU: fake drivers and streams).

A fake stream queues each asynchronous copy and reads its host source only when the stream "runs"
(a synchronize), as the device does. Each test checks that when a call returns, every copy still
queued reads memory the caller owns (a temporary made inside the call would be freed by then),
and that what the stream copies in the end is the data the caller passed.
"""
from __future__ import annotations

import ctypes
import gc
import sys
import types
import weakref

import numpy as np
import pytest

from argus_rt.trace import PendingTrace, TraceConfig, TraceSession, layout
from argus_rt.trace.session import _adopt_stream
from tests.ring_writer import RingWriter

CTL_BYTES = layout.CTL_DTYPE.itemsize


class FakeStreams:
    """Device globals and a queue of asynchronous host-to-device copies per stream."""

    def __init__(self) -> None:
        self.device: dict[int, bytes] = {}
        self.pending: list[tuple[int, int, int, int]] = []  # (dst, src, size, stream)
        self.syncs = 0

    def copy_now(self, dst: int, src: int, size: int) -> None:
        self.device[dst] = ctypes.string_at(src, size)

    def enqueue(self, dst: int, src: int, size: int, stream: int) -> None:
        self.pending.append((dst, src, size, int(stream)))

    def run(self, stream: int | None = None) -> None:
        """The stream reaches its queued copies: only now is their host source read."""
        self.syncs += stream is not None
        keep = []
        for dst, src, size, s in self.pending:
            if stream is None or s == int(stream):
                self.copy_now(dst, src, size)
            else:
                keep.append((dst, src, size, s))
        self.pending = keep

    def sources_outside(self, owned: list[np.ndarray]) -> list[int]:
        """Queued copies whose host source is not inside one of ``owned`` (memory the caller keeps)."""
        spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in owned]
        return [src for _, src, size, _ in self.pending if not any(lo <= src and src + size <= hi for lo, hi in spans)]


@pytest.fixture
def fake_cupy(monkeypatch):
    """cupy.cuda.runtime / driver over FakeStreams (CuPy is not needed)."""
    streams = FakeStreams()
    runtime = types.SimpleNamespace(
        memcpyHostToDevice=1, memcpyDeviceToHost=2,
        memcpy=lambda dst, src, size, kind: streams.copy_now(dst, src, size),
        memcpyAsync=lambda dst, src, size, kind, stream: streams.enqueue(dst, src, size, stream),
        streamSynchronize=lambda stream: streams.run(stream))
    driver = types.SimpleNamespace(moduleGetGlobal=lambda module, name: 0x1000)
    cuda = types.ModuleType("cupy.cuda")
    cuda.runtime, cuda.driver = runtime, driver
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    for name, mod in (("cupy", cupy), ("cupy.cuda", cuda), ("cupy.cuda.runtime", runtime),
                      ("cupy.cuda.driver", driver)):
        monkeypatch.setitem(sys.modules, name, mod)
    return streams


def _cupy_globals():
    from argus_rt.kinds.cupy.run import CupyGlobals

    return CupyGlobals(types.SimpleNamespace(module=types.SimpleNamespace(ptr=1)))


def _ctl_bytes(seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, CTL_BYTES, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("as_type", ["bytes", "bytearray", "strided array"])
def test_cupy_async_write_from_a_temporary_is_done_before_it_returns(fake_cupy, as_type):
    data = _ctl_bytes(1)
    arg = {"bytes": data, "bytearray": bytearray(data),
           "strided array": np.repeat(np.frombuffer(data, dtype=np.uint8), 2)[::2]}[as_type]
    _cupy_globals().write_global("argus_ctl", arg, stream=5, blocking=False)
    assert fake_cupy.sources_outside([]) == [], "a copy still queued reads a buffer freed when the call returned"
    fake_cupy.run()
    assert fake_cupy.device[0x1000] == data


def test_cupy_async_write_from_the_callers_array_stays_asynchronous(fake_cupy):
    host = np.frombuffer(bytearray(_ctl_bytes(2)), dtype=np.uint8)  # the session's pinned slot, here pageable
    _cupy_globals().write_global("argus_ctl", host, stream=5, blocking=False)
    assert len(fake_cupy.pending) == 1 and fake_cupy.syncs == 0, "the arm's copy must not wait for the stream"
    assert fake_cupy.sources_outside([host]) == []
    fake_cupy.run(5)
    assert fake_cupy.device[0x1000] == host.tobytes()


class _FakeDriver:
    """The few cuda-python driver calls CubinModule.write_global makes, over FakeStreams."""

    CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)

    def __init__(self, streams: FakeStreams) -> None:
        self.streams = streams

    @staticmethod
    def CUstream(handle):  # noqa: N802 - cuda-python's name
        return int(handle)

    def cuModuleGetGlobal(self, handle, name):  # noqa: N802
        return 0, 0x2000, CTL_BYTES

    def cuMemcpyHtoD(self, dst, src, size):  # noqa: N802
        self.streams.copy_now(dst, src, size)
        return (0,)

    def cuMemcpyHtoDAsync(self, dst, src, size, stream):  # noqa: N802
        self.streams.enqueue(dst, src, size, stream)
        return (0,)

    def cuStreamSynchronize(self, stream):  # noqa: N802
        self.streams.run(stream)
        return (0,)


@pytest.fixture
def fake_driver(monkeypatch):
    import argus_rt.launch as launch

    streams = FakeStreams()
    monkeypatch.setattr(launch, "_driver", lambda: _FakeDriver(streams))
    return streams, launch.CubinModule(handle=object())


@pytest.mark.parametrize("as_type", ["bytes", "strided array"])
def test_cubin_async_write_from_a_temporary_is_done_before_it_returns(fake_driver, as_type):
    streams, module = fake_driver
    data = _ctl_bytes(3)
    arg = data if as_type == "bytes" else np.repeat(np.frombuffer(data, dtype=np.uint8), 2)[::2]
    module.write_global("argus_ctl", arg, stream=7, blocking=False)
    assert streams.sources_outside([]) == [], "a copy still queued reads a buffer freed when the call returned"
    streams.run()
    assert streams.device[0x2000] == data


def test_cubin_async_write_from_the_callers_array_stays_asynchronous(fake_driver):
    streams, module = fake_driver
    host = np.frombuffer(bytearray(_ctl_bytes(4)), dtype=np.uint8)
    module.write_global("argus_ctl", host, stream=7, blocking=False)
    assert len(streams.pending) == 1 and streams.syncs == 0
    assert streams.sources_outside([host]) == []
    streams.run(7)
    assert streams.device[0x2000] == host.tobytes()


class _Module:
    def __init__(self) -> None:
        self.ctl = np.zeros(CTL_BYTES, dtype=np.uint8)

    def write_global(self, name, data, stream=None, blocking=True):
        self.ctl = np.array(data, dtype=np.uint8, copy=True)

    def read_global(self, name):
        return self.ctl.copy()


class _Event:
    """A control-block copy still in flight from a staging slot: synchronize() is the stream reaching it."""

    def __init__(self, staging_ref) -> None:
        self.staging_ref = staging_ref
        self.staging_alive_at_sync = None

    def synchronize(self) -> None:
        self.staging_alive_at_sync = self.staging_ref() is not None


def test_a_dropped_session_keeps_its_staging_block_until_its_copies_are_done():
    """torch's pinned-memory cache does not know about the control-block copies: a session dropped with
    one in flight must not give its staging block back before the copy has read it."""
    sess = TraceSession(_Module(), TraceConfig(ctas=2, threads_per_cta=64, capacity=8), device="cpu")
    staging = weakref.ref(sess._staging)
    in_flight = _Event(staging)
    sess._events[3] = in_flight
    del sess
    gc.collect()
    assert in_flight.staging_alive_at_sync is True, "the session was dropped without waiting for its copies"
    assert staging() is None, "the staging block should be released once its copies are done"


def test_a_pending_trace_waits_for_its_copy_before_reading_it():
    sess = TraceSession(_Module(), TraceConfig(ctas=2, threads_per_cta=64, capacity=8), device="cpu")
    armed = sess.arm()
    w = RingWriter(armed)
    w.emit(1, 1, 3, "begin", 0x12, 10)
    w.emit(1, 1, 3, "end", 0x12, 25)
    import torch

    copy = torch.zeros_like(sess.buffer)  # the device-side copy, not yet written when decode() is called

    class Copy:
        def synchronize(self):
            copy.copy_(torch.from_numpy(w.raw))

    assert len(PendingTrace(copy, armed, None, Copy()).decode().events) == 2
    sess.buffer.copy_(torch.from_numpy(w.raw))
    assert len(sess.snapshot().decode().events) == 2  # a host session's snapshot is a finished copy


class _Stream:
    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle
        self.waited: list[int] = []

    def wait_stream(self, other) -> None:
        self.waited.append(other.cuda_stream)


class _Buffer:
    def __init__(self) -> None:
        self.used_on: list[int] = []

    def record_stream(self, stream) -> None:
        self.used_on.append(stream.cuda_stream)


def test_rings_used_on_another_stream_are_ordered_and_recorded_once():
    alloc, side, buf, seen = _Stream(0), _Stream(0x51), _Buffer(), set()
    _adopt_stream(buf, alloc, alloc, seen)
    assert buf.used_on == [] and alloc.waited == []
    for _ in range(3):
        _adopt_stream(buf, alloc, side, seen)
    assert buf.used_on == [0x51] and side.waited == [0]


# NVRTC writes its log and cubin into the ``char*`` cuda-python hands it, i.e. into the bytes object
# passed. ``b" " * 1`` is not a new object: it is the constant ``b" "`` itself, and where the module
# was compiled from source (no .pyc: PYTHONDONTWRITEBYTECODE=1, a fresh checkout) that constant is
# CPython's one shared ``b" "``. An empty log has size 1 (its NUL), so every ``b" "`` in the process
# becomes ``b"\x00"``: numpy's ``b" " * padlen`` then pads each .npy header with null bytes.
_NVRTC_PROBE = r'''
import ctypes, json, sys, tempfile
from pathlib import Path
import argus_rt.kinds.cuda.build as cuda_build

space, handed = bytes([32]), []

def address(buf):  # the char* cuda-python would pass for buf
    if isinstance(buf, ctypes.Array):
        return ctypes.addressof(buf)
    if isinstance(buf, bytearray):
        return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value

def write(buf, data):  # what the C function does with the char* it is given
    handed.append(buf)
    ctypes.memmove(address(buf), data, len(data))

class Nvrtc:
    def nvrtcCreateProgram(self, src, name, n, headers, names): return (0, "prog")
    def nvrtcCompileProgram(self, prog, n, opts): return (0,)
    def nvrtcGetProgramLogSize(self, prog): return (0, 1)  # an empty log: its NUL only
    def nvrtcGetProgramLog(self, prog, buf): write(buf, b"\0"); return (0,)
    def nvrtcGetCUBINSize(self, prog): return (0, 8)
    def nvrtcGetCUBIN(self, prog, buf): write(buf, b"\x7fELFcubn"); return (0,)
    def nvrtcDestroyProgram(self, prog): return (0,)

cuda_build.nvrtc = lambda: Nvrtc()
src = Path(tempfile.mkdtemp()) / "k.cu"
src.write_text("__global__ void k() {}\n")
cubin, log = cuda_build.nvrtc_compile(src, [])
consts = cuda_build.nvrtc_compile.__code__.co_consts
print(json.dumps({"cubin": bytes(cubin).hex(), "log": log, "space_intact": space[0] == 32,
                  "wrote_into_shared": [i for i, b in enumerate(handed) if any(b is c for c in consts) or b is space]}))
'''


def test_nvrtc_compile_never_lets_nvrtc_write_into_a_shared_bytes_object():
    import json
    import os
    import subprocess

    # In a child process: with the bug, this interpreter's b" " would be zeroed for every later test.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", _NVRTC_PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["cubin"] == b"\x7fELFcubn".hex() and got["log"] == ""
    assert got["wrote_into_shared"] == [], "NVRTC wrote into a bytes object shared with the rest of the interpreter"
    assert got["space_intact"], "the interpreter's b' ' was overwritten (every .npy header would pad with NULs)"
