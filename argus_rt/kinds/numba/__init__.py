"""The numba program kind: a ``numba.cuda.jit`` kernel in a Python module, with a NumPy reference.

* ``markers``: ``argus.begin`` / ``argus.end`` (and ``begin_at`` / ``end_at``) in a kernel: nothing,
  inline-PTX ``pmevent.mask`` words, or a call of the linked trace marker, by build mode;
* ``launch``: the program's ``launch`` (grid, block, args by parameter name, reference), its NumPy
  inputs, numba's kernel-argument ABI and the reference check;
* ``compile``: numba's PTX of the kernel for one marker mode, on the CPU, in a process of its own;
* ``versions``: the installed numba, numba-cuda and llvmlite, and the numpy releases they cannot work with;
* ``build``: that PTX to the sm_90 cubin that runs (the traced variant linked with argus.cuh's emit);
* ``run``: the checked run of a variant's cubin (what the process ncu profiles runs) and the traced run;
* ``kind``: the kind's entry in :mod:`argus_rt.kinds.registry` (its hooks), through which the shared
  ``trace`` and ``pcmap`` adapters serve numba programs.

Import the submodule you need (importing this package imports neither numba nor torch).
"""
