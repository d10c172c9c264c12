"""Synchronisation instructions: named barriers (``bar``/``barrier``; their state is
:mod:`cutedsl.sim.machine.named_barriers`), ``bar.warp.sync``, the cluster barrier and fences (the
convergence rule: :mod:`cutedsl.sim.machine.convergence`; mbarriers: :mod:`cutedsl.sim.instructions.mbarrier`).

**Named barriers** (PTX ISA 9.7.13.1): arrival is per warp (all non-exited lanes of the warp
must be converged at the instruction); ``bar.sync a`` without a count waits for every
non-exited warp of the CTA; with a count ``b`` the barrier completes at the ``b/32``-th warp
arrival of its generation, a warp's ``bar.arrive`` and its later ``bar.sync`` of the same
generation counting as two; participants naming different counts are an error.

**Happens-before edges** (race detector, :mod:`cutedsl.sim.checks.hb`): a barrier arrival releases
the warp's vector clock into the barrier; the warps a barrier generation releases acquire
the join; ``barrier.cluster.arrive.relaxed`` releases only what a ``fence.mbarrier_init``
released; ``fence.proxy.async`` makes the warp's knowledge visible to the async proxy.
"""
from __future__ import annotations

import numpy as np

from ..engines.mbarrier_object import lane_int
from ..machine.convergence import mask_lanes, members, need_converged
from ..frontend.errors import SimRuntimeError
from ..machine.named_barriers import BarWait, NamedBarrier, expected_warps, release_barrier
from ..frontend.registry import BLOCKED, each_warp, handler


def _dec_warp_sync(ctx, ins, ops):
    """``bar.warp.sync membermask`` (PTX ISA bar.warp.sync): each executing lane waits until
    every non-exited lane of ``membermask`` has reached it (:func:`members`: the emulator
    reconverges the lanes' groups here), which also orders their memory accesses; a lane
    outside the mask executing it is an error (undefined in the ISA)."""
    if len(ops) != 1:
        ctx.bad("bar.warp.sync takes a membermask")
    rmask = ctx.rd(ops[0], "u32")

    def fn(w, g, m):
        act = members(w, g, m, rmask, ins)
        if act is None:
            return BLOCKED
        outside = act & ~mask_lanes(rmask, w)
        if outside.any():
            raise SimRuntimeError(f"bar.warp.sync executed by lane {int(np.flatnonzero(outside)[0])}, which is not "
                                  f"in its membermask {int(np.asarray(rmask(w)).flat[0]) & 0xFFFFFFFF:#010x}"
                                  f"\n    at {ins.where()}")
        return None
    return fn


