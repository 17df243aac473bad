"""CPU stand-ins for the Triton ``trace`` backend: a base class that takes the real adapter's configs and
effects, and a context manager that swaps a stand-in in during a test, then restores what was there.

Spawned scheduler workers import the test module again; the test module re-registers its stand-in
there when ``env_var`` is "1", so the context manager sets it for the duration.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from argus_rt.backends.base import BackendAdapter, get_backend, register_backend, unregister_backend


def _real_triton_trace():
    from argus_rt.backends.trace import TraceAdapter

    return TraceAdapter()  # the one trace adapter; Triton's runs are its kind's trace_run hook


class StandinTritonTraceBase(BackendAdapter):
    """The real Triton 'trace' adapter's name, effects and config checks, with ``needs_gpu`` off: subclasses only
    write ``collect`` (and may narrow ``outputs``)."""

    name = "trace"
    effects = type(_real_triton_trace()).effects
    outputs = type(_real_triton_trace()).outputs
    needs_gpu = False

    def validate_config(self, config):
        _real_triton_trace().validate_config(config)

    def effects_for(self, config):
        return _real_triton_trace().effects_for(config)


@contextmanager
def standin_triton_trace(adapter, env_var: str) -> Iterator[None]:
    previous = get_backend("trace", "triton")
    register_backend(adapter, kind="triton", replace=True)
    os.environ[env_var] = "1"
    try:
        yield
    finally:
        os.environ.pop(env_var, None)
        unregister_backend("trace", "triton")
        register_backend(previous, kind="triton", replace=True)
