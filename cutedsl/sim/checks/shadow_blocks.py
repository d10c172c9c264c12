"""The per-block summaries of the shared-memory race shadow (:class:`cutedsl.sim.checks.shadow.Shadow`
inherits them): per 1 KiB block, the epoch of the one write that covered it whole (a TMA box) and
the latest read clock of each reader, which judge the common cases -- a wgmma operand read of TMA
boxes, a TMA box over buffers the consumers released -- without reading a word; and the lazy
record of a whole-block write (its words written back only when a per-word access needs them).
Every shortcut gives the per-word verdict: tests/sim/test_sim_shadow_paths.py and
tests/sim/test_sim_shadow_lazy.py compare them with the per-word path.
"""
from __future__ import annotations

import weakref

import numpy as np

from .shadow_words import BLOCK_SHIFT

_BLK = BLOCK_SHIFT
_BW = 1 << _BLK
_NEVER, _MIXED = -2, -1     # Shadow.blk_w: no write yet / not one write's
_SPANS = {}                 # (what, id of a cached plan's array) -> (weak reference to the array, that value of it)


def _fixed(a) -> bool:
    """Whether array ``a`` is a cached plan's (read-only, owning its data: a read-only view may show
    data that changes), whose derived values are kept by its id while it lives."""
    return not a.flags.writeable and a.flags.owndata


def _forget(key, ref):
    if _SPANS.get(key, (None,))[0] is ref:
        del _SPANS[key]


def _cached(key, a, make):
    """``make()`` for array ``a``, kept while ``a`` lives: a weak reference, so a plan's arrays (kept by
    the tensor map or the launch that made them) are not held alive by this table after they go."""
    hit = _SPANS.get(key)
    if hit is not None and hit[0]() is a:
        return hit[1]
    v = make()
    if isinstance(v, np.ndarray):
        v.flags.writeable = False
    _SPANS[key] = (weakref.ref(a, lambda r, k=key: _forget(k, r)), v)
    return v


def _span(words):
    """``(lowest, highest)`` word id of ``words`` (a slice or an array of word ids); kept for the
    arrays of cached plans (a batched store's flush plan, machine/warpbatch.py; a TMA box's words,
    engines/tma_box.py)."""
    if isinstance(words, slice):
        return words.start, words.stop - 1
    if not _fixed(words):
        return int(words.min()), int(words.max())
    return _cached(("span", id(words)), words, lambda: (int(words.min()), int(words.max())))


def _word_blocks(words):
    """The 1 KiB blocks of ``words`` (an array of word ids): distinct, and kept, for a cached plan's."""
    if not _fixed(words):
        return words >> _BLK
    return _cached(("blocks", id(words)), words, lambda: np.unique(words >> _BLK))


def _sorted_run(words, owner, pc):
    """``(slice, owner, pc)``: the same (word, owner, PC) triples as ``words``, ``owner``, ``pc`` (a
    batched store's flush plan, :meth:`Shadow.write_warps`) in word order, when its words are one
    contiguous run (an epilogue's staging tile) -- so the shadow's gathers and scatters are slices;
    None otherwise, or when an array is not a cached plan's. Kept for the plan's arrays."""
    if owner is None or not (_fixed(words) and _fixed(owner) and (np.ndim(pc) == 0 or _fixed(pc))):
        return None

    def make():
        lo, hi = _span(words)
        if hi - lo + 1 != len(words) or len(owner) != len(words):
            return None
        order = np.argsort(words, kind="stable")
        if (np.diff(words[order]) != 1).any():     # a repeated word: the span has a hole, not a run
            return None
        return (owner, pc, slice(lo, hi + 1), owner[order], pc if np.ndim(pc) == 0 else pc[order])
    hit = _cached(("run", id(words)), words, make)
    if hit is None or hit[0] is not owner or hit[1] is not pc:
        return None
    return hit[2:]


