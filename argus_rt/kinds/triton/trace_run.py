"""The Triton kind's ``trace_run`` hook: the shared ``trace`` adapter's three modes
(:mod:`argus_rt.backends.trace`) for a Triton program, each its own TTGIR variant launched ``repeats``
times (``sampling["repeats"]``, default 1):

* ``"region"``: the region-traced variant (:mod:`.region_trace`, one %globaltimer record per marker per
  CTA) -> ``argus.region_intervals/1``; it takes no config;
* ``"reference"``: the traced reference (consumer wait timed per iteration, :mod:`.probes`) ->
  ``argus.iteration_waits/1``;
* ``"probe"``: the forced-wait probe the ``forced_wait_probe`` Transform built (its ``ttgir`` input) ->
  ``argus.op_events/1``.

Every mode runs Hopper TTGIR (TMA, WGMMA), so a GPU of another architecture is a
:class:`~argus_rt.backends.base.BackendUnavailableError`. Triton is imported only when a run needs it.
"""
from __future__ import annotations

from pathlib import Path

from ...backends.base import BackendUnavailableError


def require_hopper() -> None:
    """Raise BackendUnavailableError unless torch sees a Hopper GPU (the traced TTGIR targets sm_90)."""
    import torch

    if not torch.cuda.is_available():
        raise BackendUnavailableError(f"no CUDA GPU visible to torch {torch.__version__}")
    if torch.cuda.get_device_capability(0)[0] != 9:
        raise BackendUnavailableError(f"Triton trace runs (TMA probes, traced TTGIR) need a Hopper GPU, found "
                                      f"{torch.cuda.get_device_name(0)}")


def trace_run(mode: str, program, outdir: Path, *, config: dict, inputs: dict, sampling: dict) -> dict:
    """The inline evidence document of one trace run of ``program`` in ``mode`` (see the module docstring);
    build files go under ``outdir/build``."""
    if mode == "region" and config:
        raise ValueError(f"Triton region tracing takes no config (one timer record per marker per CTA); got {config!r}")
    if mode == "probe" and inputs.get("ttgir") is None:
        raise BackendUnavailableError(f"a Triton probe run needs the 'ttgir' input from its forced_wait_probe "
                                      f"Transform; inputs: {sorted(inputs)}")
    require_hopper()
    repeats = int(sampling.get("repeats", 1))
    build = Path(outdir) / "build"
    if mode == "region":
        from .region_trace import collect_triton_region_trace

        return collect_triton_region_trace(program, build, repeats=repeats)
    if mode == "reference":
        from .probes import collect_triton_reference

        return collect_triton_reference(program, build, repeats=repeats)
    if mode == "probe":
        from .probes import collect_triton_probe

        return collect_triton_probe(program, Path(inputs["ttgir"]), build, repeats=repeats)["op_events"]
    raise ValueError(f"unknown trace mode {mode!r}; valid: region, reference, probe")
