"""Cluster launch control (sm_100, PTX ISA 8.6 ``clusterlaunchcontrol``): a running CTA asks to
cancel the launch of a cluster that has not started and, when that succeeds, does its work --
the dynamic persistent scheduling of CUTLASS's and CuTe DSL's sm100 GEMMs.

* ``clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes
  {.multicast::cluster::all}.b128 [addr], [mbar]``: asynchronously writes a 16-byte response to
  shared memory at ``addr`` (with ``.multicast::cluster::all``: at that offset in every CTA of
  the cluster) and signals ``complete_tx`` of 16 bytes on ``mbar`` (each CTA's, same offset).
* ``clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, r`` and
  ``.get_first_ctaid{::x,::y,::z}.b32.b128 d, r`` / ``.get_first_ctaid.v4.b32.b128 {x, y, z, _}, r``
  decode a response ``r`` (a ``.b128`` register).

**Which cluster is cancelled** is the emulator's choice, made when the request completes
(:func:`cancel_cluster`): the next cluster in launch order that has
not started (eager), or under the adversarial mode a random one of them -- and a quarter of the
requests fail although clusters remain (the ISA lets a request fail; a kernel must then leave
that work to the cluster's own launch). A cancelled cluster never starts; no cluster left to
cancel (every one has started) is a failed request. The response's layout is opaque in the ISA;
the emulator's carries a tag, so querying 16 bytes that are not a response is an error. The
first CTA id of a failed response is undefined in the ISA: the emulator returns 0xFFFFFFFF.

The response is a generic-proxy write ordered for a thread that waits on the mbarrier (the
complete-tx releases it), like ``st.async``.
"""
from __future__ import annotations

import numpy as np

from ..engines.async_engine import async_write, defer, lane_scalars
from ..frontend.errors import SimRuntimeError
from ..engines.mbarrier_object import get_mbar
from ..frontend.registry import handler
from ..checks.shadow_words import word_set, words_of
from ..engines.tma_box import smem_dest

RESPONSE_BYTES = 16
TAG = 0xC1C0_0000            #: the response's first word: tag | canceled
TAG_MASK = 0xFFFF_0000
UNDEFINED_CTAID = 0xFFFF_FFFF
_TRY_MODS = {"async", "shared::cta", "mbarrier::complete_tx::bytes", "multicast::cluster::all", "b128"}


