"""Control flow: bra, brx.idx, ret/exit, trap, nanosleep, brkpt/pmevent.

Decoders receive ``(ctx, ins, mods, ops)`` and return the execution closure ``fn(warp, group,
mask)``; see :mod:`cutedsl.sim.engines.alu` for the shared conventions.
"""
from __future__ import annotations

import numpy as np

from ..engines.alu import need_ops
from ..frontend.errors import SimRuntimeError
from ..machine.convergence import Rejoin, rejoin_end
from ..machine.machine import Group
from ..frontend.registry import JUMPED, RESCHED, YIELD, handler


# -- control flow --------------------------------------------------------------------------

def exit_fn(w, g, m):
    """``ret``/``exit``: retire the executing lanes."""
    w.exit_lanes(g, m)
    return RESCHED


@handler("ret", "exit")
def dec_exit(ctx, ins, mods, ops):
    for f in mods:
        if f != "uni":
            ctx.unsupported(f"unsupported modifier .{f}")
    return exit_fn


@handler("bra")
def dec_bra(ctx, ins, mods, ops):
    for f in mods:
        if f != "uni":
            ctx.unsupported(f"unsupported modifier .{f}")
    need_ops(ctx, ops, 1)
    target = ctx.label(ops[0].strip())
    ins.info = target
    back = target < ins.pc
    end = []                    # rejoin_end, found at the first divergence (the code is decoded then)

    def fn(w, g, m):
        if m is g.m:
            g.pc = target
            return JUMPED
        w.split(g, m, target)
        if back:                # a divergent back edge: the loop head waits for the rest (Rejoin)
            if not end:
                end.append(rejoin_end(w.launch.code, ins.pc, target))
            if end[0] is not None:
                w.groups[-1].blocked = Rejoin(w, g, end[0])
        return RESCHED
    return fn


@handler("brx")
def dec_brx(ctx, ins, mods, ops):
    """``brx.idx{.uni} index, tlist`` (PTX ISA 9.7.12.4): each active lane continues at
    ``tlist[index]``, ``tlist`` the label of a ``.branchtargets`` directive defined earlier in
    the function. An index >= the list's length is undefined behaviour in the ISA: reported as a
    :class:`SimRuntimeError`; so are lanes of a ``.uni`` branch with different indices (``.uni``
    guarantees the branch is non-divergent). Lanes with different indices split into one lane
    group per target, as a divergent ``bra`` does."""
    if not mods or mods[0] != "idx" or any(f != "uni" for f in mods[1:]):
        ctx.unsupported("brx takes the form brx.idx{.uni} index, tlist")
    need_ops(ctx, ops, 2)
    uni = "uni" in mods
    r = ctx.lookup_reg(ops[0].strip())
    if r is None or r[0] != "r":
        ctx.bad(f"brx.idx index {ops[0].strip()} must be a .u32 register (PTX ISA 9.7.12.4)")
    ridx = ctx.rd(ops[0], "u32")
    name = ops[1].strip()
    targets = ctx.branch_targets(name)
    n = len(targets)

    def fn(w, g, m):
        act = g.mask if m is g.m else m
        iv = np.broadcast_to(np.asarray(ridx(w)), (32,))
        vals = iv[act]
        if (vals >= n).any():
            lane = int(np.flatnonzero(act & (iv >= n))[0])
            raise SimRuntimeError(f"brx.idx index {int(iv[lane])} is outside {name} ({n} targets): undefined "
                                  f"behaviour (PTX ISA 9.7.12.4)\n    at {ins.where()}\n    by "
                                  f"{w.describe_lane(lane)}")
        uniq = np.unique(vals)
        if len(uniq) > 1 and uni:
            raise SimRuntimeError(f"brx.idx.uni with different indices in one warp ({', '.join(map(str, uniq[:8]))}): "
                                  f".uni guarantees a non-divergent branch (PTX ISA 9.7.12.4)\n    at {ins.where()}")
        if len(uniq) == 1 and m is g.m:
            g.pc = targets[int(uniq[0])]
            return JUMPED
        parts = [(targets[int(v)], act & (iv == v)) for v in uniq]
        rest = g.mask & ~act
        if rest.any():
            parts.append((g.pc + 1, rest))
        g.pc = parts[0][0]
        g.set_mask(parts[0][1].copy())
        for pc, mask in parts[1:]:
            w.groups.append(Group(pc, mask.copy()))
        return RESCHED
    return fn


@handler("trap")
def dec_trap(ctx, ins, mods, ops):
    def fn(w, g, m):
        raise SimRuntimeError(f"trap executed at {ins.where()} (CTA {w.cta.ctaid}, warp {w.wid})")
    return fn


@handler("brkpt", "pmevent")
def dec_nop(ctx, ins, mods, ops):
    return lambda w, g, m: None


@handler("nanosleep")
def dec_nanosleep(ctx, ins, mods, ops):
    def fn(w, g, m):
        w.poll = True
        g.pc += 1
        return YIELD
    return fn
