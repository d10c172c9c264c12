"""Happens-before race detector: vector clocks per warp and per asynchronous agent.

The detector reports two conflicting accesses to the same shared-memory word (4 bytes) that
no chain of synchronisation orders, in any single run (eager or under the adversarial mode),
whatever the interleaving was. It follows FastTrack (Flanagan & Freund, PLDI 2009): every
location keeps the *epoch* ``(agent, clock)`` of its last write and, per reading agent, the
clock of its last read; a write clears the reads (it was checked to come after all of them).
docs/emulator.md lists every edge with its PTX ISA section.

**Agents.** One per warp (the lanes of a warp share its clock: intra-warp races are not
reported) and one per asynchronous unit an access may come from:

* ``tma``  - TMA / bulk loads issued by one warp that complete on one mbarrier of one CTA
  (their clock counts the loads; observing a phase of that mbarrier covers every load the
  warp issued to it before, because phases complete in order);
* ``wgmma`` - the wgmma operations of one warpgroup, clock = 1 + commit-group index;
* ``bulk`` - the TMA stores / bulk copies of one warp, clock = 1 + bulk-group index;
* ``cpasync`` - the Ampere ``cp.async`` copies of one warp, clock = 1 + group index.
* ``tcgen05`` - the ``tcgen05.mma`` operations of one thread, clock = MMAs issued (made known by
  ``tcgen05.commit`` -> mbarrier); ``tcgen05ld`` / ``tcgen05st`` - one warp's ``tcgen05.ld`` /
  ``st`` (known to the warp after ``tcgen05.wait::ld`` / ``st``). Their tensor-memory accesses
  go to a per-(lane, column) shadow (:class:`cutedsl.sim.instructions.tmem.TmemShadow`).

**Proxies.** Every warp also carries ``pvc``: the part of its knowledge that a
``fence.proxy.async`` made visible to the async proxy (``fence.proxy.async`` joins ``vc`` into
``pvc``; both travel along every release/acquire edge). An async-proxy read (wgmma operand,
TMA store source) of a word last written through the generic proxy (``st.shared``,
``stmatrix``, ``cp.async``) needs that write in the issuing warps' ``pvc``; every other pair
needs it in ``vc``.
"""
from __future__ import annotations

import numpy as np

from .rules import EDGE_RULE, RULES
# Shadow (the per-word state, checks/shadow.py), word_set and words_of are also this module's
# names (tests and older callers import them here)
from .shadow import Shadow  # noqa: F401
from .shadow_words import word_set, words_of  # noqa: F401

#: the edge that would have ordered a prior access of this kind before a conflicting one: the
#: "missing:" text of its rule (:mod:`cutedsl.sim.checks.rules`, which also cites the ISA section)
EDGE = {edge: RULES[rid].missing for edge, rid in EDGE_RULE.items()}


class Agent:
    __slots__ = ("idx", "kind", "cta", "wid", "label", "n")

    def __init__(self, idx, kind, cta, wid, label):
        self.idx, self.kind, self.cta, self.wid, self.label = idx, kind, cta, wid, label
        self.n = 0          # operations issued (tma agents)