def cancel_cluster(launch) -> tuple | None:
    """Cancel a cluster of ``launch`` that has not started and return its first CTA's id, or
    None (the request fails): eager, the next in launch order; adversarial, a random one, and a
    quarter of the requests fail anyway. The scheduler (``Launch._clusters``) skips the ids in
    ``launch.cancelled``; ``launch.next_cluster`` is the first it has not reached."""
    waiting = [c for c in range(launch.next_cluster, launch.clusters_total) if c not in launch.cancelled]
    if not waiting:
        return None
    chaos = launch.chaos
    if chaos is not None:
        if chaos.rng.random() < 0.25:
            return None
        cid = chaos.rng.choice(waiting)
    else:
        cid = waiting[0]
    launch.cancelled.add(cid)
    grid, cluster = launch.grid, launch.cluster
    nx, ny = grid[0] // cluster[0], grid[1] // cluster[1]
    k = (cid % nx, cid // nx % ny, cid // (nx * ny))
    return tuple(ki * ci for ki, ci in zip(k, cluster))


def response(ctaid) -> np.ndarray:
    """The 16 response bytes: ``ctaid`` (the cancelled cluster's first CTA) or None (failed)."""
    words = [TAG | 1, *ctaid] if ctaid is not None else [TAG, 0, 0, 0]
    return np.array(words, np.uint32).view(np.uint8)


def decode(lo: int, hi: int, ins) -> tuple:
    """``(canceled, (x, y, z))`` of a response held as two 64-bit halves."""
    w0 = lo & 0xFFFF_FFFF
    if w0 & TAG_MASK != TAG:
        raise SimRuntimeError(f"clusterlaunchcontrol.query_cancel of a value that is not a try_cancel response "
                              f"(first word 0x{w0:08x})\n    at {ins.where()}")
    if not w0 & 1:
        return False, (UNDEFINED_CTAID,) * 3
    return True, (lo >> 32, hi & 0xFFFF_FFFF, hi >> 32)


@handler("clusterlaunchcontrol")
def dec_clc(ctx, ins, mods, ops):
    if mods[:1] == ["try_cancel"]:
        return _dec_try_cancel(ctx, ins, mods[1:], ops)
    if mods[:1] == ["query_cancel"]:
        return _dec_query(ctx, ins, mods[1:], ops)
    ctx.unsupported("unsupported clusterlaunchcontrol instruction")


def _dec_try_cancel(ctx, ins, mods, ops):
    for m in mods:
        if m not in _TRY_MODS:
            ctx.unsupported(f"unsupported clusterlaunchcontrol.try_cancel modifier .{m}")
    if "mbarrier::complete_tx::bytes" not in mods or "b128" not in mods:
        ctx.bad("try_cancel needs .mbarrier::complete_tx::bytes and .b128")
    if len(ops) != 2:
        ctx.bad("try_cancel takes [address], [mbarrier]")
    multicast = "multicast::cluster::all" in mods
    addr, mbar = ctx.addr(ops[0]), ctx.addr(ops[1])

    def fn(w, g, m):
        for a, b in lane_scalars(w, m, addr(w), mbar(w)):
            cta, off = smem_dest(w, a, ins, "try_cancel response", RESPONSE_BYTES)
            bcta, moff = smem_dest(w, b, ins, "try_cancel mbarrier", 8)
            if cta is not w.cta or bcta is not w.cta:
                raise SimRuntimeError(f"try_cancel: the response and the mbarrier are .shared::cta addresses of "
                                      f"this CTA\n    at {ins.where()}")
            targets = list(w.cta.cluster.ctas) if multicast else [w.cta]
            words = word_set(words_of(np.arange(off, off + RESPONSE_BYTES, 4), 4))
            sent = [(c, get_mbar(c, moff, ins), async_write(w, c, moff, words, ins, "try_cancel response",
                                                            proxy_async=False)) for c in targets]

            def land(sent=sent, off=off):
                data = response(cancel_cluster(w.launch))
                for c, bar, snap in sent:
                    c.smem[off:off + RESPONSE_BYTES] = data
                    if snap is not None:
                        bar.snap = c.cluster.hb.merge(bar.snap, snap)
                    bar.complete_tx(RESPONSE_BYTES)
            defer(w, land)
    return fn


def _dec_query(ctx, ins, mods, ops):
    if len(ops) != 2:
        ctx.bad("query_cancel takes a destination and a .b128 response")
    r = ctx.operand(ops[1])
    if r.kind != "vec" or len(r.items) != 2:
        ctx.bad("query_cancel's response is a .b128 register")
    lo, hi = (ctx.rd(x, "u64") for x in r.items)
    what = [m for m in mods if m not in ("b32", "b128", "pred", "v4")]
    if what == ["is_canceled"]:
        wp = ctx.wr(ops[0], "pred")[0]

        def fn(w, g, m):
            out = np.zeros(32, bool)
            for ln in np.flatnonzero(w.valid if m is None else m):
                out[ln] = decode(int(np.asarray(lo(w))[ln]), int(np.asarray(hi(w))[ln]), ins)[0]
            wp(w, m, out if w.p.shape[1] == 32 else out[:w.p.shape[1]])
        return fn
    dims = {"get_first_ctaid::x": (0,), "get_first_ctaid::y": (1,), "get_first_ctaid::z": (2,),
            "get_first_ctaid": (0, 1, 2, None)}.get(what[0] if len(what) == 1 else "")
    if dims is None:
        ctx.unsupported(f"unsupported clusterlaunchcontrol.query_cancel form .{'.'.join(mods)}")
    d = ctx.operand(ops[0])
    dsts = d.items if d.kind == "vec" else [d]
    if len(dsts) != len(dims):
        ctx.bad(f"query_cancel.{what[0]} writes {len(dims)} register(s)")
    writers = [ctx.wr(x, "b32")[0] if k is not None and x.kind != "sink" else None for x, k in zip(dsts, dims)]

    def fn(w, g, m):
        vals = np.zeros((len(dims), 32), np.uint32)
        for ln in np.flatnonzero(w.valid if m is None else m):
            ctaid = decode(int(np.asarray(lo(w))[ln]), int(np.asarray(hi(w))[ln]), ins)[1]
            for i, k in enumerate(dims):
                if k is not None:
                    vals[i, ln] = ctaid[k]
        for i, wr in enumerate(writers):
            if wr is not None:
                wr(w, m, vals[i])
    return fn
