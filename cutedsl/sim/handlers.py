"""Imports every instruction-handler module so that it registers into
:mod:`cutedsl.sim.registry` (imported once by the package ``__init__``)."""
from . import (arith, bitops, calls, compare, control, convert, memops, mma_sync, sync,  # noqa: F401
               tensormap_ops, tma, warpops, wgmma)
