"""Argus: measure GPU programs around semantic regions.

    import argus_rt
    report = argus_rt.query("examples/cuda", region="nested/outer",
                            signals=["latency", "instruction_mix"], scope=argus_rt.Scope())
    print(report.to_markdown())

``argus_rt.query`` is both the module and the callable (``argus_rt.query.make_plan`` plans without
running). See README.md and docs/architecture.md.
"""
__version__ = "0.1.0"

from .regions import Region, RegionTree, RegionError, UnknownRegionError, RegionIdCollisionError, region_id  # noqa: F401
from .scope import Scope  # noqa: F401
from . import query  # noqa: F401,E402  (a callable module: argus_rt.query(program, ...))
