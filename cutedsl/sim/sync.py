"""Synchronisation: mbarriers, named barriers (``bar``/``barrier``), the cluster barrier,
fences, and the race-checker shadow state.

**mbarrier** (PTX ISA "mbarrier"): state ``(phase, pending, expected, tx)`` kept in a side
table per CTA keyed by the shared-memory offset (the 8 bytes themselves are not written).
``phase`` counts completed phases; a phase completes when ``pending == 0 and tx == 0``,
then ``pending = expected``. ``try_wait.parity P`` succeeds iff ``(phase & 1) != P``. A
``try_wait`` that fails for every lane suspends the lane group until the barrier changes.

**Named barriers**: arrival is per warp (all non-exited lanes of the warp must be converged
at the instruction); ``bar.sync a`` without a count waits for every non-exited warp of the
CTA; with a count ``b`` for ``b/32`` warps.

**Race shadow** (per 16-byte chunk of shared memory): which mbarrier phase a TMA write
becomes visible at, which warp wrote generic data not yet fenced with
``fence.proxy.async``, and how many pending wgmma groups read the chunk.
"""
from __future__ import annotations

import numpy as np

from .errors import RaceError, SimRuntimeError
from .memory import OFF_MASK, RANK_SHIFT, SHARED_WIN
from .registry import BLOCKED, YIELD, handler


# -- mbarrier state ----------------------------------------------------------------------

class MBarrier:
    __slots__ = ("cta", "offset", "phase", "pending", "expected", "tx", "line", "log")

    def __init__(self, cta, offset, count, line):
        self.cta, self.offset = cta, offset
        self.phase = 0
        self.pending = self.expected = count
        self.tx = 0
        self.line = line
        self.log = []

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
    vals, counts = np.unique(a, return_counts=True)
    out = []
    for v, c in zip(vals.tolist(), counts.tolist()):
        rank = v >> RANK_SHIFT
        off = v & OFF_MASK
        cta = w.cta
        if rank:
            if space not in ("shared::cluster", "generic"):
                raise SimRuntimeError(f"remote mbarrier address with .{space}\n    at {ins.where()}")
            cl = w.cta.cluster
            if rank - 1 >= len(cl.ctas):
                raise SimRuntimeError(f"mbarrier address names cluster rank {rank - 1}, cluster has "
                                      f"{len(cl.ctas)} CTAs\n    at {ins.where()}")
            cta = cl.ctas[rank - 1]
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


# -- named barriers ------------------------------------------------------------------------

class NamedBarrier:
    __slots__ = ("id", "count", "arrived", "waiters", "line")

    def __init__(self, bid):
        self.id = bid
        self.count = None
        self.arrived = []
        self.waiters = []
        self.line = 0


class BarWait:
    __slots__ = ("bar", "cta", "ins")

    def __init__(self, bar, cta, ins):
        self.bar, self.cta, self.ins = bar, cta, ins

    def ready(self):
        return False

    def describe(self):
        b = self.bar
        exp = _expected_warps(self.cta, b)
        return (f"named barrier {b.id}: {len(b.arrived)} of {exp} warps arrived "
                f"(warps {sorted(w.wid for w in b.arrived)})")


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


def _expected_warps(cta, b):
    if b.count is not None:
        return b.count // 32
    return sum(1 for w in cta.warps if not w.done)


def _release(cta, b, current=None):
    ws = b.arrived
    if cta.launch.race_check and ws:
        merged = {}
        for w in ws:
            for k, v in w.observed.items():
                if merged.get(k, -1) < v:
                    merged[k] = v
        for w in ws:
            w.observed = dict(merged)
    for (w, g) in b.waiters:
        if g is current:
            continue
        g.blocked = None
        g.pc += 1
    b.arrived = []
    b.waiters = []
    b.count = None
    cta.launch.version += 1


def check_named_barriers(cta):
    for b in list(cta.bars.values()):
        if b.arrived and b.count is None and len(b.arrived) >= _expected_warps(cta, b):
            _release(cta, b)


def need_converged(w, g, ins):
    """Block ``g`` until all live lanes of its warp reach this PC; True if blocked."""
    if g.count != w.nlive:
        g.blocked = Converge(ins, w)
        return True
    return False


