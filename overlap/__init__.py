"""GEMM + all-gather overlap runtime: Y = all_gather(A) @ B with tunable (S, R, P).

* :mod:`overlap.config`   the knobs (S chunks, R comm SMs, P chunks per GEMM step) and shape checks
* :mod:`overlap.safety`   environment and process-group set-up shared by every entry point
* :mod:`overlap.groups`   NCCL process groups keyed by R (``max_ctas = min_ctas = R``)
* :mod:`overlap.op`       the pipelined operator (:class:`AllGatherMatmul`) and the serial reference
* :mod:`overlap.measure`  timing, Kineto timelines of one call, NVML SM clock
* :mod:`overlap.model`    the analytic two-stream model, its fit, and the ranking
* :mod:`overlap.tune`     ``torchrun ... -m overlap.tune --shape M,K,N``
* :mod:`overlap.bench`    ``torchrun ... -m overlap.bench``: serial, torch fused, ours, ideal
"""
