"""The convergence rule of warp-synchronous instructions: an instruction that needs every live
lane of its warp (``.sync.aligned`` forms) or the lanes of a member mask (``shfl.sync``,
``vote.sync``, ``bar.warp.sync``...) blocks the lane groups that reach it until the others
arrive (:class:`Converge`, a blocking reason the deadlock report describes), and is an error
when the mask names lanes that are predicated off (PTX ISA: bar.warp.sync, shfl.sync).
"""
from __future__ import annotations

import numpy as np

from ..frontend.errors import SimRuntimeError


class Converge:
    """Blocking reason: a warp-collective instruction reached by only some lanes."""
    __slots__ = ("ins", "warp")

    def __init__(self, ins, warp):
        self.ins, self.warp = ins, warp

    def ready(self):
        return False

    def describe(self):
        return (f"warp-synchronous instruction reached by {sum(g.count for g in self.warp.groups if g.blocked is self)} "
                f"of {self.warp.nlive} live lanes; other lanes at PCs "
                f"{sorted(g.pc for g in self.warp.groups if g.blocked is not self)}")


LANES = np.arange(32, dtype=np.uint32)


def mask_lanes(rmask, w) -> np.ndarray:
    """The 32 lanes (bool) a warp-synchronous instruction's ``membermask`` operand names."""
    mm = int(np.asarray(rmask(w)).flat[0]) & 0xFFFFFFFF
    return ((mm >> LANES) & 1).astype(bool)


def members(w, g, m, rmask, ins):
    """The active-lane bool mask of a warp-synchronous instruction with member mask ``rmask``
    (None: every live lane), or None after blocking group ``g`` until the mask's other live
    lanes reach it (``Converge``); ``SimRuntimeError`` when the mask names lanes of ``g`` that
    are predicated off."""
    act = w.valid if m is None else m
    need = w.live if rmask is None else mask_lanes(rmask, w) & w.live
    if np.any(need & ~act):
        if g.count != w.nlive and np.any(need & ~g.mask):
            g.blocked = Converge(ins, w)
            return None
        raise SimRuntimeError(f"member mask names lanes that are predicated off\n    at {ins.where()}")
    return act


def need_converged(w, g, ins):
    """Block ``g`` until all live lanes of its warp reach this PC; True if blocked."""
    if g.count != w.nlive:
        g.blocked = Converge(ins, w)
        return True
    return False