@handler("bar", "barrier")
def dec_bar(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    if mods and mods[0] == "cluster":
        return _dec_cluster_barrier(ctx, ins, mods[1:], ops)
    if mods and mods[0] == "warp":
        if mods[1:] != ["sync"]:
            ctx.unsupported("bar.warp form")
        return lambda w, g, m: None
    kind = None
    for mm in mods:
        if mm in ("sync", "arrive"):
            kind = mm
        elif mm == "aligned":
            pass
        elif mm == "red":
            ctx.unsupported("bar.red / barrier.red are not supported")
        else:
            ctx.unsupported(f"unsupported barrier modifier .{mm}")
    if kind is None:
        if base == "bar" and not mods:
            kind = "sync"
        else:
            ctx.unsupported("barrier form")
    if not 1 <= len(ops) <= 2:
        ctx.bad("barrier takes an id and an optional thread count")
    rid = ctx.rd(ops[0], "u32")
    rcnt = ctx.rd(ops[1], "u32") if len(ops) == 2 else None
    if kind == "arrive" and rcnt is None:
        ctx.bad("bar.arrive needs a thread count")
    is_sync = kind == "sync"

    def fn(w, g, m):
        if m is not g.m:
            raise SimRuntimeError(f"predicated-off lanes at a barrier are not supported\n    at {ins.where()}")
        if need_converged(w, g, ins):
            return BLOCKED
        lane0 = int(np.flatnonzero(g.mask)[0])
        bid = int(np.broadcast_to(rid(w), (32,))[lane0])
        if not 0 <= bid < 16:
            raise SimRuntimeError(f"barrier id {bid} outside 0..15\n    at {ins.where()}")
        cnt = None
        if rcnt is not None:
            cnt = int(np.broadcast_to(rcnt(w), (32,))[lane0])
            if cnt % 32 or cnt <= 0:
                raise SimRuntimeError(f"barrier {bid}: thread count {cnt} is not a positive multiple of 32"
                                      f"\n    at {ins.where()}")
        cta = w.cta
        b = cta.bars.get(bid)
        if b is None:
            b = cta.bars[bid] = NamedBarrier(bid)
        if b.arrived and b.count != cnt:
            raise SimRuntimeError(f"barrier {bid}: thread count {cnt} differs from {b.count} used by other "
                                  f"warps in this generation\n    at {ins.where()}")
        if w in b.arrived:
            raise SimRuntimeError(f"barrier {bid}: warp {w.wid} arrived twice in one generation\n"
                                  f"    at {ins.where()}")
        b.count = cnt
        b.arrived.append(w)
        if is_sync:
            b.waiters.append((w, g))
        cta.launch.version += 1
        if len(b.arrived) >= _expected_warps(cta, b):
            if cnt is not None and len(b.arrived) > cnt // 32:
                raise SimRuntimeError(f"barrier {bid}: more warps arrived than the count {cnt}\n"
                                      f"    at {ins.where()}")
            _release(cta, b, current=g)
            return None
        if is_sync:
            g.blocked = BarWait(b, cta, ins)
            return BLOCKED
        return None
    return fn


class ClusterWait:
    __slots__ = ("cluster", "phase", "ins")

    def __init__(self, cluster, phase, ins):
        self.cluster, self.phase, self.ins = cluster, phase, ins

    def ready(self):
        return self.cluster.barrier_gen > self.phase

    def describe(self):
        cl = self.cluster
        live = [(c.rank, w.wid) for c in cl.ctas for w in c.warps if not w.done]
        missing = [x for x in live if x not in cl.barrier_arrived]
        return (f"barrier.cluster.wait (generation {self.phase}): warps not yet arrived "
                f"(rank, warp): {missing[:16]}")


def cluster_barrier_check(cl):
    live = [(c.rank, w.wid) for c in cl.ctas for w in c.warps if not w.done]
    if cl.barrier_arrived and all(x in cl.barrier_arrived for x in live):
        cl.barrier_gen += 1
        cl.barrier_arrived = {}
        if cl.ctas:
            cl.ctas[0].launch.version += 1


def _dec_cluster_barrier(ctx, ins, mods, ops):
    kind = None
    for mm in mods:
        if mm in ("arrive", "wait"):
            kind = mm
        elif mm in ("aligned", "release", "relaxed", "acquire"):
            pass
        else:
            ctx.unsupported(f"unsupported barrier.cluster modifier .{mm}")
    if kind is None or ops:
        ctx.bad("barrier.cluster.arrive / wait take no operands")

    def fn(w, g, m):
        if need_converged(w, g, ins):
            return BLOCKED
        cl = w.cta.cluster
        key = (w.cta.rank, w.wid)
        if kind == "arrive":
            if key in cl.barrier_arrived:
                raise SimRuntimeError(f"barrier.cluster.arrive twice in one generation by CTA rank {key[0]} "
                                      f"warp {key[1]}\n    at {ins.where()}")
            cl.barrier_arrived[key] = cl.barrier_gen
            w.cluster_phase = cl.barrier_gen
            cluster_barrier_check(cl)
            return None
        ph = getattr(w, "cluster_phase", None)
        if ph is None:
            raise SimRuntimeError(f"barrier.cluster.wait without a prior barrier.cluster.arrive (certain hang)"
                                  f"\n    at {ins.where()} (CTA {w.cta.ctaid}, warp {w.wid})")
        if cl.barrier_gen > ph:
            w.cluster_phase = None
            return None
        g.blocked = ClusterWait(cl, ph, ins)
        return BLOCKED
    return fn


# -- mbarrier instructions -------------------------------------------------------------------

_MB_IGN = {"release", "acquire", "relaxed", "cta", "cluster", "b64", "sync", "aligned"}


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
        elif mm in ("expect_tx", "noComplete", "parity"):
            sub.add(mm)
        elif mm in _MB_IGN:
            pass
        else:
            ctx.unsupported(f"unsupported mbarrier modifier .{mm}")
    if op == "init":
        addr, rc = ctx.addr(ops[0]), ctx.rd(ops[1], "u32")

        def fn(w, g, m):
            lanes = w._lanes(m)
            for cta, off, _c in mbar_targets(w, _lane_vals(addr(w), lanes), space, ins, lanes):
                cnt = int(np.broadcast_to(rc(w), (32,))[lanes[0]])
                if not 1 <= cnt < 2 ** 20:
                    raise SimRuntimeError(f"mbarrier.init count {cnt} outside 1..2^20-1\n    at {ins.where()}")
                cta.mbar[off] = MBarrier(cta, off, cnt, ins.line)
                cta.launch.version += 1
        return fn
    if op == "inval":
        addr = ctx.addr(ops[0])

        def fn(w, g, m):
            lanes = w._lanes(m)
            for cta, off, _c in mbar_targets(w, _lane_vals(addr(w), lanes), space, ins, lanes):
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
            av = _lane_vals(addr(w), lanes)
            phase = 0
            for cta, off, n in mbar_targets(w, av, space, ins, lanes):
                b = get_mbar(cta, off, ins)
                phase = b.phase
                c = 1
                if rcount is not None:
                    c = int(np.broadcast_to(rcount(w), (32,))[lanes[0]])
                if is_tx:
                    b.expect_tx(c * n)
                    b.note(f"arrive.expect_tx {c} B x{n} at line {ins.line}")
                    b.arrive(n, ins)
                else:
                    b.note(f"arrive x{n * c} at line {ins.line}")
                    b.arrive(n, ins, count=c, nocomplete=nocomp, drop=drop)
            dst(w, m, np.uint64(phase))
        return fn
    if op in ("expect_tx", "complete_tx"):
        addr = ctx.addr(ops[0])
        rn = ctx.rd(ops[1], "u32")

        def fn(w, g, m):
            lanes = w._lanes(m)
            for cta, off, n in mbar_targets(w, _lane_vals(addr(w), lanes), space, ins, lanes):
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

        def fn(w, g, m):
            lanes = w._lanes(m)
            av = _lane_vals(addr(w), lanes)
            sv = np.broadcast_to(np.asarray(rs(w)), (32,))[lanes]
            res = np.zeros(32, bool)
            first = None
            _vals, inv = np.unique(av, return_inverse=True)
            for i, (cta, off, n) in enumerate(mbar_targets(w, av, space, ins, lanes)):
                b = get_mbar(cta, off, ins)
                sel = inv == i
                s = sv[sel]
                if parity:
                    ok = (b.phase & 1) != (s.astype(np.int64) & 1)
                else:
                    ok = b.phase > s.astype(np.int64)
                res[lanes[sel]] = ok
                if first is None:
                    first = (b, int(s[0]))
                if np.any(ok) and w.launch.race_check:
                    key = (id(cta), off)
                    if w.observed.get(key, -1) < b.phase:
                        w.observed[key] = b.phase
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


def _lane_vals(v, lanes):
    v = np.asarray(v, np.uint64)
    return v[lanes] if v.ndim else np.full(len(lanes), v, np.uint64)


# -- fences ---------------------------------------------------------------------------------

@handler("fence", "membar")
def dec_fence(ctx, ins, mods, ops):
    ok = {"sc", "acq_rel", "acquire", "release", "cta", "gpu", "sys", "cluster", "proxy", "async",
          "alias", "shared::cta", "shared::cluster", "global", "tensormap::generic", "mbarrier_init",
          "async::generic", "op_restrict", "sync_restrict::shared::cta", "sync_restrict::shared::cluster",
          "gl", "relaxed"}
    for mm in mods:
        if mm not in ok:
            ctx.unsupported(f"unsupported fence modifier .{mm}")
    if ops:
        ctx.addr(ops[0])
    if "proxy" in mods and "async" in mods:
        def fn(w, g, m):
            sh = w.cta.shadow
            if sh is not None:
                sh.fence(w)
        return fn
    return lambda w, g, m: None


# -- race shadow ------------------------------------------------------------------------------

class RaceShadow:
    """Per-16-byte-chunk shadow of one CTA's shared memory (see module docstring)."""

    def __init__(self, cta):
        n = cta.smem_size // 16 + 2
        self.cta = cta
        self.tma_bar = np.full(n, -1, np.int64)     # barrier offset the data waits on, or -1
        self.tma_need = np.zeros(n, np.int64)       # phase count that makes it visible
        self.tma_line = np.zeros(n, np.int32)
        self.dirty = np.zeros(n, np.int32)          # 1 + warp id of an unfenced generic write
        self.wg_read = np.zeros(n, np.int32)        # pending wgmma groups reading the chunk

    @staticmethod
    def chunks(off, nb):
        off = np.asarray(off, np.int64)
        lo = off >> 4
        hi = (off + nb - 1) >> 4
        if np.array_equal(lo, hi):
            return np.unique(lo)
        return np.unique(np.concatenate([lo, hi]))

    def tma_write(self, ch, bar_off, need, ins):
        if np.any(self.wg_read[ch]):
            c = int(ch[np.flatnonzero(self.wg_read[ch])[0]])
            raise RaceError(
                f"TMA load writes shared memory {self.cta.launch.program.smem_symbol(16 * c, self.cta.dyn_base)} "
                f"(CTA {self.cta.ctaid}) that an in-flight wgmma still reads (no wgmma.wait_group covering it "
                f"before the stage was released)\n    at {ins.where()}")
        self.tma_bar[ch] = bar_off
        self.tma_need[ch] = need
        self.tma_line[ch] = ins.line
        self.dirty[ch] = 0

    def _check_visible(self, ch, observed_fn, ins, who):
        b = self.tma_bar[ch]
        sel = b >= 0
        if not sel.any():
            return
        nd = self.tma_need[ch]
        if sel.all() and (b == b[0]).all() and (nd == nd[0]).all():
            bo, need = int(b[0]), int(nd[0])
            if observed_fn((id(self.cta), bo)) >= need:
                return
        for bo, need, line in set(zip(b[sel].tolist(), self.tma_need[ch][sel].tolist(),
                                       self.tma_line[ch][sel].tolist())):
            key = (id(self.cta), bo)
            if observed_fn(key) < need:
                bar = self.cta.mbar.get(bo)
                bname = bar.name if bar else f"mbarrier at smem offset {bo}"
                raise RaceError(
                    f"{who} reads shared memory written by the TMA load at PTX line {line} before waiting "
                    f"for its completion on {bname} (needs phase {need - 1} complete; reader observed "
                    f"{observed_fn(key)} completed phases)\n    at {ins.where()}")

    def check_read(self, off, nb, w, ins):
        # naturally aligned accesses of <= 16 B never cross a 16-B chunk
        ch = np.asarray(off, np.int64) >> 4 if nb <= 16 else self.chunks(off, nb)
        if not (self.tma_bar[ch] >= 0).any():
            return
        self._check_visible(ch, lambda k: w.observed.get(k, -1), ins, f"warp {w.wid} of CTA {self.cta.ctaid}")

    def check_async_read(self, ch, warps, ins, what):
        def obs(k):
            return max(w.observed.get(k, -1) for w in warps)
        self._check_visible(ch, obs, ins, what)
        d = self.dirty[ch]
        if d.any():
            c = int(ch[np.flatnonzero(d)[0]])
            raise RaceError(
                f"{what} reads shared memory {self.cta.launch.program.smem_symbol(16 * c, self.cta.dyn_base)} "
                f"written by generic stores of warp {int(d[np.flatnonzero(d)[0]]) - 1} without a "
                f"fence.proxy.async before it\n    at {ins.where()}")

    def generic_write(self, off, nb, w):
        ch = np.asarray(off, np.int64) >> 4 if nb <= 16 else self.chunks(off, nb)
        self.dirty[ch] = w.wid + 1
        self.tma_bar[ch] = -1

    def fence(self, w):
        self.dirty[self.dirty == w.wid + 1] = 0
