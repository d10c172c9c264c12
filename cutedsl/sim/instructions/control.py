"""Control flow: bra, ret/exit, trap, nanosleep, brkpt/pmevent.

Decoders receive ``(ctx, ins, mods, ops)`` and return the execution closure ``fn(warp, group,
mask)``; see :mod:`cutedsl.sim.engines.alu` for the shared conventions.
"""
from __future__ import annotations

from ..engines.alu import need_ops
from ..frontend.errors import SimRuntimeError
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

    def fn(w, g, m):
        if m is g.m:
            g.pc = target
            return JUMPED
        w.split(g, m, target)
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
