"""Register files and lockstep batches of warps.

A CTA keeps one register array per class (``p``, 16, 32, 64 bit) of shape ``[nregs, 32 x
warps]``; each :class:`machine.Warp` owns 32 columns of it through typed views
(``u32``, ``f32``, ...). A :class:`WarpBatch` is the same views over the columns of a
contiguous run of warps, so a decoded closure runs once for all of them
(:mod:`cutedsl.sim.machine.lockstep`).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..checks.shadow_words import words_of
from .memory import CTA_SHARED, as_unsigned, element_index, write_noting_change



def register_files(nregs, width):
    """Register arrays ``[nregs, width]`` per class (p, 16, 32, 64 bit) for ``width`` lanes."""
    return {"p": np.zeros((max(nregs["p"], 1), width), bool),
            "h": np.zeros((max(nregs["h"], 1), width), np.uint16),
            "r": np.zeros((max(nregs["r"], 1), width), np.uint32),
            "d": np.zeros((max(nregs["d"], 1), width), np.uint64)}


def set_register_views(obj, files, cols):
    """Give ``obj`` the typed register views (``u32``, ``f32``, ...) of ``files[:, cols]``."""
    obj.p = files["p"][:, cols]
    obj.u16 = files["h"][:, cols]
    obj.s16 = obj.u16.view(np.int16)
    obj.f16 = obj.u16.view(np.float16)
    obj.bf16 = obj.u16.view(ml_dtypes.bfloat16)
    obj.u32 = files["r"][:, cols]
    obj.s32 = obj.u32.view(np.int32)
    obj.f32 = obj.u32.view(np.float32)
    obj.u64 = files["d"][:, cols]
    obj.s64 = obj.u64.view(np.int64)
    obj.f64 = obj.u64.view(np.float64)


class WarpBatch:
    """Warps ``lo .. hi - 1`` of one CTA executing one register-only instruction together
    (lockstep): the register views span their ``32 (hi - lo)`` lanes, so a decoded closure runs
    once for all of them. Only instructions the decoder marked ``batch`` (arithmetic, logic,
    comparisons, conversions and moves on registers, immediates and lane-invariant special
    registers) run this way; see ``Launch._run_warp``."""

    is_batch = True

    def __init__(self, cta, lo, hi):
        self.cta = cta
        self.launch = cta.launch
        self.lo, self.hi = lo, hi
        self.full = True
        self.deferred = []          # shared stores whose race check waits for flush()
        self.deferred_ids = ()      # the identities of their word arrays (the overlap cache's key)
        self.leader = lo            # the warp whose turn formed the batch (lockstep.py sets it)
        set_register_views(self, cta.files, slice(32 * lo, 32 * hi))
        self.sregs = {}             # filled on first use (most batches read none)

    def sreg(self, name):
        s = self.sregs
        if not s:
            ws = self.cta.warps[self.lo:self.hi]
            s.update({k: (np.concatenate([w.sregs[k] for w in ws]) if np.ndim(v) else v)
                      for k, v in ws[0].sregs.items() if k != "%warpid"})
            s["%warpid"] = np.repeat(np.arange(self.lo, self.hi, dtype=np.uint32), 32)
        return s[name]

    def members(self):
        """The batch's warps in the order the scheduler steps them through an instruction the
        leader ran alone (``lockstep.step_gang``): the leader, the warps below it downwards, then
        those above it -- so a warp-uniform instruction run per warp (``registry.each_warp``)
        reports what the leader's own run and its stepped neighbours would have."""
        ws = self.cta.warps
        ld = self.leader
        return [ws[ld]] + ws[self.lo:ld][::-1] + ws[ld + 1:self.hi]

    def flush(self):
        """Record the deferred shared stores of this batch in the race detector at once
        (``hb.Shadow.write_warps``). If a check fails, undo their bytes (newest first) and
        replay them store by store, warp by warp -- the order the lockstep run executed them
        in -- so the report (or a benign verdict) is exactly the per-warp one."""
        d = self.deferred
        if not d:
            return
        self.deferred = []
        self.deferred_ids = ()
        cta = self.cta
        sh = cta.shadow
        ws = cta.warps[self.lo:self.hi]
        words, owner, pcs = _flush_plan(cta.launch.plans, d, len(ws))
        if sh.write_warps(words, ws, pcs, owner):
            return
        for _w, _ins, ix, old, _a, _v, esize, _n, _sp in reversed(d):
            cta.sv[esize][ix] = old
        for _w, ins, _ix, _old, a, vals, esize, n, space in d:
            for j, w in enumerate(ws):
                part = slice(32 * j, 32 * j + 32)
                w.store(space, a[part], None, esize, n, vals[part], ins, True)

    def _lanes(self, m):
        return np.arange(32 * (self.hi - self.lo)) if m is None else m.nonzero()[0]

    def store(self, space, addr, m, esize, n, vals, ins, race=True):
        """:meth:`Warp.store` for the batch: stores to the CTA's own shared memory whose lanes
        touch distinct words at once (one bounds check, one race-detector update for all the
        warps); anything else -- and every case that needs a report -- as each warp's own store
        in turn, exactly as if they had run one after the other."""
        ws = self.cta.warps[self.lo:self.hi]
        k = 32 * len(ws)
        vals = np.asarray(vals)
        if vals.shape != (k, n):
            vals = np.broadcast_to(vals, (k, n))
        if m is None and self._store_shared(space, addr, esize, n, vals, ins, race, ws):
            return
        self.flush()                # the deferred stores come first
        a = np.asarray(addr)
        for j, w in enumerate(ws):
            part = slice(32 * j, 32 * j + 32)
            w.store(space, a[part] if a.ndim else a, None if m is None else m[part], esize, n, vals[part], ins, race)

    def _store_shared(self, space, addr, esize, n, vals, ins, race, ws):
        nb = esize * n
        if space not in CTA_SHARED or not getattr(addr, "ndim", 0) or nb < 4:
            return False
        a = np.asarray(addr, np.uint64)
        cta = self.cta
        plan = _store_plan(cta, a, esize, n)
        if plan is None:
            return False
        lo, hi, ix, words = plan
        if cta.overlaps_mbarrier(lo, hi):
            return False
        if vals.dtype != _UNSIGNED[esize]:
            vals = as_unsigned(vals, esize)
        v = cta.sv[esize]
        vv = vals[:, 0] if n == 1 else vals
        sh = cta.shadow
        if race and sh is not None:
            # the race check of consecutive stores of a lockstep run is done once, at flush()
            d = self.deferred
            if d and _overlap(self.launch.plans, self.deferred_ids, d, words):
                self.flush()            # overwrites a word a deferred store wrote: settle those first
            old = v[ix]                 # (a gather: a copy)
            self.deferred.append((words, ins, ix, old, a.copy(), np.array(vals), esize, n, space))
            self.deferred_ids += (id(words),)
            # write_noting_change with the bytes just gathered (same shape as vv)
            launch = self.launch
            if not launch.changed and np.count_nonzero(old != vv):
                launch.changed = True
            v[ix] = vv
            return True
        write_noting_change(self.launch, v, ix, vv)
        return True