class HB:
    """Vector-clock state of one cluster (all its CTAs, warps and asynchronous agents)."""

    def __init__(self, cluster, seed=None):
        self.cluster = cluster
        self.seed = seed
        self.allow = frozenset()    #: rule ids the launch opts out of (SimBackend(allow=...), rules.py)
        self.agents = []
        self.keys = {}
        nw = sum(len(c.warps) for c in cluster.ctas)
        self.cap = max(64, 4 * nw + 16)
        for c in cluster.ctas:
            for w in c.warps:
                a = self.agent(("warp", c.rank, w.wid), "warp", c, w.wid, f"warp {w.wid}")
                w.agent = a.idx
                w.vc = self.zero()
                w.vc[a.idx] = 1
                w.pvc = self.zero()

    # -- clocks ----------------------------------------------------------------------------
    def zero(self):
        return np.zeros(self.cap, np.int64)

    def fit(self, v):
        """``v`` padded to the current capacity (agents are created lazily)."""
        if v is None:
            return self.zero()
        if len(v) < self.cap:
            v = np.concatenate([v, np.zeros(self.cap - len(v), np.int64)])
        return v

    def join(self, a, b):
        if a is None:
            return None if b is None else self.fit(b).copy()
        if b is None:
            return a
        a, b = self.fit(a), self.fit(b)
        return np.maximum(a, b)

    def agent(self, key, kind, cta, wid, label):
        a = self.keys.get(key)
        if a is None:
            a = Agent(len(self.agents), kind, cta, wid, label)
            self.agents.append(a)
            self.keys[key] = a
            if a.idx >= self.cap:
                self.cap *= 2
        return a

    def warp_vc(self, w):
        if len(w.vc) < self.cap:
            w.vc, w.pvc = self.fit(w.vc), self.fit(w.pvc)
        return w.vc

    # -- edges -----------------------------------------------------------------------------
    def release(self, w):
        """(vc, pvc) snapshot released by warp ``w``; ``w`` then starts a new epoch."""
        vc = self.warp_vc(w)
        snap = (vc.copy(), w.pvc.copy())
        vc[w.agent] += 1
        return snap

    def release_join(self, w, snap):
        """``merge(snap, release(w))`` -- warp ``w`` releases into a barrier's join ``snap`` (either
        may be None) and starts a new epoch -- without copying the release first: the join is a
        new pair of arrays (never ``snap``'s, which a completed phase may hold as ``done``)."""
        vc = self.warp_vc(w)
        pvc = w.pvc
        if snap is None:
            out = (vc.copy(), pvc.copy())
        else:
            out = (np.maximum(self.fit(snap[0]), vc), np.maximum(self.fit(snap[1]), pvc))
        vc[w.agent] += 1
        return out

    def release_join_all(self, ws, snap):
        """:meth:`release_join` of each warp of ``ws`` in turn into ``snap`` (each warp's release
        is its own clocks, which the others' do not change): one new pair of arrays."""
        x = ws[0]
        vc = self.warp_vc(x)
        if snap is None:
            jv, jp = vc.copy(), x.pvc.copy()
        else:
            jv, jp = np.maximum(self.fit(snap[0]), vc), np.maximum(self.fit(snap[1]), x.pvc)
        vc[x.agent] += 1
        for x in ws[1:]:
            vc = self.warp_vc(x)
            np.maximum(jv, vc, out=jv)
            np.maximum(jp, x.pvc, out=jp)
            vc[x.agent] += 1
        return jv, jp

    def acquire(self, w, snap):
        if snap is None:
            return
        vc = self.warp_vc(w)
        s_vc, s_pvc = snap
        np.maximum(vc, self.fit(s_vc), out=vc)
        np.maximum(w.pvc, self.fit(s_pvc), out=w.pvc)

    def merge(self, a, b):
        """Join of two released snapshots (either may be None)."""
        if a is None:
            return None if b is None else (b[0].copy(), b[1].copy())
        if b is None:
            return a
        return self.join(a[0], b[0]), self.join(a[1], b[1])

    def observe(self, w, agent, clock):
        """Warp ``w`` learns that ``agent``'s operations up to ``clock`` are complete."""
        vc = self.warp_vc(w)
        if vc[agent] < clock:
            vc[agent] = clock

    def fence_proxy(self, w):
        vc = self.warp_vc(w)
        np.maximum(w.pvc, vc, out=w.pvc)

    def async_op(self, warps, agent, clock):
        """(vc, pvc) of an asynchronous operation issued by ``warps`` as ``agent``'s ``clock``."""
        vc = self.warp_vc(warps[0]).copy()
        pvc = warps[0].pvc.copy()
        for w in warps[1:]:
            np.maximum(vc, self.warp_vc(w), out=vc)
            np.maximum(pvc, w.pvc, out=pvc)
        if vc.item(agent) < clock:
            vc[agent] = clock
        return vc, pvc

    def collective_op(self, warps, agent, clock):
        """(vc, pvc) that orders the accesses of an asynchronous operation that ``warps`` issue
        together (``wgmma.mma_async``, as ``agent``'s ``clock``): what *every* one of them knows.
        PTX ISA 9.7.15.5.2: ``.sync`` makes a thread wait for the threads of its own warp only,
        ``.aligned`` is a requirement on the warpgroup, not a synchronisation; so a write (and, for
        the async proxy, its ``fence.proxy.async``, 9.7.15.4) is ordered before the operation's
        operand reads only when it is ordered before each issuing warp's instruction -- another
        warp's store needs a barrier after its fence, whatever the hardware does when the four
        warps meet."""
        vc = self.warp_vc(warps[0]).copy()
        pvc = warps[0].pvc.copy()
        for w in warps[1:]:
            np.minimum(vc, self.warp_vc(w), out=vc)
            np.minimum(pvc, w.pvc, out=pvc)
        vc[agent] = max(vc[agent], clock)
        return vc, pvc

    def describe(self, a, pc, launch):
        ag = self.agents[a]
        ins = launch.code[pc] if 0 <= pc < len(launch.code) else None
        kind = {"warp": "generic proxy", "tma": "async proxy", "asyncst": "generic proxy", "wgmma": "async proxy",
                "bulk": "async proxy", "cpasync": "generic proxy", "tcgen05": "tensor core (tcgen05)",
                "tcgen05ld": "tensor memory load", "tcgen05st": "tensor memory store"}[ag.kind]
        where = ins.where() if ins is not None else "?"
        who = f"CTA {ag.cta.ctaid} {ag.label}"
        if ag.kind == "warp":
            who += f" (threads {32 * ag.wid}-{32 * ag.wid + 31})"
        return f"{who}, {kind}, at {where}"

    def seed_note(self):
        return f"\n    (adversarial mode, seed {self.seed}; replay with CUTEDSL_SIM_CHAOS={self.seed})" \
            if self.seed is not None else ""
