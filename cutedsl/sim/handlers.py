"""Imports every instruction-handler module so that it registers into
:mod:`cutedsl.sim.registry` (imported once by the package ``__init__``)."""
from . import (arith, bitops, clc, compare, control, convert, mbarrier, memops,  # noqa: F401
               mma_sync, sync, tcgen05_cp, tcgen05_mma, tcgen05_shift, tensormap_ops, tma, tmem, vprintf, warpops, wgmma)
