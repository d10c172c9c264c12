"""The convergence rule of warp-synchronous instructions: an instruction that needs every live
lane of its warp (``.sync.aligned`` forms) or the lanes of a member mask (``shfl.sync``,
``vote.sync``, ``bar.warp.sync``...) blocks the lane groups that reach it until the others
arrive (:class:`Converge`, a blocking reason the deadlock report describes), and is an error
when the mask names lanes that are predicated off (PTX ISA: bar.warp.sync, shfl.sync).

A divergent **backward** branch whose other lanes rejoin the loop head by a short straight-line
run (:func:`rejoin_end`, :class:`Rejoin`) parks the lanes that branched until the others arrive,
so the loop body runs once for the whole warp.
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


#: the longest straight-line run (instructions) after a divergent backward branch that ends in an
#: unconditional branch to the same loop head (:func:`rejoin_end`)
REJOIN_RUN = 16
#: opcodes that leave a straight-line run (what else may run in it: anything, a wait included)
_CONTROL = frozenset(("bra", "brx", "ret", "exit", "call", "trap"))


def rejoin_end(code, pc, target):
    """For ``@p bra target`` at ``pc`` with ``target < pc`` (a loop's back edge): the PC of the
    unguarded ``bra target`` that ends a straight-line run of at most :data:`REJOIN_RUN`
    instructions after it (the lanes that do not branch do a little work -- one lane arriving
    on an mbarrier -- and jump to the loop head too), or None."""
    for e in range(pc + 1, min(pc + 1 + REJOIN_RUN, len(code))):
        ins = code[e]
        base = ins.opcode.split(".")[0]
        if base == "bra":
            return e if ins.guard < 0 and ins.info == target else None
        if base in _CONTROL:
            return None
    return None


class Rejoin:
    """Blocking reason of the lanes that took a divergent backward branch (``@p bra head``)
    while the warp's other lanes (group ``rest``) run the straight-line instructions up to the
    ``bra head`` at ``end`` (:func:`rejoin_end`) -- where the groups meet and merge. Without it
    the lowest-PC rule would run the branching lanes through the whole next iteration first,
    and the two groups would execute every later iteration separately, which the hardware
    (reconverging at the loop head) does not. Any order of a warp's diverged lanes is an order
    the ISA allows (independent thread scheduling); the wait ends as soon as ``rest`` blocks,
    leaves the run or exits, so it never delays progress."""
    __slots__ = ("warp", "rest", "lo", "end")

    def __init__(self, warp, rest, end):
        self.warp, self.rest, self.lo, self.end = warp, rest, rest.pc, end

    def ready(self):
        r = self.rest
        return r.blocked is not None or not self.lo <= r.pc <= self.end or r not in self.warp.groups

    def describe(self):
        return f"the warp's other lanes to reach the loop head (PC {self.rest.pc}, run ends at PC {self.end})"
