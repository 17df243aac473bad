"""The built-in CPU-side handlers, as the modules that register them (:data:`BUILTIN_HANDLER_MODULES`).

Each module registers its handlers at import with the :mod:`argus_rt.runtime.handlers` decorators
(``register_transform("variant")``, ``register_synthesis("latency")``, ...), so a handler's name is
written once, beside its function. This table sits above the runtime in the layers because those modules
import the runtime's registry; the runtime imports this one module by name on the first lookup that
misses (:func:`argus_rt.runtime.handlers.get_handler`). None of them imports torch, Triton or a compiler
at import: kind-specific work goes through the kind registry's hooks.
"""
from __future__ import annotations

from . import probe_expander, synthesis
from .runtime import async_handlers, builtin

BUILTIN_HANDLER_MODULES = (
    builtin,           # transform "variant": a program variant (and the kind's prebuild)
    async_handlers,    # control "async_discovery", transform "forced_wait_probe": through the kind hooks
    probe_expander,    # expander "forced_wait_probes": one probe branch per async site and iteration
    synthesis,         # every synthesis rule ("latency", "attributed_metric", ...)
)
