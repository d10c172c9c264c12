"""mbarrier objects and instructions (PTX ISA "mbarrier").

State ``(phase, pending, expected, tx)`` is kept in a side table per CTA keyed by the
shared-memory offset (the 8 bytes themselves are not written). ``phase`` counts completed
phases; a phase completes when ``pending == 0 and tx == 0``, then ``pending = expected``.
``try_wait.parity P`` succeeds iff ``(phase & 1) != P``. A ``try_wait`` that fails for every
lane suspends the lane group until the barrier changes.

**Happens-before edges** (race detector, :mod:`cutedsl.sim.hb`): an mbarrier accumulates every
release (arrive, ``complete_tx`` of an async copy) and snapshots it when a phase completes; a
successful ``try_wait``/``test_wait`` acquires the snapshot of the latest completed phase;
``.relaxed`` forms neither release nor acquire; every use must come after the ``init``.
Under the adversarial mode an arrive on another CTA's barrier lands later.
"""
from __future__ import annotations

import numpy as np

from .errors import RaceError, SimRuntimeError
from .memory import OFF_MASK, RANK_SHIFT, SHARED_WIN
from .registry import BLOCKED, YIELD, handler

# -- mbarrier state ----------------------------------------------------------------------

class MBarrier:
    __slots__ = ("cta", "offset", "phase", "pending", "expected", "tx", "line", "log", "snap", "done",
                 "init")

    def __init__(self, cta, offset, count, line):
        self.cta, self.offset = cta, offset
        self.phase = 0
        self.pending = self.expected = count
        self.tx = 0
        self.line = line
        self.log = []
        self.snap = None        # join of every release into this barrier (happens-before)
        self.done = None        # ``snap`` when the latest phase completed
        self.init = None        # (agent, clock, pc) of the mbarrier.init

    @property
    def name(self):
        c = self.cta
        return f"{c.launch.program.smem_symbol(self.offset, c.dyn_base)} (CTA {c.ctaid}, smem offset {self.offset})"

    def note(self, text):
        if len(self.log) > 40:
            del self.log[:20]
        self.log.append(f"phase {self.phase}: {text}")

    def _check(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.done = self.snap
            self.pending = self.expected
            self.cta.launch.version += 1

    def arrive(self, n, ins, count=1, nocomplete=False, drop=False):
        total = n * count
        while total > 0:
            if self.pending <= 0:
                raise SimRuntimeError(
                    f"mbarrier {self.name}: over-arrival ({total} arrivals left, pending 0, tx {self.tx}) "
                    f"in phase {self.phase}\n    at {ins.where()}")
            take = min(total, self.pending)
            self.pending -= take
            total -= take
            if drop:
                self.expected -= take
            if nocomplete and self.pending == 0 and self.tx == 0:
                raise SimRuntimeError(f"mbarrier {self.name}: arrive.noComplete completed the phase\n"
                                      f"    at {ins.where()}")
            self._check()
        self.cta.launch.version += 1

    def expect_tx(self, n):
        self.tx += n
        self.cta.launch.version += 1

    def complete_tx(self, n):
        self.tx -= n
        self._check()
        self.cta.launch.version += 1

    def describe(self):
        return (f"phase {self.phase} (parity {self.phase & 1}), pending arrivals {self.pending}/"
                f"{self.expected}, tx-count {self.tx} B")


def mbar_targets(w, a, space, ins, lanes):
    """Map shared(::cluster) addresses to {(cta, offset): lane count}."""
    a = np.atleast_1d(np.asarray(a, np.uint64))
    if space == "generic":
        if np.any((a >> np.uint64(40)) != np.uint64(SHARED_WIN >> 40)):
            raise SimRuntimeError(f"mbarrier operand is not a shared-memory address\n    at {ins.where()}")
        a = a - np.uint64(SHARED_WIN)
    if len(a) == 1 or (a == a[0]).all():        # the usual case: one barrier for every lane
        pairs = ((int(a[0]), len(a)),)
    else:
        vals, counts = np.unique(a, return_counts=True)
        pairs = zip(vals.tolist(), counts.tolist())
    out = []
    for v, c in pairs:
        rank = v >> RANK_SHIFT
        off = v & OFF_MASK
        cta = w.cta
        if rank != cta.rank:
            if space not in ("shared::cluster", "generic"):
                raise SimRuntimeError(f"mbarrier address of cluster rank {rank} with .{space} (this CTA is rank "
                                      f"{cta.rank})\n    at {ins.where()}")
            cl = w.cta.cluster
            if rank >= len(cl.ctas):
                raise SimRuntimeError(f"mbarrier address names cluster rank {rank}, cluster has "
                                      f"{len(cl.ctas)} CTAs\n    at {ins.where()}")
            cta = cl.ctas[rank]
        if off % 8 or off + 8 > cta.smem_size:
            raise SimRuntimeError(f"mbarrier address offset {off} is misaligned or outside shared memory "
                                  f"({cta.smem_size} B)\n    at {ins.where()}")
        out.append((cta, off, c))
    return out


def get_mbar(cta, off, ins):
    b = cta.mbar.get(off)
    if b is None:
        raise SimRuntimeError(
            f"mbarrier at {cta.launch.program.smem_symbol(off, cta.dyn_base)} (CTA {cta.ctaid}) used before "
            f"mbarrier.init\n    at {ins.where()}")
    return b


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


def hb_check_init(w, b, ins):
    """Race check: the mbarrier.init of ``b`` must happen before this use by warp ``w``."""
    hb = w.cta.cluster.hb
    if hb is None or b.init is None:
        return
    agent, clock, pc = b.init
    if hb.warp_vc(w)[agent] < clock:
        c = b.cta
        raise RaceError(
            f"data race on mbarrier {b.name}:\n    mbarrier.init by {hb.describe(agent, pc, c.launch)}\n"
            f"    use by {hb.describe(w.agent, ins.pc, c.launch)}\n    are not ordered by "
            f"synchronisation; missing: fence.mbarrier_init (or a release) and a barrier between the "
            f"init and other threads' uses (PTX ISA: membar/fence (fence.mbarrier_init), mbarrier.init)"
            + hb.seed_note())


# -- mbarrier instructions -------------------------------------------------------------------

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
                cnt = int(np.broadcast_to(rc(w), (32,))[lanes[0]])
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
                    c = int(np.broadcast_to(rcount(w), (32,))[lanes[0]])

                def arrive(b=b, c=c, n=n, snap=snap):
                    if snap is not None:
                        b.snap = hb.merge(b.snap, snap)
                    if is_tx:
                        b.expect_tx(c * n)
                        b.note(f"arrive.expect_tx {c} B x{n} at line {ins.line}")
                        b.arrive(n, ins)
                    else:
                        b.note(f"arrive x{n * c} at line {ins.line}")
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
                v = int(np.broadcast_to(rn(w), (32,))[lanes[0]]) * n
                b.note(f"{op} {v} B at line {ins.line}")
                (b.expect_tx if op == "expect_tx" else b.complete_tx)(v)
        return fn
    if op in ("try_wait", "test_wait"):
        blocking = op == "try_wait"
        parity = "parity" in sub
        wp = ctx.wr(ops[0], "pred")[0]
        addr = ctx.addr(ops[1])
        rs = ctx.rd(ops[2], "u32" if parity else "u64")

        def fast(w, g, a, sv):
            """All 32 lanes wait on one barrier for one phase (the usual case)."""
            ((cta, off, _n),) = mbar_targets(w, np.array([a], np.uint64), space, ins, _LANE0)
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
            if blocking:
                g.blocked = WaitMbarrier(b, (sv & 1) if parity else None, None if parity else sv, ins)
                return BLOCKED
            w.poll = True
            wp(w, None, False)
            g.pc += 1
            return YIELD

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
                b, s = first
                if blocking:
                    g.blocked = WaitMbarrier(b, (s & 1) if parity else None, None if parity else s, ins)
                    return BLOCKED
                w.poll = True
                wp(w, m, res)
                g.pc += 1
                return YIELD
            wp(w, m, res)
        return fn
    if op == "pending_count":
        ctx.unsupported("mbarrier.pending_count is not supported")
    ctx.unsupported(f"unsupported mbarrier operation .{op}")


_LANE0 = np.zeros(1, np.int64)


def uniform_lanes(v) -> bool:
    """Every element of 1-D ``v`` equals the first (compared as bytes: cheaper than a ufunc)."""
    raw = v.tobytes()
    return raw == raw[:v.itemsize] * len(v)


def lane_vals(v, lanes):
    v = np.asarray(v, np.uint64)
    return v[lanes] if v.ndim else np.full(len(lanes), v, np.uint64)
