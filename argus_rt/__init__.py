"""Argus: measure GPU programs around semantic regions.

    import argus_rt
    report = argus_rt.query(argus_rt.example("cuda"), region="example/stage_b",
                            signals=["latency", "instruction_mix"])
    print(report.to_markdown())

``argus_rt.example(name)`` is the path of a shipped example program (``cuda``, ``ground_truth``,
``triton``); any directory with an ``argus_program.json`` works the same way. Without a GPU the
report lists each signal as unanswered, with the reason.

``argus_rt.query`` is both the module and the callable (``argus_rt.query.make_plan`` plans without
running). ``argus_rt.compare(version_a, version_b, region=..., signals=[...], repeats=5)`` queries two
program versions with repeats and says, per region and metric, whether the difference exceeds
run-to-run noise (the rule: :mod:`argus_rt.compare`). See README.md and docs/architecture.md.
"""
__version__ = "0.1.0"

from .regions import Region, RegionError, RegionIdCollisionError, RegionTree, UnknownRegionError, region_id  # noqa: F401
from .resources import example  # noqa: F401
from .scope import Scope  # noqa: F401

# callable modules: argus_rt.query(program, ...), argus_rt.compare(version_a, version_b, ...). Imported on
# first use: every process Argus starts (workers, the run Nsight Compute profiles) imports this package,
# and most of them never plan a query.
_LAZY_MODULES = ("compare", "query")


def __getattr__(name: str):
    if name in _LAZY_MODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
