"""TraceSession on host-side rings with a fake module: control block contents, arming rules, save/load."""
from __future__ import annotations

import numpy as np
import pytest

from argus_rt.trace import TraceConfig, TraceConfigError, TraceError, TraceSession, layout, load_raw
from tests.ring_writer import RingWriter


class FakeModule:
    """Stands in for CubinModule: keeps the last bytes written to each global."""

    def __init__(self) -> None:
        self.globals: dict[str, np.ndarray] = {"argus_ctl": np.zeros(layout.CTL_DTYPE.itemsize, dtype=np.uint8)}
        self.writes = 0

    def write_global(self, name, data, stream=None, blocking=True):
        assert name in self.globals, name
        self.globals[name] = np.array(data, dtype=np.uint8, copy=True)
        self.writes += 1

    def read_global(self, name):
        return self.globals[name].copy()

    def ctl(self):
        return self.globals["argus_ctl"].view(layout.CTL_DTYPE)[0]


def test_arm_writes_control_block_and_new_seq():
    mod = FakeModule()
    sess = TraceSession(mod, TraceConfig(ctas=4, threads_per_cta=128, capacity=16), device="cpu")
    a = sess.arm()
    ctl = mod.ctl()
    assert int(ctl["enabled"]) == 1 and int(ctl["seq"]) == a.seq and int(ctl["num_rings"]) == 16
    assert int(ctl["buffers"]) == sess.buffer.data_ptr() and int(ctl["capacity"]) == 16
    b = sess.arm(coord_window=(3, 4), warp_mask=0b10)
    assert b.seq != a.seq and int(mod.ctl()["coord_begin"]) == 3 and int(mod.ctl()["warp_mask"]) == 2
    sess.disarm()
    assert int(mod.ctl()["enabled"]) == 0 and int(mod.ctl()["buffers"]) == 0


def test_arm_cannot_change_geometry():
    sess = TraceSession(FakeModule(), TraceConfig(ctas=4, threads_per_cta=128, capacity=16), device="cpu")
    with pytest.raises(TraceConfigError, match="cannot change capacity"):
        sess.arm(capacity=32)


def test_decode_before_arm():
    sess = TraceSession(FakeModule(), TraceConfig(ctas=1, threads_per_cta=32), device="cpu")
    with pytest.raises(TraceError, match="before arm"):
        sess.decode()


def test_decode_reads_what_the_device_wrote_and_save_roundtrip(tmp_path):
    import torch

    mod = FakeModule()
    sess = TraceSession(mod, TraceConfig(ctas=2, threads_per_cta=64, capacity=8), device="cpu")
    armed = sess.arm()
    w = RingWriter(armed)  # what the device would write under this arm
    w.emit(1, 1, 3, "begin", 0x1234, 10)
    w.emit(1, 1, 3, "end", 0x1234, 25)
    sess.buffer.copy_(torch.from_numpy(w.raw))
    mod.globals["argus_ctl"].view(layout.CTL_DTYPE)[0]["unbuffered"] = 2
    t = sess.decode()
    assert len(t.events) == 2 and t.unbuffered == 2 and t.incomplete
    path = sess.save(tmp_path / "run.npz")
    t2 = load_raw(path)
    assert np.array_equal(t2.events, t.events) and t2.unbuffered == 2


def test_load_rejects_foreign_npz(tmp_path):
    p = tmp_path / "x.npz"
    np.savez(p, other=np.zeros(3))
    with pytest.raises(TraceError, match="not an Argus raw trace"):
        load_raw(p)


def test_dropped_armed_session_keeps_its_buffer_alive_until_disarm():
    """The device holds a raw pointer to the armed buffer: dropping the session must not free it
    (the next launch would write records into whatever tensor got that memory)."""
    import gc
    import weakref

    mod = FakeModule()
    sess = TraceSession(mod, TraceConfig(ctas=2, threads_per_cta=64, capacity=8), device="cpu")
    sess.arm()
    buffer_ref = weakref.ref(sess.buffer)
    del sess
    gc.collect()
    assert buffer_ref() is not None, "armed buffer was freed while the module still points at it"
    other = TraceSession(mod, TraceConfig(ctas=2, threads_per_cta=64, capacity=8), device="cpu")
    other.disarm()
    gc.collect()
    assert buffer_ref() is None, "disarm should release the previously armed buffer"
