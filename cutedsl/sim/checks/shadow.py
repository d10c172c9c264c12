"""The shared-memory shadow of the happens-before race detector (:mod:`cutedsl.sim.checks.hb` holds
the vector clocks and agents): per 4-byte word of one CTA's shared memory, the epoch of its last
write (agent, clock, PC, proxy) and, per reading agent, the clock and PC of its last read
(FastTrack, Flanagan & Freund, PLDI 2009). A read checks the last write, a write checks the last
write and every recorded read; a conflict no edge orders raises :class:`RaceError` naming both
accesses and the missing edge (its rule, :mod:`cutedsl.sim.checks.rules`, cites the PTX ISA).
Per 1 KiB block the shadow also keeps the latest read clock of each reader and the epoch of a
write that covered the whole block (a TMA box), so the common cases are judged per block. A write
of whole blocks is kept as their epoch only (``lazy``): its 256 words per block are written back
(:meth:`Shadow._settle`) when a per-word access first needs them; every verdict is the one the
per-word record would give, since every word of such a block carries that one epoch.
"""
from __future__ import annotations

import numpy as np

from ..frontend.errors import RaceError
from .initcheck import report_shared
from .rules import EDGE_RULE, RULES, cite
from .shadow_blocks import _BLK, _BW, _MIXED, _NEVER, BlockSummaries, _sorted_run, _span, _word_blocks
from .shadow_words import blocks_of as _blocks, word_ids


def _runs(ids, vals):
    """Sorted distinct ``ids`` with a value each as ``[(slice, values)]``, one slice per contiguous
    run when there are a few (a chain's operands are whole tiles: 1-3 runs), so that recording
    them writes views instead of scattering; else ``[(ids, vals)]``."""
    cut = np.flatnonzero(np.diff(ids) != 1) + 1
    if len(cut) >= 8:
        return [(ids, vals)]
    ends = [0] + cut.tolist() + [len(ids)]
    return [(slice(int(ids[a]), int(ids[a]) + b - a), vals[a:b]) for a, b in zip(ends, ends[1:])]


def _run_plan(plans, run):
    """``(words, blocks)`` of a run of queued reads (:meth:`Shadow.flush_reads`): the distinct
    words they touch as ``[(word ids or a slice of them, the PC of the last read of each in issue
    order -- the reader PC the shadow keeps)]`` (:func:`_runs`), and the distinct 1 KiB blocks.
    Cached in ``plans`` (the launch's) by the ids of the word and block arrays
    (``wgmma_layout.operand_words`` caches them: a pipeline's stages repeat the same chains)."""
    key = ("reads",) + tuple((id(x[0]), id(x[1]), x[6]) for x in run)
    hit = plans.get(key)
    if hit is None:
        words = np.concatenate([x[0] for x in run])[::-1]
        pcs = np.concatenate([np.full(len(x[0]), x[6], np.int32) for x in run])[::-1]
        words, first = np.unique(words, return_index=True)     # reversed: first = last in issue order
        blocks = np.unique(np.concatenate([x[1] for x in run]))
        plan = (_runs(words, pcs[first]), blocks)
        hit = plans[key] = ([(x[0], x[1]) for x in run], plan)     # keeps the ids alive
    return hit[1]


def _grow_rows(sh, name, k):
    """Give ``sh.<name>`` (rows of one reader column each) ``k`` more zero rows: resized in place
    when nothing else refers to it (a reallocation moves the pages of a large array instead of
    copying them and touches only the new rows: a copy of two full-size rows costs ~0.5 ms in
    page faults), else copied."""
    a = getattr(sh, name)
    setattr(sh, name, None)
    try:
        a.resize((a.shape[0] + k, a.shape[1]))       # (refcheck: raises when a view or name holds it)
    except ValueError:
        a = np.concatenate([a, np.zeros((k, a.shape[1]), a.dtype)])
    setattr(sh, name, a)


