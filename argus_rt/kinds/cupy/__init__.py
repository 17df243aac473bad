"""The CuPy program kind: a ``cupy.RawModule`` (or ``RawKernel``) source that includes ``argus/argus.cuh``.

* ``launch``: the program's ``launch`` (:class:`~argus_rt.kinds.cupy.launch.CupyLaunch`): which kernel,
  its grid and block, its arguments named after the kernel's own parameters, its reference;
* ``build``: the variants (trace-free, marker-only, traced) compiled through NVRTC with the options
  CuPy passes for a ``RawModule`` plus Argus's variant define and include paths, content-hash cached;
  the CPU check ``argus plan`` and ``argus query`` make before any task runs;
* ``run``: the checked run, in which CuPy loads the Argus-built cubin and launches it
  (its ``run_once`` is what ``python -m argus_rt.kinds.run_variant``, the process Nsight Compute
  profiles, runs; ``collect_region_trace`` is the shared ``trace`` adapter's work for this kind);
* ``kind``: the kind's entry in :mod:`argus_rt.kinds.registry` (its hooks), through which the shared
  ``trace`` and ``pcmap`` adapters serve CuPy programs.

Importing the package imports neither CuPy nor torch; planning a CuPy program needs neither.
"""
