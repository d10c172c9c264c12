"""mbarrier instructions (PTX ISA "mbarrier"); the barrier objects they act on (phase, pending
arrivals, tx-count) are :mod:`cutedsl.sim.engines.mbarrier_object`.

``try_wait.parity P`` succeeds iff ``(phase & 1) != P``. A ``try_wait`` that fails for every
lane suspends the lane group until the barrier changes.

**Happens-before edges** (race detector, :mod:`cutedsl.sim.checks.hb`): an mbarrier accumulates every
release (arrive, ``complete_tx`` of an async copy) and snapshots it when a phase completes; a
successful ``try_wait``/``test_wait`` acquires the snapshot of the latest completed phase;
``.relaxed`` forms neither release nor acquire; every use must come after the ``init``.
Under the adversarial mode an arrive on another CTA's barrier lands later.
"""
from __future__ import annotations

import numpy as np

from ..frontend.errors import SimRuntimeError
from ..engines.mbarrier_object import MBarrier, get_mbar, hb_check_init, lane_int, lane_vals, mbar_targets, uniform_lanes
from ..frontend.registry import BLOCKED, NOT_BATCHED, YIELD, each_warp, handler


class WaitMbarrier:
    """Blocking reason: a try_wait that failed for every lane of the group."""
    __slots__ = ("bar", "parity", "token", "ins")

    def __init__(self, bar, parity, token, ins):
        self.bar, self.parity, self.token, self.ins = bar, parity, token, ins

    def ready(self):
        b = self.bar
        if b.cta.mbar.get(b.offset) is not b:
            return True     # re-executing reports the invalidated barrier
        if self.parity is not None:
            return (b.phase & 1) != self.parity
        return b.phase > self.token

    def describe(self):
        b = self.bar
        what = f"parity {self.parity}" if self.parity is not None else f"phase token {self.token}"
        hint = ""
        if self.parity is not None and b.pending == 0 and b.tx:
            hint = f"; all arrivals done, {b.tx} transaction bytes still expected"
        elif b.tx < 0:
            hint = f"; {-b.tx} bytes arrived ahead of expect_tx"
        return (f"mbarrier.try_wait on {b.name} waiting for {what}: current {b.describe()}{hint}")


_MB_IGN = {"release", "acquire", "cta", "cluster", "b64", "sync", "aligned"}


