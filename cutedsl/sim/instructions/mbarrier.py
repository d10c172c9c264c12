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
from ..engines.mbarrier_object import (MBarrier, get_mbar, hb_check_init, lane_int, lane_vals, mbar_targets,
                                       uniform_lanes)
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
        relaxed = "relaxed" in sub
        rcount = ctx.rd(ops[2], "u32") if len(ops) > 2 else None

        def land(b, c, n):
            """``n`` lanes' arrival (count ``c`` each) on ``b``."""
            if is_tx:
                b.expect_tx(c * n)
                b.note("arrive.expect_tx {} B x{} at {}", c, n, ins)
                b.arrive(n, ins)
            else:
                b.note("arrive x{} at {}", n * c, ins)
                b.arrive(n, ins, count=c, nocomplete=nocomp, drop=drop)

        def arrivals(w, hb, lanes, av):
            """Warp ``w``'s arrivals of its ``lanes`` (addresses ``av``) in lane order of the barriers;
            returns the phase the destination gets (that of the last barrier, before its arrival)."""
            phase = 0
            for cta, off, n in mbar_targets(w, av, space, ins, lanes):
                b = get_mbar(cta, off, ins)
                phase = b.phase
                c = 1 if rcount is None else lane_int(rcount(w), int(lanes[0]))
                later = cta is not w.cta and w.launch.chaos is not None
                snap = None
                if hb is not None:
                    hb_check_init(w, b, ins)
                    if not relaxed:
                        if later:
                            snap = hb.release(w)
                        else:       # joined at once: the release's snapshot needs no copy
                            b.snap = hb.release_join(w, b.snap)
                if later:           # remote arrivals land later (adversarial mode)
                    def arrive(b=b, c=c, n=n, snap=snap):
                        if snap is not None:
                            b.snap = hb.merge(b.snap, snap)
                        land(b, c, n)
                    w.launch.chaos.defer(arrive)
                else:
                    land(b, c, n)
            return phase

        def fn(w, g, m):
            lanes = w._lanes(m)
            phase = arrivals(w, w.cta.cluster.hb, lanes, lane_vals(addr(w), lanes))
            dst(w, m, np.uint64(phase))

        def detour(bt, order, falls):
            """``fn(x, x.groups[0], f)`` for each warp ``x`` of lockstep batch ``bt`` and its lanes
            ``f`` (None: all 32) in turn (``lockstep._detour``: e.g. each consumer warp's lane-0
            arrive releasing a pipeline stage) -- as one arrival when it can (:func:`one_barrier`);
            else warp by warp, the addresses read once for the batch and the destinations (each
            warp's lanes) written at the end in one masked write (on an error, those of the warps
            that arrived before it, as their own calls would have)."""
            av = addr(bt)
            if one_barrier(bt, order, falls, av):
                return
            per_lane = np.ndim(av) > 0
            hb = bt.cta.cluster.hb
            lo = bt.lo
            mask = np.zeros(32 * (bt.hi - lo), bool)
            vals = np.zeros(32 * (bt.hi - lo), np.uint64)
            try:
                for x, f in zip(order, falls):
                    j = 32 * (x.wid - lo)
                    lanes = x._lanes(f)
                    phase = arrivals(x, hb, lanes, lane_vals(av[j:j + 32] if per_lane else av, lanes))
                    sel = slice(j, j + 32) if f is None else lanes + j
                    mask[sel] = True
                    vals[sel] = phase
            finally:
                dst(bt, mask, vals)

        def one_barrier(bt, order, falls, av) -> bool:
            """:func:`detour`'s arrivals when every lane names one barrier of this CTA (or no
            arrival lands later) and only the last warp's arrival may complete its phase (PTX ISA
            9.7.13.15 mbarrier: a phase completes when its pending count reaches zero; 9.7.13.15.13
            mbarrier.arrive): nothing in the
            sequence reads what the earlier warps changed, so it is done as one step -- the
            barrier's join of the warps' releases (``HB.release_join_all``), each warp's note and
            ``arrive`` in turn, the phase before them to every lane's destination. False (nothing
            done) otherwise: a count operand, ``.expect_tx``, ``.noComplete``, ``arrive_drop``,
            several barriers, an earlier completion or over-arrival, a failing init check."""
            if rcount is not None or is_tx or nocomp or drop:
                return False
            lo = bt.lo
            sel = np.ones(32 * (bt.hi - lo), bool)      # the arriving lanes of the batch
            ns = []                                     # and their count per warp, in order
            for x, f in zip(order, falls):
                if f is None:
                    ns.append(32)
                else:
                    j = 32 * (x.wid - lo)
                    sel[j:j + 32] = f
                    ns.append(int(np.count_nonzero(f)))
            if np.ndim(av):
                a = av[sel]
                if not uniform_lanes(a):
                    return False
                v = int(a[0])
            else:
                v = int(av)
            # (an error here is the one the first warp's own arrive raises before arriving)
            ((cta, off, _n),) = mbar_targets(order[0], v, space, ins, _LANE0)
            if cta is not bt.cta and bt.launch.chaos is not None:
                return False
            b = get_mbar(cta, off, ins)
            total = sum(ns)
            if total > b.pending or total - ns[-1] >= b.pending:
                return False
            hb = bt.cta.cluster.hb
            if hb is not None:
                if b.init is not None:
                    agent, clock, _pc = b.init
                    if any(hb.warp_vc(x)[agent] < clock for x in order):
                        return False        # hb_check_init reports it in the warp-by-warp path
                if not relaxed:
                    b.snap = hb.release_join_all(order, b.snap)
            phase = b.phase
            for n in ns:
                b.note("arrive x{} at {}", n, ins)
                b.arrive(n, ins)
            dst(bt, sel, np.uint64(phase))
            return True
        fn.detour = detour
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
        relaxed = "relaxed" in sub
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
                an, sn = getattr(a, "ndim", 0), getattr(sv, "ndim", 0)     # (np.ndim, without its dispatch)
                if (not an or uniform_lanes(a)) and (not sn or uniform_lanes(sv)):
                    return fast(w, g, int(a[0] if an else a), int(sv[0] if sn else sv))
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
            an, sn = getattr(a, "ndim", 0), getattr(sv, "ndim", 0)
            if not blocking or (an and not uniform_lanes(a)) or (sn and not uniform_lanes(sv)):
                return NOT_BATCHED
            a, sv = int(a[0] if an else a), int(sv[0] if sn else sv)
            ((cta, off, _n),) = mbar_targets(bt, int(a), space, ins, _LANE0)
            b = cta.mbar.get(off)
            if b is None or not ((b.phase & 1) != (sv & 1) if parity else b.phase > sv):
                return NOT_BATCHED
            ws = bt.members()
            hb = bt.cta.cluster.hb
            if hb is not None:
                if b.init is not None:
                    agent, clock, _pc = b.init
                    if any(hb.warp_vc(x)[agent] < clock for x in ws):
                        for x in ws:        # hb_check_init reports the first such warp, as its own run
                            fast(x, x.groups[0], a, sv)
                        return None
                if not relaxed:
                    done = b.done
                    for x in ws:
                        hb.acquire(x, done)
            # what fast() does for each warp in turn (one barrier, its phase unchanged by the
            # acquires, every init check passed), its predicate written once for the batch
            wp(bt, None, True)
            return None
        return each_warp(fn, batch)
    if op == "pending_count":
        ctx.unsupported("mbarrier.pending_count is not supported")
    ctx.unsupported(f"unsupported mbarrier operation .{op}")


_LANE0 = np.zeros(1, np.int64)
