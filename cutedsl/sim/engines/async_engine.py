"""The asynchronous engine: when an asynchronous operation's effects land, and how its writes
reach the race detector.

Asynchronous instructions (TMA and bulk copies, ``st.async``, ``wgmma.mma_async``, ``tcgen05.*``,
``clusterlaunchcontrol.try_cancel``) hand their completion to :func:`defer`: eager mode runs it at
issue, the adversarial mode (:mod:`cutedsl.sim.machine.chaos`) at a random later scheduling point.
:func:`async_write` records an operation's shared-memory writes as the epoch of its asynchronous
agent, which the operation's mbarrier ``complete_tx`` then releases (PTX ISA memory consistency
model: the async proxy; cp.async.bulk.tensor ``complete_tx::bytes``).
"""
from __future__ import annotations

import numpy as np


def defer(w, fn, tag=None, chain=None, remote=False):
    """Run ``fn`` now (eager) or at a later scheduling point (adversarial mode)."""
    ch = w.launch.chaos
    if ch is None:
        fn()
    else:
        ch.defer(fn, tag, chain)


def async_write(w, cta, moff, words, ins, what, bar_cta=None, proxy_async=True):
    """Record an async-proxy write of ``words`` in ``cta`` by the ``tma`` agent of warp ``w`` and
    mbarrier ``moff`` (of ``bar_cta``, default ``cta``); returns the operation's (vc, pvc) to
    release with its complete_tx. ``proxy_async`` False: a generic-proxy write (``st.async``)."""
    sh = cta.shadow
    if sh is None:
        return None
    hb = sh.hb
    bc = bar_cta or cta
    kind = "tma" if proxy_async else "asyncst"
    key = (kind, w.cta.rank, w.wid, bc.rank, moff)
    a = hb.keys.get(key)            # (the label is built once, with the agent)
    if a is None:
        a = hb.agent(key, kind, w.cta, w.wid,
                     f"{'TMA unit (loads' if proxy_async else 'asynchronous stores (' + what} of warp {w.wid} "
                     f"completing on {cta.launch.program.smem_symbol(moff, cta.dyn_base)} of CTA rank {bc.rank})")
    a.n += 1
    snap = hb.async_op([w], a.idx, a.n)
    sh.write(words, a.idx, a.n, snap[0], ins.pc, proxy_async, what)
    return snap


def lane_scalars(w, m, *vals):
    """One list per executing lane (``m``, default every valid lane of warp ``w``) of the int values
    of ``vals`` (scalars or per-lane arrays): a single-thread asynchronous instruction executed by
    several lanes issues once per lane."""
    lanes = (w.valid if m is None else m).nonzero()[0].tolist()
    if len(lanes) == 1:         # the usual case: an elected lane issues
        ln, = lanes
        return [[int(v[ln]) if getattr(v, "ndim", 0) else int(v) for v in vals]]      # (np.ndim costs more)
    cols = [v.tolist() if getattr(v, "ndim", 0) else None for v in vals]   # one conversion per operand
    return [[int(v) if c is None else int(c[ln]) for v, c in zip(vals, cols)] for ln in lanes]


def bulk_read(w, cta, words, ins, what):
    """Record an async-proxy read of ``words`` of ``cta`` by warp ``w``'s ``bulk`` agent."""
    sh = cta.shadow
    if sh is None:
        return
    hb = sh.hb
    a = hb.agent(("bulk", w.cta.rank, w.wid), "bulk", w.cta, w.wid, f"bulk copies of warp {w.wid}")
    clock = w.bulk_commits + 1
    vc, pvc = hb.async_op([w], a.idx, clock)
    sh.read(words, a.idx, clock, vc, pvc, ins.pc, True, what)
