"""Imports every instruction-handler module so that it registers into
:mod:`cutedsl.sim.registry` (imported once by the package ``__init__``)."""
from . import (arith, bitops, calls, compare, control, convert, memops, sync, tma,  # noqa: F401
               warpops, wgmma)
