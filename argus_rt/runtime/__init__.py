"""The runtime: a central dependency-driven scheduler over typed tasks.

``Runtime(workspace).run(plan)`` executes a :class:`argus_rt.tasks.Plan`: Transform, Synthesize and
Control tasks on a CPU thread pool, Collect tasks in isolated worker processes (one per device,
fresh interpreters that never re-run the caller's script, bound with ``CUDA_VISIBLE_DEVICES``).
See :mod:`.scheduler`, :mod:`.workers` and :mod:`.handlers` (how to register
Transform/Control/expander/synthesis handlers).
"""
from .handlers import (  # noqa: F401
    TaskContext,
    get_handler,
    register_control,
    register_expander,
    register_synthesis,
    register_transform,
)