class BlockSummaries:
    """The block-level checks and the lazy whole-block record of :class:`~cutedsl.sim.checks.shadow.Shadow`
    (its arrays: ``blk_w``, ``blk_wasync``, ``blk_pc``, ``lazy``, ``blk_read`` and the per-word ones)."""

    def _blocks_known(self, blocks, vc, pvc, async_read) -> bool:
        """Every write to ``blocks`` is known to a reader with ``vc``/``pvc`` (an async-proxy
        reader: generic writes through ``pvc``), judged from whole-block write epochs; False
        when a block is mixed or a write is not known (the per-word check then decides)."""
        e = self.blk_w[blocks]
        if e.min() >= 0:            # the usual case (TMA-filled operands): every block written whole
            if ((e & 0xFFFFFFFF) > self.hb.fit(vc)[e >> 32]).any():
                return False
            if async_read:
                wa = self.blk_wasync[blocks]
                if not wa.all():
                    e = e[~wa]
                    return not ((e & 0xFFFFFFFF) > self.hb.fit(pvc)[e >> 32]).any()
            return True
        if (e == _MIXED).any() or (self.initcheck and (e == _NEVER).any()):
            return False
        wr = e >= 0
        if not wr.any():
            return True
        e = e[wr]
        ag = e >> 32
        ck = e & 0xFFFFFFFF
        hb = self.hb
        if (ck > hb.fit(vc)[ag]).any():
            return False
        if async_read:
            gen = ~self.blk_wasync[blocks][wr]
            if gen.any() and (ck[gen] > hb.fit(pvc)[ag[gen]]).any():
                return False
        return True

    def _whole_blocks_known(self, words, agent, vc) -> bool:
        """``words`` (a slice of whole 1 KiB blocks) lie in blocks each never written (``_NEVER``:
        no word has a write) or last written whole by one write (a TMA box: ``blk_w``, so every
        word of the block carries that epoch) that is ``agent``'s own or known to ``vc``: the
        write-write check of a write to them passes without reading a word."""
        e = set(self.blk_w[words.start >> _BLK:words.stop >> _BLK].tolist())     # a box: one epoch or a few
        e.discard(_NEVER)
        if not e:
            return True
        if min(e) < 0:
            return False
        vc = self.hb.fit(vc)
        return all((x >> 32) == agent or (x & 0xFFFFFFFF) <= vc[x >> 32] for x in e)

    def _settle(self, words, span=None):
        """Write back the per-word epochs of the lazily recorded whole-block writes (``lazy``; a
        block never written: no write, agent -1) in the blocks ``words`` span (``span``: their
        :func:`_span`), before a per-word access reads them or overwrites part of a block; the
        blocks keep their epoch (``blk_w``), which each of their words now holds. (A block of the
        span that ``words`` miss is written back too: that changes no verdict, and each lazy
        write is written back at most once.)"""
        lo, hi = span or _span(words)
        lz = self.lazy[lo >> _BLK:(hi >> _BLK) + 1]
        if not lz.any():
            return
        ids = (np.flatnonzero(lz) + (lo >> _BLK)).tolist()
        ep = self.blk_w[ids].tolist()
        pcs = self.blk_pc[ids].tolist()
        asy = self.blk_wasync[ids].tolist()
        i = 0
        while i < len(ids):         # runs of adjacent blocks of one write (a box): one fill each
            j = i + 1
            while (j < len(ids) and ids[j] == ids[j - 1] + 1 and ep[j] == ep[i] and pcs[j] == pcs[i]
                   and asy[j] == asy[i]):
                j += 1
            s = slice(ids[i] << _BLK, (ids[j - 1] + 1) << _BLK)
            self.w_agent[s] = ep[i] >> 32                           # (_NEVER: -1, no write)
            self.w_clock[s] = ep[i] & 0xFFFFFFFF if ep[i] >= 0 else 0
            self.w_pc[s] = pcs[i]
            self.w_async[s] = asy[i]
            i = j
        self.lazy[ids] = False

    def _block_reads(self, span, nc):
        """Per reader column, the latest read clock in the 1 KiB blocks of the words ``span``
        (:func:`_span`) covers."""
        lo, hi = span
        return self.blk_read[:nc, lo >> _BLK:(hi >> _BLK) + 1].max(axis=1)