@handler("mbarrier")
def dec_mbarrier(ctx, ins, mods, ops):
    if not mods:
        ctx.bad("mbarrier needs an operation")
    op = mods[0]
    rest = mods[1:]
    sub = set()
    space = "generic"
    for mm in rest:
        if mm in ("shared", "shared::cta"):
            space = "shared::cta"
        elif mm == "shared::cluster":
            space = "shared::cluster"
        elif mm in ("expect_tx", "noComplete", "parity", "relaxed"):
            sub.add(mm)
        elif mm in _MB_IGN:
            pass
        else:
            ctx.unsupported(f"unsupported mbarrier modifier .{mm}")
    if op == "init":
        addr, rc = ctx.addr(ops[0]), ctx.rd(ops[1], "u32")

        def fn(w, g, m):
            lanes = w._lanes(m)
            for cta, off, _c in mbar_targets(w, lane_vals(addr(w), lanes), space, ins, lanes):
                cnt = lane_int(rc(w), int(lanes[0]))
                if not 1 <= cnt < 2 ** 20:
                    raise SimRuntimeError(f"mbarrier.init count {cnt} outside 1..2^20-1\n    at {ins.where()}")
                b = cta.mbar[off] = MBarrier(cta, off, cnt, ins.line)
                hb = cta.cluster.hb
                if hb is not None:
                    b.init = (w.agent, int(hb.warp_vc(w)[w.agent]), ins.pc)
                cta.launch.version += 1
        return fn
    if op == "inval":
        addr = ctx.addr(ops[0])

        def fn(w, g, m):
            lanes = w._lanes(m)
            for cta, off, _c in mbar_targets(w, lane_vals(addr(w), lanes), space, ins, lanes):
                cta.mbar.pop(off, None)
        return fn
    if op in ("arrive", "arrive_drop"):
        drop = op == "arrive_drop"
        dst = ctx.wr(ops[0], "b64")[0]
        addr = ctx.addr(ops[1])
        is_tx = "expect_tx" in sub
        nocomp = "noComplete" in sub
        rcount = ctx.rd(ops[2], "u32") if len(ops) > 2 else None

        def fn(w, g, m):
            lanes = w._lanes(m)
            av = lane_vals(addr(w), lanes)
            phase = 0
            hb = w.cta.cluster.hb
            for cta, off, n in mbar_targets(w, av, space, ins, lanes):
                b = get_mbar(cta, off, ins)
                phase = b.phase
                snap = None
                if hb is not None:
                    hb_check_init(w, b, ins)
                    if "relaxed" not in sub:
                        snap = hb.release(w)
                c = 1
                if rcount is not None:
                    c = lane_int(rcount(w), int(lanes[0]))

                def arrive(b=b, c=c, n=n, snap=snap):
                    if snap is not None:
                        b.snap = hb.merge(b.snap, snap)
                    if is_tx:
                        b.expect_tx(c * n)
                        b.note("arrive.expect_tx {} B x{} at {}", c, n, ins)
                        b.arrive(n, ins)
                    else:
                        b.note("arrive x{} at {}", n * c, ins)
                        b.arrive(n, ins, count=c, nocomplete=nocomp, drop=drop)
                ch = w.launch.chaos
                if ch is not None and cta is not w.cta:
                    ch.defer(arrive)        # remote arrivals land later (adversarial mode)
                else:
                    arrive()
            dst(w, m, np.uint64(phase))
        return fn
    if op in ("expect_tx", "complete_tx"):
        addr = ctx.addr(ops[0])
        rn = ctx.rd(ops[1], "u32")

        def fn(w, g, m):
            lanes = w._lanes(m)
            for cta, off, n in mbar_targets(w, lane_vals(addr(w), lanes), space, ins, lanes):
                b = get_mbar(cta, off, ins)
                v = lane_int(rn(w), int(lanes[0])) * n
                b.note("{} {} B at {}", op, v, ins)
                (b.expect_tx if op == "expect_tx" else b.complete_tx)(v)
        return fn
    if op in ("try_wait", "test_wait"):
        blocking = op == "try_wait"
        parity = "parity" in sub
        wp = ctx.wr(ops[0], "pred")[0]
        addr = ctx.addr(ops[1])
        rs = ctx.rd(ops[2], "u32" if parity else "u64")

        def not_ready(w, g, m, res, b, s):
            """No lane's wait succeeded on barrier ``b`` (state ``s``): try_wait suspends the
            group until the barrier changes; test_wait writes ``res`` and yields."""
            if blocking:
                g.blocked = WaitMbarrier(b, (s & 1) if parity else None, None if parity else s, ins)
                return BLOCKED
            w.poll = True
            wp(w, m, res)
            g.pc += 1
            return YIELD

        def fast(w, g, a, sv):
            """All 32 lanes wait on one barrier for one phase (the usual case)."""
            ((cta, off, _n),) = mbar_targets(w, int(a), space, ins, _LANE0)
            b = get_mbar(cta, off, ins)
            ok = (b.phase & 1) != (sv & 1) if parity else b.phase > sv
            hb = w.cta.cluster.hb
            if hb is not None:
                hb_check_init(w, b, ins)
                if ok and "relaxed" not in sub:
                    hb.acquire(w, b.done)
            if ok:
                wp(w, None, True)
                return None
            return not_ready(w, g, None, False, b, sv)

        def fn(w, g, m):
            if m is None and w.full:
                a, sv = addr(w), rs(w)
                if (not np.ndim(a) or uniform_lanes(a)) and (not np.ndim(sv) or uniform_lanes(sv)):
                    return fast(w, g, int(a if not np.ndim(a) else a[0]), int(sv if not np.ndim(sv) else sv[0]))
            lanes = w._lanes(m)
            av = lane_vals(addr(w), lanes)
            sv = np.broadcast_to(np.asarray(rs(w)), (32,))[lanes]
            res = np.zeros(32, bool)
            first = None
            targets = mbar_targets(w, av, space, ins, lanes)
            inv = np.unique(av, return_inverse=True)[1] if len(targets) > 1 else None
            for i, (cta, off, n) in enumerate(targets):
                b = get_mbar(cta, off, ins)
                sel = slice(None) if inv is None else inv == i
                s = sv[sel]
                if parity:
                    ok = (b.phase & 1) != (s.astype(np.int64) & 1)
                else:
                    ok = b.phase > s.astype(np.int64)
                res[lanes[sel]] = ok
                if first is None:
                    first = (b, int(s[0]))
                hb = w.cta.cluster.hb
                if hb is not None:
                    hb_check_init(w, b, ins)
                    if np.any(ok) and "relaxed" not in sub:
                        hb.acquire(w, b.done)
            if not res[lanes].any() and first is not None:
                return not_ready(w, g, m, res, *first)
            wp(w, m, res)

        def batch(bt):
            """A lockstep batch whose lanes all wait on one barrier for one phase that is already
            complete: each warp's wait succeeds (:func:`fast`, in the scheduler's stepping order);
            anything else -- a wait that would suspend, test_wait -- ``NOT_BATCHED``."""
            a, sv = addr(bt), rs(bt)
            if not blocking or (np.ndim(a) and not uniform_lanes(a)) or (np.ndim(sv) and not uniform_lanes(sv)):
                return NOT_BATCHED
            a, sv = int(a if not np.ndim(a) else a[0]), int(sv if not np.ndim(sv) else sv[0])
            ((cta, off, _n),) = mbar_targets(bt, int(a), space, ins, _LANE0)
            b = cta.mbar.get(off)
            if b is None or not ((b.phase & 1) != (sv & 1) if parity else b.phase > sv):
                return NOT_BATCHED
            for x in bt.members():
                fast(x, x.groups[0], a, sv)
            return None
        return each_warp(fn, batch)
    if op == "pending_count":
        ctx.unsupported("mbarrier.pending_count is not supported")
    ctx.unsupported(f"unsupported mbarrier operation .{op}")


_LANE0 = np.zeros(1, np.int64)
