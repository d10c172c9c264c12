"""Atoms: one hardware instruction family each (TMA copy, mbarrier group, WGMMA).

Atoms emit IR only; they know nothing of kernels, stages or tiles' roles.
"""
from .mbarrier import MBarriers
from .tma import TmaCopy, tma_store_fence, bulk_commit_group, bulk_wait_group
from .wgmma import WarpgroupMMA, Accumulator, SmemMatrix, fragment_coords

__all__ = ["MBarriers", "TmaCopy", "tma_store_fence", "bulk_commit_group", "bulk_wait_group",
           "WarpgroupMMA", "Accumulator", "SmemMatrix", "fragment_coords"]