class Shadow(BlockSummaries):
    """Per-4-byte shadow of one CTA's shared memory (last write epoch, per-agent read clocks)."""

    initcheck_reads = ""        # reads judged by initcheck: every kind (a prefix of ``what``)
    #: reads initcheck never judges: tensormap.replace writes one field of the object (PTX ISA,
    #: tensormap.replace); the emulator reads the rest only to rewrite it unchanged
    initcheck_exempt = ("tensormap.replace",)
    #: the shortcuts: a write of whole 1 KiB blocks judged and recorded per block, a read whose
    #: words' writes are all known in both proxies passed at once (False: word by word, the
    #: general path -- tests/sim/test_sim_shadow_lazy.py compares the two)
    shortcuts = True

    def __init__(self, cta, hb, n=None):
        self.cta = cta
        self.hb = hb
        n = cta.smem_size // 4 + 4 if n is None else n
        self.n = n
        # per word: the last write's agent (-1: none), clock, PC, and whether it was through the
        # async proxy -- left unset here: every block starts lazy (below), as never written
        self.w_agent = np.empty(n, np.int32)
        self.w_clock = np.empty(n, np.int32)
        self.w_pc = np.empty(n, np.int32)
        self.w_async = np.empty(n, bool)
        self.ncols = 0
        # reader columns grow by doubling (_col): most CTAs have a few reading agents (a wgmma
        # unit, a bulk-store unit), and two full-size rows per column are costly to zero per CTA
        ncap = 2
        self.r_clock = np.zeros((ncap, n), np.int32)
        self.r_pc = np.zeros((ncap, n), np.int32)
        self.col_agent = np.zeros(ncap, np.int64)
        # per reader column and 1 KiB block, the clock of its latest read there (clocks of one
        # agent only grow): a write whose blocks hold no read its writer does not know skips
        # the per-word check
        self.blk_read = np.zeros((ncap, (n >> _BLK) + 1), np.int32)
        # per 1 KiB block, the epoch (agent << 32 | clock) of the one write that covered all of
        # it last (a TMA box), _MIXED after any other write, _NEVER before the first: a read of
        # such blocks (a wgmma operand) is checked per block instead of per word
        self.blk_w = np.full((n >> _BLK) + 1, _NEVER, np.int64)
        self.blk_wasync = np.zeros((n >> _BLK) + 1, bool)
        # per 1 KiB block: the PC of that whole-block write, and whether the per-word arrays
        # (w_agent, w_clock, w_pc, w_async) still lack it (or, _NEVER, their initial "no write")
        # -- a TMA box's 4,096 words are written back only when a per-word check or a partial
        # write needs them (_settle), and a CTA's shadow is not filled word by word at launch
        self.blk_pc = np.zeros((n >> _BLK) + 1, np.int32)
        self.lazy = np.ones((n >> _BLK) + 1, bool)
        self.cols = {}
        self.pending = []           # queued operand reads (read_later), recorded by flush_reads
        self.initcheck = getattr(cta.launch, "initcheck", False)     # checks/initcheck.py

    def _col(self, agent):
        c = self.cols.get(agent)
        if c is None:
            c = self.ncols
            if c >= len(self.col_agent):
                grow = len(self.col_agent)
                _grow_rows(self, "r_clock", grow)
                _grow_rows(self, "r_pc", grow)
                self.col_agent = np.concatenate([self.col_agent, np.zeros(grow, np.int64)])
                self.blk_read = np.concatenate([self.blk_read, np.zeros((grow, self.blk_read.shape[1]), np.int32)])
            self.col_agent[c] = agent
            self.cols[agent] = c
            self.ncols = c + 1
        return c

    # -- checks ------------------------------------------------------------------------------
    def read(self, words, agent, clock, vc, pvc, pc, async_read, what, blocks=None, lenient=None):
        """Record a read of ``words`` (word ids, or a slice of them: :func:`word_set`) by
        ``agent`` at ``clock`` (knowledge ``vc``/``pvc``); ``blocks``: the 1 KiB blocks the
        words lie in, when the caller has them (then whole-block writes are checked per block).
        ``lenient``: the ``(vc, pvc)`` of a collective operation's most knowing issuer (a wgmma's
        join of its warps, while ``vc``/``pvc`` are their meet): a write it knows is reported under
        the rule ``wgmma-warpgroup-barrier``."""
        if self.pending:
            self.flush_reads()
        hb = self.hb
        if blocks is not None and self._blocks_known(blocks, vc, pvc, async_read):
            c = self._col(agent)
            self.r_clock[c][words] = clock
            self.r_pc[c][words] = pc
            self.blk_read[c][blocks] = clock
            return
        self._settle(words)
        wa = self.w_agent[words]
        lo = int(wa.min())
        if (self.initcheck and lo < 0 and what.startswith(self.initcheck_reads)
                and not what.startswith(self.initcheck_exempt)):        # checks/initcheck.py
            report_shared(self, int(word_ids(words)[int(np.argmin(wa))]), agent, pc, what)
        if self.shortcuts and lo >= 0 and async_read and not (self.w_clock[words] > np.minimum(
                hb.fit(vc), hb.fit(pvc)).astype(np.int32).take(wa)).any():
            pass        # every write known in both proxies (a TMA store's source): no check below fails
        elif int(wa.max()) >= 0:
            vc = hb.fit(vc)
            if lo >= 0:                 # the usual case: every word written, nothing to select
                sel, idx, need = slice(None), wa, self.w_clock[words]
            else:
                sel = wa >= 0
                idx, need = wa[sel], self.w_clock[words][sel]
            bad = need > vc.astype(np.int32).take(idx)      # the shadow's clocks are int32
            if async_read and not self.w_async[words].all():
                gen = ~self.w_async[words][sel]
                if gen.any():
                    pv = hb.fit(pvc)[idx]
                    badp = gen & (need > pv) & ~bad
                    if badp.any():
                        self._report(word_ids(words)[sel][badp], agent, pc, what, "read", "proxy", lenient=lenient)
            if bad.any():
                self._report(word_ids(words)[sel][bad], agent, pc, what, "read", None, lenient=lenient)
        c = self._col(agent)
        self.r_clock[c][words] = clock      # through the row view: a 1-D scatter is cheaper
        self.r_pc[c][words] = pc
        self.blk_read[c][_blocks(words)] = clock

    # -- queued reads (a lockstep run's wgmma operands) -----------------------------------------
    def read_later(self, words, blocks, agent, clock, vc, pvc, pc, what, lenient=None):
        """:meth:`read` (async proxy) of ``words`` in ``blocks``, queued: recorded, in issue order,
        by :meth:`flush_reads` -- which every other access of this shadow runs first, and the
        lockstep run that queued it runs when it ends (:mod:`cutedsl.sim.machine.lockstep`), so
        no access is ever judged against a shadow that lacks an earlier read."""
        self.pending.append((words, blocks, agent, clock, vc, pvc, pc, what, lenient))

    def pending_knowledge(self, agent, clock):
        """``(vc, pvc, lenient)`` of the last queued read when it is ``agent``'s at ``clock`` (a
        wgmma of the same warpgroup and commit group earlier in the same lockstep run, whose
        issuing warps' clocks no batch instruction changes), else None."""
        if self.pending:
            e = self.pending[-1]
            if e[2] == agent and e[3] == clock:
                return e[4], e[5], e[8]
        return None

    def flush_reads(self):
        """Record the queued reads. Consecutive reads of one agent at one clock with the same
        knowledge (a warpgroup's chain of wgmmas) are judged at once when every block they touch
        was last written whole by a write that knowledge orders (``_blocks_known``; true of each
        read alone exactly when of all together); otherwise each is read in turn, which gives
        the per-instruction report."""
        p, self.pending = self.pending, []
        i = 0
        while i < len(p):
            e = p[i]
            j = i + 1
            while j < len(p) and p[j][4] is e[4] and p[j][2] == e[2] and p[j][3] == e[3]:
                j += 1
            run = p[i:j]
            i = j
            agent, clock, vc, pvc = e[2], e[3], e[4], e[5]
            if len(run) > 1:
                words, blocks = _run_plan(self.cta.launch.plans, run)
                if self._blocks_known(blocks, vc, pvc, True):
                    c = self._col(agent)
                    rc, rp = self.r_clock[c], self.r_pc[c]
                    for w, pcs in words:
                        rc[w] = clock
                        rp[w] = pcs
                    self.blk_read[c][blocks] = clock
                    continue
            for words, blk, _a, _c, _v, _p, pc, what, lenient in run:
                self.read(words, agent, clock, vc, pvc, pc, True, what, blk, lenient=lenient)

    def write(self, words, agent, clock, vc, pc, async_write, what, same=None):
        """Record a write; ``same(word ids)`` (generic stores) tells, per word, whether it stores
        the bytes already there: an unordered write-write pair that leaves a word unchanged is
        benign and not reported (compilers emit such redundant stores from every warp, e.g.
        Triton's warp-specialized kernels initialising shared flags) -- decided word by word, so
        the other words of the same store are still checked."""
        if self.pending:
            self.flush_reads()
        hb = self.hb
        whole = self.shortcuts and isinstance(words, slice) and not (words.start | words.stop) & (_BW - 1)
        wa = None
        span = _span(words)
        if not (whole and self._whole_blocks_known(words, agent, vc)):
            self._settle(words, span)
            wa = self.w_agent[words]
        if wa is not None:
            sel = (wa >= 0) & (wa != agent)         # words another agent wrote
            if sel.any():
                vc = hb.fit(vc)
                bad = self.w_clock[words][sel] > vc[wa[sel]]
                if bad.any():
                    cand = word_ids(words)[sel][bad]
                    if same is not None:
                        cand = cand[~same(cand)]
                    if len(cand):
                        self._report(cand, agent, pc, what, "write", None)
        nc = self.ncols
        if nc:
            vc = hb.fit(vc)
            # every read recorded in these blocks is known to the writer: nothing to check. The
            # reads are then left in place -- each is ordered before this write, so before every
            # later access ordered after it (knowledge travels whole along each edge). (A few
            # reader columns: compared as Python ints, cheaper than numpy calls on tiny arrays.)
            ca = self.col_agent[:nc].tolist()
            rc = None
            if not all(a == agent or r <= vc[a] for a, r in zip(ca, self._block_reads(span, nc).tolist())):
                rc = self.r_clock[:nc, words]
                lim = vc[self.col_agent[:nc]]
                lim[self.col_agent[:nc] == agent] = 1 << 60
            if rc is not None and rc.any():
                bad = rc > lim[:, None]
                if bad.any():
                    ix = np.argwhere(bad)
                    self._report(word_ids(words)[ix[:, 1]], agent, pc, what, "write", None, col=ix[:, 0])
                self.r_clock[:nc, words] = 0
        if whole:       # whole blocks (a TMA box, PTX ISA cp.async.bulk.tensor): their epoch only,
            # every word of them holds it; the words are written back when needed (_settle)
            b = slice(words.start >> _BLK, words.stop >> _BLK)
            if b.start < b.stop:
                self.blk_w[b] = (agent << 32) | clock
                self.blk_wasync[b] = async_write
                self.blk_pc[b] = pc
                self.lazy[b] = True
            return
        self.w_agent[words] = agent
        self.w_clock[words] = clock
        self.w_pc[words] = pc
        self.w_async[words] = async_write
        if isinstance(words, slice):        # whole blocks take the write's epoch, edges are mixed
            lo, hi = words.start, words.stop
            first, end = (lo + _BW - 1) >> _BLK, hi >> _BLK
            if first < end:
                self.blk_w[first:end] = (agent << 32) | clock
                self.blk_wasync[first:end] = async_write
            if lo & (_BW - 1):
                self.blk_w[lo >> _BLK] = _MIXED
            if hi & (_BW - 1):
                self.blk_w[hi >> _BLK] = _MIXED
        else:
            self.blk_w[words >> _BLK] = _MIXED

    def write_warps(self, words, warps, pc, owner=None) -> bool:
        """Generic-proxy writes of ``words`` (distinct word ids) by several warps at their
        current epochs: word ``i`` is written by ``warps[owner[i]]`` at PC ``pc[i]`` (``owner``
        None: equal consecutive blocks, one per warp, all at PC ``pc``). Records them and returns
        True when every check passes; returns False, recording nothing, otherwise -- the caller
        then replays the warps one by one, which produces the exact report (or a benign
        verdict)."""
        if self.pending:
            self.flush_reads()
        run = _sorted_run(words, owner, pc) if self.shortcuts else None
        if run is not None:         # one contiguous run: the same triples in word order, as slices
            words, owner, pc = run
        span = _span(words)
        self._settle(words, span)
        hb = self.hb
        k = len(warps)
        if owner is None:
            owner = np.repeat(np.arange(k), len(words) // k)
        vcs = np.stack([hb.warp_vc(w) for w in warps])            # (warps, agents)
        agents = np.array([w.agent for w in warps])
        ag = agents[owner]
        wa = self.w_agent[words]
        sel = (wa >= 0) & (wa != ag)
        if sel.any() and (self.w_clock[words][sel] > vcs[owner[sel], wa[sel]]).any():
            return False
        nc = self.ncols
        if nc:
            ca = self.col_agent[:nc]
            lim = vcs[:, ca].T                                       # (readers, warps)
            lim[ca[:, None] == agents[None, :]] = 1 << 60           # a warp's own reads
            if not (self._block_reads(span, nc)[:, None] <= lim).all():     # see write()
                if (self.r_clock[:nc, words] > lim[:, owner]).any():
                    return False
                self.r_clock[:nc, words] = 0
        self.w_agent[words] = ag
        self.w_clock[words] = vcs[np.arange(k), agents][owner]
        self.w_pc[words] = pc
        self.w_async[words] = False
        if run is not None:
            self.blk_w[span[0] >> _BLK:(span[1] >> _BLK) + 1] = _MIXED
        else:
            self.blk_w[_word_blocks(words)] = _MIXED
        return True

    def exit_check(self):
        """The CTA exits: its shared memory may be reassigned, so every asynchronous read of it
        (TMA store sources) must be known complete to the warp that issued it."""
        if self.pending:
            self.flush_reads()
        hb = self.hb
        for a, c in self.cols.items():
            ag = hb.agents[a]
            if ag.kind != "bulk" or ag.cta is not self.cta:
                continue
            w = ag.cta.warps[ag.wid]
            last = int(self.r_clock[c].max())
            if last > hb.warp_vc(w)[a]:
                word = int(np.argmax(self.r_clock[c]))
                ln = self.cta.launch
                if "bulk-wait" in hb.allow:
                    continue
                raise RaceError(
                    f"data race on shared memory {ln.program.smem_symbol(4 * word, self.cta.dyn_base)} "
                    f"(CTA {self.cta.ctaid}, byte offset {4 * word}):\n"
                    f"    read by {hb.describe(a, int(self.r_pc[c, word]), ln)} (bulk group {last - 1})\n"
                    f"    may still run when the CTA exits and its shared memory is reassigned; missing: "
                    f"cp.async.bulk.wait_group.read covering the group before the issuing thread exits "
                    f"(PTX ISA: cp.async.bulk.wait_group)" + hb.seed_note() + cite("bulk-wait"))

    # -- reports -----------------------------------------------------------------------------
    def place(self, word):
        """The location of shadow ``word`` in a race report."""
        cta = self.cta
        loc = cta.launch.program.smem_symbol(4 * word, cta.dyn_base)
        return f"shared memory {loc} (CTA {cta.ctaid}, byte offset {4 * word})"

    def _edge(self, pa, agent, mode, edge):
        """The edge that would have ordered prior agent ``pa``'s access before ``agent``'s."""
        if edge is not None:
            return edge
        kinds = self.hb.agents
        pkind = kinds[pa].kind
        edge = pkind if pkind != "warp" or kinds[agent].kind == "warp" else "warp"
        if pkind == "cpasync" and mode == "read" and kinds[agent].kind in ("wgmma", "bulk"):
            edge = "cpasync"
        return edge

    def _report(self, words, agent, pc, what, mode, edge, col=None, lenient=None):
        """Raise the report for the first of ``words`` (candidate word ids; ``col``: the reader
        column of each, for a write after reads) whose rule the launch does not opt out of
        (``HB.allow``); return when every candidate's rule is allowed."""
        hb = self.hb
        cta = self.cta
        ln = cta.launch
        words = np.atleast_1d(np.asarray(words))
        self._settle(words)
        cols = None if col is None else np.broadcast_to(np.asarray(col), words.shape)
        pas = self.w_agent[words] if cols is None else self.col_agent[cols]
        uniq, inv = np.unique(pas, return_inverse=True)        # the rule depends on the prior agent only
        rules = np.array([EDGE_RULE[self._edge(int(a), agent, mode, edge)] for a in uniq.tolist()], object)[inv]
        if lenient is not None:         # known to some issuing warp of a collective wgmma
            lv, lp = hb.fit(lenient[0]), hb.fit(lenient[1])
            k = self.w_clock[words]
            known = (k <= lv[pas]) & (self.w_async[words] | (k <= lp[pas]))
            rules[known] = "wgmma-warpgroup-barrier"
        keep = np.flatnonzero(~np.isin(rules, list(hb.allow))) if hb.allow else np.arange(len(words))
        if not len(keep):
            return
        i = int(keep[0])
        word, pa, rid = int(words[i]), int(pas[i]), rules[i]
        if cols is None:
            ppc, pmode = int(self.w_pc[word]), "write"
        else:
            ppc, pmode = int(self.r_pc[cols[i], word]), "read"
        raise RaceError(
            f"data race on {self.place(word)}:\n"
            f"    {pmode} by {hb.describe(pa, ppc, ln)}\n"
            f"    {mode} by {hb.describe(agent, pc, ln)} ({what})\n"
            f"    are not ordered by synchronisation; missing: {RULES[rid].missing}" + hb.seed_note() + cite(rid))
