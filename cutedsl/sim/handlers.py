"""Imports every instruction-handler module so that it registers into
:mod:`cutedsl.sim.frontend.registry` (imported once by the package ``__init__``)."""
from .instructions import (arith, bitops, bulk_reduce, clc, compare, control, convert, cp_async, mbarrier, memops,  # noqa: F401
               matrix, minmax, mma_sync, st_async, sync, tcgen05_cp, tcgen05_mma, tcgen05_shift, tensormap_ops, tma, tmem, vprintf,
               warpops, wgmma)