@handler("bar", "barrier")
def dec_bar(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    if mods and mods[0] == "cluster":
        return _dec_cluster_barrier(ctx, ins, mods[1:], ops)
    if mods and mods[0] == "warp":
        if mods[1:] != ["sync"]:
            ctx.unsupported("bar.warp form")
        return _dec_warp_sync(ctx, ins, ops)
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
        lane0 = 0 if g.m is None else int(g.mask.nonzero()[0][0])     # (m None: all 32 lanes)
        bid = lane_int(rid(w), lane0)
        if not 0 <= bid < 16:
            raise SimRuntimeError(f"barrier id {bid} outside 0..15\n    at {ins.where()}")
        cnt = None
        if rcnt is not None:
            cnt = lane_int(rcnt(w), lane0)
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
        # PTX ISA 9.7.13.1: every barrier instruction marks its warp's arrival; a warp that
        # bar.arrive-s and then executes another barrier instruction on the same barrier before it
        # completes arrives again and counts again (the ISA only warns to "keep a warp from
        # executing more barrier instructions than intended"). FA3's epilogue: 8 warps arrive at
        # (1, 288), the last of them then syncs on it -- the ninth arrival completes it.
        b.count = cnt
        b.arrived.append(w)
        hb = cta.cluster.hb
        if hb is not None:
            b.snap = hb.release_join(w, b.snap)     # = merge(b.snap, release(w))
        if is_sync:
            b.waiters.append((w, g))
        cta.launch.version += 1
        if len(b.arrived) >= expected_warps(cta, b):
            if cnt is not None and len(b.arrived) > cnt // 32:
                raise SimRuntimeError(f"barrier {bid}: more warps arrived than the count {cnt}\n"
                                      f"    at {ins.where()}")
            release_barrier(cta, b, current=g)
            return None
        if is_sync:
            g.blocked = BarWait(b, cta, ins)
            return BLOCKED
        return None

    # not a lockstep batch instruction (registry.each_warp): running a batch's bar.sync arrivals in
    # one call lost a wake-up under an adversarial schedule (tests/kernel/test_sm100_epilogue.py,
    # chaos seed 1, --rng-seed 1694453610: the elected MMA lane never resumed); each warp arrives
    # through the scheduler as before
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
        cl.barrier_done, cl.barrier_snap = cl.barrier_snap, None
        if cl.ctas:
            cl.ctas[0].launch.version += 1


def _dec_cluster_barrier(ctx, ins, mods, ops):
    kind = None
    relaxed = "relaxed" in mods
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
            hb = cl.hb
            if hb is not None:
                # .relaxed releases nothing but what a fence.mbarrier_init released before it
                snap = w.mbinit if relaxed else hb.release(w)
                w.mbinit = None
                cl.barrier_snap = hb.merge(cl.barrier_snap, snap)
            cluster_barrier_check(cl)
            return None
        ph = getattr(w, "cluster_phase", None)
        if ph is None:
            raise SimRuntimeError(f"barrier.cluster.wait without a prior barrier.cluster.arrive (certain hang)"
                                  f"\n    at {ins.where()} (CTA {w.cta.ctaid}, warp {w.wid})")
        if cl.barrier_gen > ph:
            w.cluster_phase = None
            if cl.hb is not None:
                cl.hb.acquire(w, cl.barrier_done)
            return None
        g.blocked = ClusterWait(cl, ph, ins)
        return BLOCKED
    return fn


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
    if "proxy" in mods and "async::generic" in mods:
        # the one-way proxy fences (PTX ISA 8.6, membar/fence): .release orders this thread's
        # generic accesses before later async-proxy ones (what fence.proxy.async does for the
        # detector); .acquire orders async-proxy ones before later generic ones, which the
        # detector already requires of the mbarrier wait itself
        if "release" in mods:
            def fn(w, g, m):
                hb = w.cta.cluster.hb
                if hb is not None:
                    hb.fence_proxy(w)
            return fn
        return lambda w, g, m: None
    if "proxy" in mods and "async" in mods:
        shared = "global" not in mods                                   # .global: global memory only
        glob = not ({"shared::cta", "shared::cluster"} & set(mods))     # .shared::*: shared only

        def fn(w, g, m):
            hb = w.cta.cluster.hb
            if shared and hb is not None:
                hb.fence_proxy(w)
            if glob and w.launch.ghb is not None:     # generic global writes -> TMA loads
                w.launch.ghb.fence_proxy(w)
        return each_warp(fn)        # never blocks: a lockstep batch runs it per warp
    if "mbarrier_init" in mods:
        def fn(w, g, m):
            hb = w.cta.cluster.hb
            if hb is not None:
                w.mbinit = hb.merge(w.mbinit, hb.release(w))
        return fn
    ms = set(mods)
    ordering = bool(ms & {"sc", "acq_rel"}) or (ins.opcode.startswith("membar") and bool(ms & {"gl", "sys"}))
    if ordering and ms & {"gpu", "sys", "gl"}:
        def fn(w, g, m):        # a gpu/sys fence: orders clusters through strong global accesses
            if w.launch.ghb is not None:
                w.launch.ghb.fence(w)
        return fn
    return lambda w, g, m: None
