"""Race checks inside one warp (the happens-before detector, :mod:`cutedsl.sim.checks.hb`, orders
warps and asynchronous agents): registers an unretired wgmma still owns, and two lanes of one
store writing different bytes to one shared location."""
from __future__ import annotations

import numpy as np

from .rules import raise_unless_allowed


def acc_prune(w):
    """Drop the pending accumulator entries of warp ``w`` whose group ``w`` knows complete."""
    vc = w.cta.cluster.hb.warp_vc(w)
    keep = []
    bits = 0
    known = {}              # agent -> w's clock of it (the entries are mostly one warpgroup's)
    for e in w.acc_pending:
        a = e[1]
        k = known.get(a)
        if k is None:
            k = known[a] = vc.item(a)
        if k < e[2]:
            keep.append(e)
            bits |= e[0]
    w.acc_pending = keep
    w.acc_bits = bits
    return keep


def _reg_name(scope, idx: int) -> str:
    """The PTX name of 32-bit register ``idx`` in the decode scope chain ``scope``."""
    while scope is not None:
        for name, r in scope.regs.items():
            if r[0] == "r" and r[1] == idx:
                return name
        scope = scope.parent
    return f"#{idx}"


def acc_check(w, ins):
    """Race check: ``ins`` of warp ``w`` names a register an unretired wgmma may still write."""
    for bits, agent, clock, pc in acc_prune(w):
        hit = ins.rbits & bits
        if hit:
            hb = w.cta.cluster.hb
            ln = w.launch
            scopes = getattr(w.launch.program, "scopes", [])
            scope = scopes[ins.scope] if isinstance(ins.scope, int) and ins.scope < len(scopes) else None
            reg = _reg_name(scope, (hit & -hit).bit_length() - 1)
            raise_unless_allowed(hb.allow, "wgmma-wait", 
                f"data race on wgmma accumulator register {reg} (and any others the instruction names) "
                f"of CTA {w.cta.ctaid} warp {w.wid}:\n"
                f"    written by {hb.describe(agent, pc, ln)} (group {clock - 1})\n"
                f"    accessed by {hb.describe(w.agent, ins.pc, ln)}\n"
                f"    are not ordered; missing: a wgmma.wait_group covering that group before the "
                f"access (PTX ISA wgmma.mma_async: accessing the accumulator before "
                f"wgmma.wait_group is undefined)" + hb.seed_note())
            return


def lane_conflict(cta, off, vals, nb, lanes, w, ins) -> None:
    """``RaceError`` when two lanes of one store write different bytes to the same shared
    location: the PTX memory model makes one of them win, undefined which (equal bytes are
    benign, as for the happens-before checker)."""
    if len(off) < 2:
        return
    so = np.sort(off)
    if int((so[1:] - so[:-1]).min()) >= nb:     # no two lanes overlap (the common case)
        return
    order = np.argsort(off, kind="stable")
    so = off[order]
    near = np.flatnonzero(np.diff(so) < nb)
    if not len(near):
        return
    data = np.ascontiguousarray(vals).view(np.uint8).reshape(len(off), nb)
    for i in near:
        a, b, shift = int(order[i]), int(order[i + 1]), int(so[i + 1] - so[i])
        if not np.array_equal(data[a, shift:], data[b, :nb - shift]):
            loc = cta.launch.program.smem_symbol(int(so[i + 1]), cta.dyn_base)
            raise_unless_allowed(cta.shadow.hb.allow if cta.shadow is not None else frozenset(),
                                 "same-instruction-lanes", 
                f"data race on shared memory {loc} (CTA {cta.ctaid}, byte offset {int(so[i + 1])}): lanes "
                f"{int(lanes[a])} and {int(lanes[b])} of warp {w.wid} store different values there in one "
                f"instruction (PTX memory model: one of them is written, which one is undefined)\n"
                f"    at {ins.where()}" + (cta.shadow.hb.seed_note() if cta.shadow is not None else ""))
            return
