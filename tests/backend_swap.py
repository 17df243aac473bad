"""Swap the registered Triton ``trace`` backend for a CPU stand-in during a test, then restore it.

Spawned scheduler workers import the test module again; the test module re-registers its stand-in
there when ``env_var`` is "1", so this helper sets it for the duration.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from argus_rt.backends.base import get_backend, register_backend, unregister_backend


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
