"""The CuPy program kind: a ``cupy.RawModule`` (or ``RawKernel``) source that includes ``argus/argus.cuh``.

* ``launch``: the program's ``launch`` (:class:`~argus_rt.kinds.cupy.launch.CupyLaunch`): which kernel,
  its grid and block, its arguments named after the kernel's own parameters, its reference;
* ``build``: the variants (trace-free, marker-only, traced) compiled through NVRTC with the options
  CuPy passes for a ``RawModule`` plus Argus's variant define and include paths, content-hash cached;
  the CPU check ``argus plan`` and ``argus query`` make before any task runs;
* ``run``: the checked run, in which CuPy loads the Argus-built cubin and launches it
  (``python -m argus_rt.kinds.cupy.run`` is the process Nsight Compute profiles);
* ``adapters``: the kind's ``trace`` and ``pcmap`` adapters (registered for ``kind="cupy"``), thin
  over the shared trace decoding, PC map and Nsight Compute adapter.

Importing the package imports neither CuPy nor torch; planning a CuPy program needs neither.
"""
