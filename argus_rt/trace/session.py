"""TraceSession: trace buffers for one kernel (or module) reused across launches.

Host cost of an arm is one memset of the rings and one ~100-byte control-block copy, both enqueued
on the launch stream (no synchronisation, no allocation, no decoding); decoding happens only when
asked.
"""
from __future__ import annotations

import os
import random
import threading
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from . import layout
from .config import TraceConfig
from .decode import Trace, decode
from .errors import TraceConfigError, TraceError
from .rawfile import load_raw, save_raw  # noqa: F401 - load_raw re-exported from its old home

_seq_lock = threading.Lock()
# Start at a random value: a ring left in reused device memory by another process must not match.
_next_seq = random.SystemRandom().randrange(1, 2**31)


def _new_seq() -> int:
    global _next_seq
    with _seq_lock:
        _next_seq = (_next_seq % 0xFFFFFFFF) + 1
        return _next_seq


@dataclass
class PendingTrace:
    """A device-side copy of the buffer region taken after a launch; decode it when convenient."""

    buffer: object  # torch uint8 tensor (device or host)
    config: TraceConfig
    unbuffered: int | None = None
    ready: object = None  # event recorded after the copy on its stream (None: a host copy, done)

    def decode(self, known_ids=None) -> Trace:
        # The copy was enqueued on the snapshot's stream; .cpu() reads on the current one, which
        # need not be ordered after it (torch's side streams do not wait for each other).
        if self.ready is not None:
            self.ready.synchronize()
        return decode(self.buffer.cpu().numpy(), self.config, known_ids=known_ids, unbuffered=self.unbuffered)


ANCHORED_SYMBOL = "argus_ts_anchored"  # defined only by -DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED builds


def _check_timestamp_build(target, config: TraceConfig) -> None:
    """Refuse a clock the module's timestamp build cannot write (the ring layouts differ).

    Targets without ``global_address`` (no symbol lookup) are trusted as they are."""
    lookup = getattr(target, "global_address", None)
    if lookup is None:
        return
    try:
        lookup(ANCHORED_SYMBOL)
        anchored_build = True
    except Exception:  # the driver's "named symbol not found": a default-timestamp build
        anchored_build = False
    if anchored_build and config.clock != "anchored":
        raise TraceConfigError(
            f"module was built with -DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED: clock must be 'anchored', got {config.clock!r}"
        )
    if not anchored_build and config.clock == "anchored":
        raise TraceConfigError(
            "clock 'anchored' needs a module built with -DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED; this one has no "
            f"{ANCHORED_SYMBOL!r} symbol (valid clocks for it: 'globaltimer', 'clock64')"
        )


# The device control block holds a raw pointer to the armed buffer. The module keeps a strong
# reference to that buffer until it is disarmed or re-armed, so a session dropped while armed can
# never let the allocator hand its memory to other tensors that the next launch would overwrite.
_ARMED_BUFFER_ATTR = "_argus_armed_buffer"


def _keep_armed_buffer(target, buffer) -> None:
    try:
        setattr(target, _ARMED_BUFFER_ATTR, buffer)
    except AttributeError as exc:  # e.g. a target with __slots__
        raise TraceConfigError(
            f"trace target {target!r} cannot hold a reference to its armed buffer ({exc}); "
            "give it a settable attribute"
        ) from None


def _wait_for_copies(events: list, staging) -> None:
    """Wait for the control-block copies still in flight (a dropped session's finaliser). Until then
    the finaliser holds ``staging``, the pinned block they read, which torch's host allocator, not
    knowing about these copies, would otherwise hand out again while the device may still read it."""
    for ev in events:
        if ev is not None:
            ev.synchronize()


def _adopt_stream(buffer, alloc_stream, stream, seen: set) -> None:
    """First use of ``buffer`` on ``stream`` (not the stream it was allocated on): order ``stream``
    after the allocation's zero fill, and tell the caching allocator the buffer is used there, so
    its memory is not reused for other tensors while launches on ``stream`` may still write rings."""
    key = int(stream.cuda_stream)
    if key == int(alloc_stream.cuda_stream) or key in seen:
        return
    stream.wait_stream(alloc_stream)
    buffer.record_stream(stream)
    seen.add(key)


