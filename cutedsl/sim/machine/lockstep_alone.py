"""The lockstep paths where a run's warps go apart (:mod:`cutedsl.sim.machine.lockstep`): a warp
running register instructions alone (:func:`lone_run`), and a guarded ``bra`` that splits a run by
whole warps (:func:`split`). Each does what the per-warp path (``warp_run.run_warp`` and
``lockstep.step_gang``) would, in fewer calls."""
from __future__ import annotations

from ..frontend.errors import SimError
from ..frontend.registry import BATCH_REGS, JUMPED

#: how far (in instructions) a warp may be behind to catch up with a lockstep batch
CATCH_UP = 8


def lone_run(launch, w, g, ins, budget):
    """Register instruction ``ins`` for warp ``w`` alone (no neighbour meets it), and then the
    unguarded, unfused register instructions after it while ``run_warp`` would run each the same
    way: no wgmma owns or holds a register they name (its per-instruction checks), and neither
    neighbour can ``lockstep.meets`` them -- every group of it is more than ``CATCH_UP`` behind or
    ahead, which register instructions of ``w`` do not change. Returns ``lockstep.lockstep``'s
    triple."""
    r = ins.fn(w, g, None)
    if r is not None or budget < 2:
        return r, None, 0
    ws = w.cta.warps
    i = w.wid
    code = launch.code
    pc = g.pc + 1
    # a neighbour whose lowest group is at lw could meet w at the PCs lw .. lw + CATCH_UP: the
    # run stops at the first of them
    stop = 1 << 62
    for x in (ws[i - 1] if i else None, ws[i + 1] if i + 1 < len(ws) else None):
        if x is not None and x.groups:
            gs = x.groups
            lw = gs[0].pc if len(gs) == 1 else min(gg.pc for gg in gs)
            if lw + CATCH_UP >= pc:
                stop = min(stop, max(lw, pc))
    done = 1
    held = w.acc_bits | w.lazy_bits
    while done < budget and pc < stop:
        nx = code[pc]
        if nx.batch != BATCH_REGS or nx.guard >= 0 or nx.fused is not None or nx.rbits & held:
            break
        if nx.fn(w, g, None) is not None:
            raise SimError(f"internal emulator error: {nx.where()} changed control flow in a lone run")
        pc += 1
        done += 1
    g.pc = pc
    return JUMPED, None, done - 1


def split(pv, neg, lead, nw):
    """For a guarded ``bra`` that splits a lockstep run of ``nw`` warps (guard values ``pv``, one
    per lane; ``neg``: the guard is negated): which warps jump, when each warp's lanes all take it
    or all skip it and the leader (``lead``, its index in the run) skips it; else None."""
    raw = pv.tobytes()          # one byte (0 or 1) per lane: a warp's 32 bytes compared whole
    takes, skips = (_FALSE32, _TRUE32) if neg else (_TRUE32, _FALSE32)
    if raw[32 * lead:32 * lead + 32] != skips:
        return None
    out = []
    for i in range(0, 32 * nw, 32):
        seg = raw[i:i + 32]
        if seg == takes:
            out.append(True)
        elif seg == skips:
            out.append(False)
        else:
            return None
    return out


_TRUE32, _FALSE32 = b"\x01" * 32, b"\x00" * 32
