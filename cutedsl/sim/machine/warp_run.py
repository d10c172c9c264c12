"""One warp's turn on the emulator (:mod:`cutedsl.sim.machine.scheduler` picks the warps): its lane
groups follow the **min-PC** rule -- the runnable group with the lowest PC runs, and groups whose
PCs meet merge (reconvergence). A guarded instruction whose guard is false for every lane of
the group costs one warp-instruction and moves on; a batchable instruction of a whole warp runs
for the warps at the same PC together (:mod:`cutedsl.sim.machine.lockstep`). An exception that
is not the emulator's own error is an emulator bug and names the instruction."""
from __future__ import annotations

import numpy as np

from ..checks.hb_warp import acc_check
from ..frontend.errors import SimError, SimRuntimeError
from ..frontend.registry import JUMPED, RESCHED, YIELD
from .lockstep import lockstep, step_gang


def run_warp(self, w, quantum):
    """Run warp ``w`` of launch ``self`` until it blocks, yields or ``quantum`` warp-instructions
    pass (module docstring); returns the warp-instructions executed."""
    code = self.code
    n = 0
    w.poll = False
    groups = w.groups
    ins = None
    try:
        while not w.done and n < quantum:
            g = None
            for gg in groups:
                b = gg.blocked
                if b is not None:
                    if not b.ready():
                        continue
                    gg.blocked = None
                if g is None or gg.pc < g.pc:
                    g = gg
            if g is None:
                break
            gang = None             # (lo, hi): warps known to be at g.pc with w (lockstep.py)
            others = None
            if len(groups) > 1:
                others = {o.pc: o for o in groups if o is not g}
                run = [o.pc for o in groups if o is not g and o.blocked is None]
                min_other = min(run) if run else 1 << 62
            while True:
                ins = code[g.pc]
                gi = ins.guard
                if gi >= 0:
                    pv = w.p[gi]
                    em = ~pv if ins.neg else pv
                    if g.m is not None:
                        em = em & g.mask
                    c = int(np.count_nonzero(em))
                    n += 1
                    if c == 0:
                        g.pc += 1
                        gang = None
                        if others is None and g.m is None and not self._stepping:
                            step_gang(self, w, g.pc - 1, ins)
                        if others is not None and _meets_other(w, g, others, min_other):
                            break
                        continue
                    m = g.m if c == g.count else em
                else:
                    m = g.m
                    n += 1
                if w.acc_bits and ins.rbits & w.acc_bits:
                    acc_check(w, ins)
                if w.lazy_bits and ins.rbits & w.lazy_bits:
                    w.held.settle(ins.rbits)
                if ins.batch and m is None and others is None and w.full:
                    r, gang, more = lockstep(self, w, g, ins, gang, quantum - n)
                    n += more
                else:
                    gang = None
                    pc0 = g.pc
                    whole = g.m is None and others is None
                    r = ins.fn(w, g, m)
                    # the neighbours follow through it (a guard or a branch may have split w)
                    if whole and r != YIELD and (r != RESCHED or len(groups) > 1) and not self._stepping:
                        step_gang(self, w, pc0, ins)
                if r is None:
                    g.pc += 1
                elif r == JUMPED:
                    pass
                elif r == YIELD:
                    if others is not None and g.pc in others:
                        merge(w, g, others[g.pc])
                    return n
                else:               # BLOCKED / RESCHED
                    break
                if others is not None and _meets_other(w, g, others, min_other):
                    break
                if n >= quantum:
                    return n
            groups = w.groups
    except SimError:
        raise
    except Exception as e:     # an emulator bug: name the instruction
        where = ins.where() if ins is not None else "?"
        raise SimRuntimeError(f"internal emulator error ({type(e).__name__}: {e})\n    at {where} "
                              f"(CTA {w.cta.ctaid}, warp {w.wid})") from e
    finally:
        w.insts += n
        self.insts += n
    return n

def merge(w, g, o):
    """Lane group ``o`` of warp ``w`` reached ``g``'s PC: they reconverge into ``g``."""
    g.set_mask(g.mask | o.mask)
    g.blocked = None
    w.groups.remove(o)


def _meets_other(w, g, others, min_other) -> bool:
    """Group ``g`` of a diverged warp ``w`` moved: it merges with the group waiting at its new PC
    (``others``, by PC), or has passed the lowest of them; either way its run ends (True)."""
    o = others.get(g.pc)
    if o is not None:
        merge(w, g, o)
        return True
    return g.pc > min_other
