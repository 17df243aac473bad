"""Argus: measure GPU programs around semantic regions.

Public entry points grow as the subsystems land; see README.md.
"""
__version__ = "0.1.0"

from .regions import Region, RegionTree, RegionError, UnknownRegionError, RegionIdCollisionError, region_id  # noqa: F401
