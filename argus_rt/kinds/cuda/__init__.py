"""The CUDA program kind: a ``.cu`` translation unit built by Argus with ``argus/argus.cuh``.

* ``build``: the build spec, nvcc/NVRTC builds with a content-hash cache, SASS disassembly;
* ``run``: the program's ``launch`` (:class:`~argus_rt.kinds.cuda.run.CudaLaunch`), its variant builds
  (trace-free, marker-only, traced), the checked run, and the decoded trace as
  ``argus.region_intervals/1``;
* ``runner``: programs that launch the Argus-built cubin themselves (``launch.runner``).

Import the submodule you need (importing this package imports no torch).
"""