#: the unsigned element type of each store size
_UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}


def _overlap(cache, ids, d, words) -> bool:
    """Whether ``words`` (the read-only word array of a cached store plan, :func:`_store_plan`)
    shares a word with the deferred stores ``d`` (``ids``: the identities of their word arrays).
    Cached in ``cache`` (the launch's ``plans``) by those identities, which the entry keeps
    alive: an epilogue repeats the same stores in the same order."""
    key = ("overlap", ids, id(words))
    hit = cache.get(key)
    if hit is None:
        if len(cache) > 256:
            cache.clear()
        arrays = [e[0] for e in d]
        hit = cache[key] = (arrays, words, bool(np.intersect1d(np.concatenate(arrays), words).size))
    return hit[2]


def _flush_plan(cache, d, k):
    """``(words, owner, pcs)`` of the deferred stores ``d`` of ``k`` warps (:meth:`WarpBatch.flush`):
    their word ids in store order, the warp (0 .. k-1) and the PC of each. Cached in ``cache``
    (the launch's ``plans``: it goes with the launch, as the store plans whose word arrays
    it is keyed by -- :func:`_store_plan` caches them: an epilogue repeats the same stores)."""
    key = (k,) + tuple((id(e[0]), e[1].pc) for e in d)
    hit = cache.get(key)
    if hit is None:
        if len(cache) > 256:
            cache.clear()
        words = np.concatenate([e[0] for e in d])
        owner = np.concatenate([np.repeat(np.arange(k), len(e[0]) // k) for e in d])
        pcs = np.concatenate([np.full(len(e[0]), e[1].pc, np.int32) for e in d])
        for x in (words, owner, pcs):
            x.flags.writeable = False
        hit = cache[key] = ([e[0] for e in d], (words, owner, pcs))     # keeps the ids alive
    return hit[1]


def _store_plan(cta, a, esize, n):
    """For a batch store of ``n`` elements of ``esize`` bytes per lane at shared addresses ``a``
    (uint64, one per lane): ``(lowest byte, end byte, element indices, word ids)`` when every
    address is the CTA's own, in bounds, aligned, and no two lanes' bytes meet (lanes of different
    warps must not: else the store runs per warp); else None. Cached per CTA by the address bytes:
    an epilogue stores its tiles through the same address registers again and again."""
    key = (a.tobytes(), esize, n)
    plans = cta.store_plans
    hit = plans.get(key, False)
    if hit is not False:
        return hit
    nb = esize * n
    plan = None
    off = cta.own_offsets(a, nb)
    if off is not None:
        so = np.sort(off)
        if int((so[1:] - so[:-1]).min()) >= nb:
            ix, words = element_index(off, esize, n), words_of(off, nb)
            ix.flags.writeable = words.flags.writeable = False
            plan = (int(so[0]), int(so[-1]) + nb, ix, words)
    if len(plans) >= 1024:
        plans.clear()
    plans[key] = plan
    return plan
