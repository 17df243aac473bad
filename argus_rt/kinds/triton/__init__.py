"""The Triton program kind: a ``@triton.jit`` kernel in a module of the program directory.

Reading and editing TTGIR (``mlir_ir``, ``ttgir_text``, ``ttgir_module``, ``ttgir_locations``,
``ttgir_regions``, ``ttgir_edit``) lives here too: TTGIR is Triton's IR, and no other kind reads it.

* ``regions``: the ``argus.begin``/``argus.end`` markers of a kernel (public path
  :mod:`argus_rt.triton_regions`);
* ``program``, ``specialization``: the program's launch, compiled as Triton's JIT would;
  ``jit_equivalence``: the check that Argus's compile is the JIT's;
* ``async_sites``, ``loop_trips``, ``discovery``: async-operation discovery on TTGIR;
* ``region_trace``, ``probes``, ``kernel_check``, ``layout``: the traced and probe variants, their
  checked runs on the GPU and the decoders of the buffers they write.

Import the submodule you need (importing this package imports no Triton).
"""