class TraceSession:
    """Trace buffers and control block of one traced module.

    target: the loaded module, anything with ``write_global(name, data, stream=, blocking=)`` and
            ``read_global(name)`` (argus_rt.launch.CubinModule).
    config: TraceConfig (grid size, threads per CTA, capacity, clock, filters).

    Typical use: ``arm()`` before the launches to trace, ``disarm()`` before launches not to trace,
    then ``decode()`` (synchronises) or ``snapshot()`` (asynchronous copy, decode later).
    """

    STAGING_SLOTS = 64  # arms in flight before the host waits for the stream

    def __init__(self, target, config: TraceConfig, device: int | str = "cuda") -> None:
        import torch

        if not hasattr(target, "write_global"):
            raise TraceConfigError(f"trace target {target!r} has no write_global(name, data, ...) method")
        self.target = target
        self.config = config
        _check_timestamp_build(target, config)
        self.buffer = torch.zeros(config.buffer_bytes, dtype=torch.uint8, device=device)
        self._armed: TraceConfig | None = None
        pin = self.buffer.device.type == "cuda"
        self._alloc_stream = torch.cuda.current_stream(self.buffer.device) if pin else None
        self._streams_seen: set = set()
        self._staging = torch.zeros((self.STAGING_SLOTS, layout.CTL_DTYPE.itemsize), dtype=torch.uint8, pin_memory=pin)
        self._events: list = [None] * self.STAGING_SLOTS
        self._slot = 0
        # The finaliser's arguments keep the staging block alive until the copies from it are done.
        done = weakref.finalize(self, _wait_for_copies, self._events, self._staging)
        done.atexit = False  # the worker leaves by os._exit; at interpreter exit CUDA may be gone

    @property
    def armed(self) -> TraceConfig | None:
        """The configuration of the last arm (None before the first or after disarm)."""
        return self._armed

    def _write_ctl(self, ctl: np.ndarray, stream) -> None:
        import torch

        if self.buffer.device.type != "cuda":  # host-side rings (tests, replay): plain synchronous write
            self.target.write_global(layout.CTL_SYMBOL, np.frombuffer(ctl.tobytes(), dtype=np.uint8), stream=None,
                                     blocking=True)
            return
        slot = self._slot
        self._slot = (slot + 1) % self.STAGING_SLOTS
        if self._events[slot] is not None:
            self._events[slot].synchronize()  # the copy that used this slot has been consumed
        host = self._staging[slot].numpy()
        host[:] = np.frombuffer(ctl.tobytes(), dtype=np.uint8)
        s = stream if stream is not None else torch.cuda.current_stream()
        self.target.write_global(layout.CTL_SYMBOL, host, stream=s, blocking=False)
        ev = torch.cuda.Event()
        ev.record(s)
        self._events[slot] = ev

    def arm(self, stream=None, **changes) -> TraceConfig:
        """Enable tracing for the launches enqueued next on ``stream``; returns the armed config.

        ``changes`` replace fields of the session's config for this arm (e.g. ``coord_window``,
        ``warp_mask``, ``sms``, ``clock``); geometry (ctas, threads_per_cta, capacity, cta_range)
        must stay as allocated.
        """
        cfg = replace(self.config, seq=_new_seq(), **changes)
        for key in ("ctas", "threads_per_cta", "capacity", "cta_range"):
            if getattr(cfg, key) != getattr(self.config, key):
                raise TraceConfigError(
                    f"arm() cannot change {key} ({getattr(self.config, key)!r} -> {getattr(cfg, key)!r}): "
                    "the buffers are sized for it; make a new TraceSession"
                )
        if (cfg.clock == "anchored") != (self.config.clock == "anchored"):
            raise TraceConfigError(
                f"arm() cannot change clock {self.config.clock!r} -> {cfg.clock!r}: an anchored build takes only "
                "'anchored' and other builds take only 'globaltimer' or 'clock64' (ring headers differ)"
            )
        self._clear_rings(stream)
        self._write_ctl(cfg.ctl_block(self.buffer.data_ptr(), enabled=True), stream)
        _keep_armed_buffer(self.target, self.buffer)
        self._armed = cfg
        return cfg

    def _clear_rings(self, stream) -> None:
        """Zero the rings, ordered before this arm's launches on ``stream``: then a ring headed with
        another seq, or data past a ring's ``written``, can only be damage, and the decoder flags it."""
        import torch

        if self.buffer.device.type != "cuda":
            self.buffer.zero_()
            return
        s = stream if stream is not None else torch.cuda.current_stream()
        _adopt_stream(self.buffer, self._alloc_stream, s, self._streams_seen)
        with torch.cuda.stream(s):
            self.buffer.zero_()

    def disarm(self, stream=None) -> None:
        """Turn tracing off for the launches enqueued next (markers then cost one check per warp)."""
        self._write_ctl(self.config.ctl_block(0, enabled=False), stream)
        # Launches enqueued before this point may still write the old buffer; the caching allocator
        # only reuses its memory for work ordered after them on the same stream.
        _keep_armed_buffer(self.target, None)

    def _unbuffered(self) -> int | None:
        if not hasattr(self.target, "read_global"):
            return None
        raw = np.asarray(self.target.read_global(layout.CTL_SYMBOL), dtype=np.uint8)
        return int(raw.view(layout.CTL_DTYPE)[0]["unbuffered"])

    def snapshot(self, stream=None) -> PendingTrace:
        """Copy the buffer region on the device (enqueued; no host wait) for a later decode."""
        import torch

        if self._armed is None:
            raise TraceError("snapshot() before arm(): nothing was recorded")
        if self.buffer.device.type != "cuda":
            return PendingTrace(self.buffer.clone(), self._armed, None)
        s = stream if stream is not None else torch.cuda.current_stream()
        with torch.cuda.stream(s):
            copy = self.buffer.clone()
        ready = torch.cuda.Event()
        ready.record(s)
        return PendingTrace(copy, self._armed, None, ready)

    def decode(self, known_ids=None) -> Trace:
        """Wait for the device, copy the rings to the host and decode the last arm's records."""
        import torch

        if self._armed is None:
            raise TraceError("decode() before arm(): nothing was recorded")
        if self.buffer.device.type == "cuda":
            torch.cuda.synchronize(self.buffer.device)
        return decode(self.buffer.cpu().numpy(), self._armed, known_ids=known_ids, unbuffered=self._unbuffered())

    def save(self, path: str | os.PathLike) -> Path:
        """Save the raw rings and the armed config (npz, no pickle) for ``argus trace show``."""
        import torch

        if self._armed is None:
            raise TraceError("save() before arm(): nothing was recorded")
        if self.buffer.device.type == "cuda":
            torch.cuda.synchronize(self.buffer.device)
        return save_raw(path, self.buffer.cpu().numpy(), self._armed, self._unbuffered())
