"""Atoms: one hardware instruction family each (TMA copy, mbarrier group, WGMMA with A from
shared memory or registers, the bulk reduction into global memory, accumulator row reductions, register -> swizzled operand stores,
named barriers / register reconfiguration / proxy fences, stmatrix, cluster primitives in
``atom.cluster``).

Atoms emit IR only; they know nothing of kernels, stages or tiles' roles.
"""
from . import cluster
from .mbarrier import MBarriers
from .tma import TmaCopy, tma_store_fence, bulk_commit_group, bulk_wait_group
from .bulk_reduce import bulk_reduce_add
from .sync import (NamedBarrier, elect_one, fence_proxy_async, setmaxnreg, wait_flag, warpgroup_reg_alloc,
                   warpgroup_reg_dealloc)
from .stmatrix import pack_b16x2, stmatrix
from .wgmma import WarpgroupMMA, Accumulator, SmemMatrix, WgmmaFragment, fragment_coords
from .wgmma_rs import AFragment, WarpgroupMMARegA
from .fragment_rows import map_rows, row_max, row_sum
from .operand_store import store_operand

__all__ = ["cluster", "MBarriers", "TmaCopy", "tma_store_fence", "bulk_commit_group", "bulk_wait_group", "bulk_reduce_add",
           "WarpgroupMMA", "WarpgroupMMARegA", "AFragment", "Accumulator", "SmemMatrix", "WgmmaFragment",
           "fragment_coords",
           "NamedBarrier", "elect_one", "fence_proxy_async", "setmaxnreg", "wait_flag", "warpgroup_reg_alloc",
           "warpgroup_reg_dealloc", "pack_b16x2", "stmatrix", "row_max", "row_sum", "map_rows", "store_operand"]
